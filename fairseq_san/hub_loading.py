"""``from_pretrained`` of the plugin's models (``models.hub_model``): fairseq's, returning the
plugin's hub interface (``hub.SANHubInterface``), its keywords checked at load.

Its keywords are checked where ``--model-overrides`` are (``fairseq_fixes.model_overrides``),
its ``generation_args`` (which fairseq set on the generation config unchecked: a misspelt key
failed only at ``translate()``, ``san_decoding`` under fairseq's task was ignored) as the
keywords of ``translate()``, at load.

It takes local folders only. fairseq's ``file_utils.load_archive_file`` downloads a URL (or a
name of the model's ``hub_models()``), and unpacks it or a local archive file with
``tarfile.extractall`` unfiltered (a member ``model/../../x`` is written outside the folder, a
``.pth`` file into site-packages: code run at the next start), then deletes the archive: a
received archive could write anywhere. The user unpacks it and passes the folder. A data folder
(or a bpe file of the model folder) whose path holds ``${`` is refused: fairseq sets it on the
configuration, which would resolve it.
"""

import argparse
import os
import re
import urllib.parse
from typing import Any, Dict, List, Optional

import torch
from fairseq import hub_utils
from fairseq.dataclass.configs import GenerationConfig
from fairseq.models import FairseqLanguageModel
from omegaconf import DictConfig, open_dict
from omegaconf.errors import MissingMandatoryValue, ValidationError

from fairseq_san import options
from fairseq_san.errors import BosTokenUnlikeTask, NotThePluginsModel, UsageError
from fairseq_san.fairseq_fixes.model_overrides import ensemble_trained_alike
from fairseq_san.fairseq_fixes.namespace_overrides import interpolation_refused
from fairseq_san.fairseq_fixes.one_line_errors import (
    NO_LANGUAGE_PAIR,
    fairseqs_bad_input,
    missing_component_option,
)
from fairseq_san.fairseq_fixes.retained_dropout import check_retained_modules
from fairseq_san.files import glob_in, language_model_data, translation_dictionaries
from fairseq_san.hub import (
    GIVEN_AS_GENERATION_ARGS,
    SANHubInterface,
    check_read_by_hub,
    keywords_spelt,
    unread_by_hub,
)
from fairseq_san.models.option_checks import MODEL_OPTION_HERE, command_line_choices
from fairseq_san.tasks.decoding import (
    check_generation_keys,
    check_generation_value_types,
    invalid_choice,
    plugin_option_misplaced,
)

# How a key of from_pretrained's generation_args is named in a message.
GENERATION_ARGS_KEY = "a key of from_pretrained's generation_args"


def check_generation_arg_keys(generation_args: Any) -> None:
    """Refuse ``from_pretrained``'s ``generation_args`` if it is no dict of generation options:
    fairseq sets each on the generation config unchecked."""
    if not isinstance(generation_args, dict):
        raise UsageError(
            f"from_pretrained(generation_args={generation_args!r}): it takes a dict of "
            "generation options, e.g. generation_args={'beam': 4}"
        )
    check_read_by_hub(generation_args, GIVEN_AS_GENERATION_ARGS, at_build=True)  # seed too
    check_generation_keys(generation_args, GENERATION_ARGS_KEY, misplaced_in_generation_args)
    check_generation_value_types(generation_args, GENERATION_ARGS_KEY)


def misplaced_in_generation_args(option: options.Option) -> str:
    """Why a plugin option that is no decoder's does nothing in ``generation_args``."""
    if option.alias_of is not None:
        return plugin_option_misplaced(option)  # deprecated: the option to pass instead
    given = f"{option.name}{GIVEN_AS_GENERATION_ARGS}"
    if option in options.ANALYSIS_OPTIONS:
        return (
            f"{given} is an option of the attention analysis, which runs in fairseq-validate "
            "only: the generation would ignore it"
        )
    return (
        f"{given} is an option of the model, not of the generation: give it to "
        f"from_pretrained(..., {option.name}=...)"
    )


def from_pretrained(
    model_class: type, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".",
    **kwargs,
) -> SANHubInterface:
    """fairseq's ``from_pretrained`` (``BaseFairseqModel``'s) for ``model_class``, with the
    plugin's interface. Its keywords are the checkpoint's overrides, checked as
    ``--model-overrides`` are (``fairseq_fixes.model_overrides``: ``task='translation'`` for a
    checkpoint of another task, which fairseq ignored, is refused there); ``generation_args``
    as the keywords of ``translate()``. The model and its data are local folders only."""
    generation_args = kwargs.get("generation_args") or {}
    check_generation_arg_keys(generation_args)
    if "beam" in kwargs:  # fairseq's hub decodes with generate()'s beam (5), not the config's
        raise UsageError(
            f"from_pretrained(beam={kwargs['beam']!r}): the hub decodes with the beam of "
            f"generation_args or of each call: pass generation_args={{'beam': "
            f"{kwargs['beam']!r}}}, or translate(..., beam={kwargs['beam']!r})"
        )
    if "archive_map" in kwargs:  # fairseq's from_pretrained: "got multiple values", a TypeError
        raise UsageError(
            "from_pretrained(archive_map=...): the hub loads a local model folder "
            "(model_name_or_path) only: leave archive_map out"
        )
    if "model_overrides" in kwargs:  # fairseq set it on the config, and nothing read it there
        raise UsageError(
            f"from_pretrained(model_overrides={kwargs['model_overrides']!r:.60}) would be "
            "ignored: the hub's keywords are the overrides; give each as one, "
            "from_pretrained(..., san_policy=...)"
        )
    check_no_decoding_keyword(kwargs)
    check_load_keywords(kwargs)
    check_decoder_keyword_values(model_class, kwargs)
    kwargs = with_decoder_keywords_in_task(kwargs)
    user_dir = kwargs.get("user_dir")
    if user_dir is not None and not os.path.isdir(str(user_dir)):  # fairseq's FileNotFoundError
        raise UsageError(
            f"from_pretrained(user_dir={user_dir!r}): no such folder (a --user-dir plugin's "
            "package folder)"
        )
    archive_map = model_class.hub_models()
    model_path = local_folder(model_name_or_path, archive_map, "model_name_or_path")
    data_path = data_folder(data_name_or_path, model_path, archive_map)
    folder_files = [os.path.join(model_path, name) for name in FOLDER_FILES]
    check_regular_files(folder_files + glob_in(data_path, "dict*.txt"))
    check_no_interpolated_paths(data_path, folder_files)
    try:
        loaded = hub_utils.from_pretrained(
            model_path,
            str(checkpoint_file),
            data_path,
            archive_map=None,  # model_path is a folder: fairseq would map one named as an archive
            **kwargs,
        )
    except Exception as error:
        problem = data_problem(data_name_or_path, data_path, error) or invalid_value(error)
        if problem is not None:
            raise UsageError(problem) from error
        if OVERRIDES_FLAG in str(error):  # a checkpoint's check, which names the command line's
            raise type(error)(str(error).replace(OVERRIDES_FLAG, OVERRIDES_KEYWORDS)) from None
        decoder = decoder_keyword_unread(error, kwargs) or decoder_keyword_foreign(error)
        if decoder is not None:
            raise UsageError(decoder) from None
        bos_token = bos_token_problem(error, checkpoint_file, kwargs.get("task"))
        if bos_token is not None:
            raise UsageError(bos_token) from None
        raise
    check_stored_files(loaded["args"], kwargs, model_path)
    check_model_kind(model_class, loaded["models"][0], checkpoint_file)
    check_bpe_files_read(loaded["args"], kwargs)
    check_static_keywords_decode(loaded["task"], kwargs)
    check_retained_dropouts(loaded["models"], generation_args)
    try:
        hub = SANHubInterface(loaded["args"], loaded["task"], loaded["models"])
    except MissingMandatoryValue as error:  # its bpe or tokenizer without a file it reads
        raise UsageError(missing_component_option(error, as_keyword=True)) from None
    except (OSError, RuntimeError) as error:  # a file its bpe reads: missing, a folder, no model
        said = fairseqs_bad_input(error)
        if said is None:
            raise
        raise UsageError(f"the hub's bpe or tokenizer: {said}") from None
    if generation_args:
        hub.check_loaded_generation_args(generation_args)
        hub.loaded_beam = generation_args.get("beam")
    return hub


# fairseq's options of the model's precision, which the hub's models do not read (they keep the
# checkpoint's float32 weights), and the call that does it instead.
PRECISION_KEYWORDS = {"fp16": "half()", "memory_efficient_fp16": "half()", "bf16": "bfloat16()",
                      "memory_efficient_bf16": "bfloat16()"}  # fmt: skip
# The batch sizes of from_pretrained's keywords, checked as the command line checks its flags.
BATCH_KEYWORDS = ("max_tokens", "batch_size")


def check_load_keywords(keywords: Dict[str, Any]) -> None:
    """Refuse a precision the hub would not apply (``fp16=True`` decoded in float32, its
    scores not fairseq-generate --fp16's; ``hub.half()`` does) and a batch size out of range
    (0 and -1 were read as no limit; 'abc' failed at the first call inside fairseq)."""
    from fairseq_san.fairseq_fixes.option_ranges import OPTION_RANGES

    for key, call in PRECISION_KEYWORDS.items():
        if keywords.get(key):
            raise UsageError(
                f"from_pretrained({key}={keywords[key]!r}) would be ignored: the hub keeps the "
                f"checkpoint's float32 weights; call .{call} on the hub it returns"
            )
    for key in BATCH_KEYWORDS:
        value, valid = keywords.get(key), OPTION_RANGES[key]
        if value is not None and (isinstance(value, bool) or not valid.holds(value)):
            said = valid.said_for(value)
            raise UsageError(f"from_pretrained({key}={value!r}): it must be {said}")


def check_retained_dropouts(models: List[torch.nn.Module], generation_args: Dict[str, Any]) -> None:
    """Refuse ``generation_args``' dropouts to keep that the models do not have, in the hub's
    words (the interface's build checks them too, naming the command line's flag)."""
    if generation_args.get("retain_dropout"):
        modules = generation_args.get("retain_dropout_modules")
        for model in models:
            check_retained_modules(model, modules, GIVEN_AS_GENERATION_ARGS)


def check_static_keywords_decode(task, keywords: Dict[str, Any]) -> None:
    """Refuse at load the static decoder's precision or execution where another decoding
    decodes (no ``san_decoding='static'``): the hub loaded, and each call refused them."""
    static_only = (options.DECODER_PRECISION.name, options.DECODER_EXECUTION.name)
    if not hasattr(task, "check_decoder_options") or not any(k in keywords for k in static_only):
        return  # fairseq's own task: the model refused them (``decoder_keyword_unread``)
    generation = argparse.Namespace()  # none: the task's options, as from_pretrained set them
    with keywords_spelt(keywords):
        task.check_decoder_options(generation, task.decoding(generation))


def check_decoder_keyword_values(model_class: type, keywords: Dict[str, Any]) -> None:
    """Refuse a decoder keyword's value outside its choices (a language model's decodings are
    fewer) in the hub's words, whatever the checkpoint's task: under fairseq's own task only the
    model checked it, and advised the command line (``--san-decoding``, ``--task``)."""
    switch = options.LM_DECODING if issubclass(model_class, FairseqLanguageModel) else None
    for option in options.DECODER_OPTIONS:
        if option.name not in keywords or option.alias_of is not None:
            continue  # the deprecated san_decoder: its task or the model say it
        value = str(keywords[option.name])
        choices = (switch or option).choices if option is options.DECODING else (
            command_line_choices(option)
        )
        if choices is not None and value not in choices:
            raise UsageError(invalid_choice(option, value, choices))


def decoder_keyword_unread(error: Exception, keywords: Dict[str, Any]) -> Optional[str]:
    """The hub's words for the model's refusal of a decoder keyword that reached it alone (a
    checkpoint of fairseq's own task, whose generator reads none): it advised the command
    line's ``--san-decoding`` and ``--task``; None for another error."""
    if not (isinstance(error, UsageError) and MODEL_OPTION_HERE in str(error)):
        return None
    names = options.DECODER_OPTION_NAMES
    key = next((key for key in keywords if key in names and str(error).startswith(key)), None)
    if key is None:
        return None
    task = re.search(r"\(with --task (\w+)\)", str(error))  # the plugin's task of this model
    plugin_task = task.group(1) if task else "translation_san"
    return (
        f"from_pretrained({key}={keywords[key]!r}): the task loaded is fairseq's own, whose "
        f"generator would ignore it: load the model with task={{'_name': '{plugin_task}'}} "
        f"beside {key}"
    )


def decoder_keyword_foreign(error: Exception) -> Optional[str]:
    """The hub's words for the refusal of a decoder keyword given to a model that is none of the
    plugin's (fairseq's ``transformer``), which advised the command line's flag: the plugin's
    task reads the static decoder's, given in its dict (beside it, the model refuses them too);
    only the plugin's models apply another decoding. None for another error."""
    if not (isinstance(error, NotThePluginsModel) and error.key in options.DECODER_OPTION_NAMES):
        return None
    said = f"from_pretrained({error.key}={error.value!r}): this checkpoint's model is none of "
    if str(error.value) in options.MODEL_DECODINGS:
        return f"{said}the plugin's models, which alone apply it: decode with 'fairseq' or 'static'"
    key, value = error.key, error.value
    if options.OPTIONS[key].alias_of is not None:  # the deprecated san_decoder
        key, value = options.OPTIONS[key].alias_of
    task = {"_name": "translation_san", options.DECODING.name: options.STATIC, key: value}
    return f"{said}the plugin's and reads no decoder option: give it to the task, task={task!r}"


def with_decoder_keywords_in_task(keywords: Dict[str, Any]) -> Dict[str, Any]:
    """``keywords`` with the decoder's (``san_decoding``, its precision and execution) put in a
    ``task`` dict given beside them: fairseq sets a keyword on every group that has it, except a
    group given as a dict, so the task of ``task={'_name': 'translation_san'}`` never had
    ``san_decoding='static'``, and the model's refusal advised the command line."""
    task = keywords.get("task")
    if not isinstance(task, dict):
        return keywords
    names = options.DECODER_OPTION_NAMES
    given = {key: value for key, value in keywords.items() if key in names and key not in task}
    return {**keywords, "task": {**task, **given}} if given else keywords


def bos_token_problem(error: Exception, checkpoint_file, task: Any) -> Optional[str]:
    """The hub's words for the refusal of a language model whose ``--add-bos-token`` is not its
    task's, which named the command line's flag: the hub builds the task from the checkpoint
    (an ensemble's, ``checkpoint_file`` 'A.pt:B.pt', from the first), so only an
    ``add_bos_token`` in the ``task`` given to ``from_pretrained`` or another checkpoint of an
    ensemble can differ; None for another error."""
    if not isinstance(error, BosTokenUnlikeTask):
        return None
    trained = error.trained
    said = f"from_pretrained(checkpoint_file={str(checkpoint_file)!r}"
    if task is not None and "add_bos_token" in task:  # the task's, whatever the ensemble's
        return (
            f"{said}, task=...): the model was trained {'with' if trained else 'without'} "
            f"--add-bos-token, and the task given {'lacks' if trained else 'has'} it: leave "
            "add_bos_token out of task (the hub takes the checkpoint's)"
        )
    if os.pathsep in str(checkpoint_file):
        rule = ensemble_trained_alike("the hub builds their task from the first")
        return f"{said}): some were trained with --add-bos-token, some without; {rule}"
    return None


# How the checks of a checkpoint name its overrides, and what the hub calls them.
OVERRIDES_FLAG, OVERRIDES_KEYWORDS = "out of --model-overrides", "out of from_pretrained's keywords"


def check_no_decoding_keyword(keywords: Dict[str, Any]) -> None:
    """Refuse a generation option among ``from_pretrained``'s own keywords: fairseq set it on the
    generation config as an override, checked by nothing (``sampling='False'`` failed at
    ``translate()`` deep inside fairseq, ``nbest=2`` was ignored), where ``generation_args`` and
    each call's keywords are checked; one that no generator of the hub reads, saying what to do
    instead (``unread_by_hub``: ``nbest``, refused in ``generation_args`` too)."""
    for key, value in keywords.items():
        unread = unread_by_hub(key, at_build=True)
        if unread is not None:  # generation_args and the calls would refuse it too
            raise UsageError(f"from_pretrained({key}={value!r}) would be ignored: {unread}")
        if key in GenerationConfig.__dataclass_fields__:
            raise UsageError(
                f"from_pretrained({key}={value!r}) is a decoding option: pass "
                f"generation_args={{'{key}': {value!r}}} (checked as the calls' keywords are), "
                f"or translate(..., {key}={value!r})"
            )


def check_model_kind(model_class: type, model: torch.nn.Module, checkpoint_file) -> None:
    """Refuse a language model loaded with a translation model's ``from_pretrained``, or the
    reverse: fairseq returned the checkpoint's own kind of hub, and ``translate()`` continued
    the text, ``sample()`` of a language model's class translated it."""
    wanted = issubclass(model_class, FairseqLanguageModel)
    if isinstance(model, FairseqLanguageModel) == wanted:
        return
    kinds = ("translation model", "language model")
    loader = "TransformerLMSANModel" if not wanted else "TransformerSANModel"
    raise UsageError(
        f"{checkpoint_file} is a {kinds[not wanted]} ({type(model).__name__}), and "
        f"{model_class.__name__}.from_pretrained loads {kinds[wanted]}s: load it with "
        f"{loader}.from_pretrained"
    )


# The options of fairseq's bpe and tokenizers that name a file (or a URL) the hub reads as it
# starts.
BPE_FILE_OPTIONS = (
    "sentencepiece_model", "sentencepiece_model_path", "bpe_codes", "bpe_vocab",
    "bpe_vocab_file", "bpe_merges", "gpt2_encoder_json", "gpt2_vocab_bpe",
)  # fmt: skip


def check_bpe_files_read(cfg: DictConfig, keywords: Dict[str, Any]) -> None:
    """Refuse a bpe's file given to a model loaded without a bpe (``sentencepiece_model=`` alone:
    the text was decoded with no bpe, without a word; fairseq-interactive refuses the flag
    without ``--bpe``)."""
    given = [key for key in BPE_FILE_OPTIONS if keywords.get(key)]
    bpe = cfg.get("bpe") if isinstance(cfg, (dict, DictConfig)) else getattr(cfg, "bpe", None)
    if given and not (bpe and bpe.get("_name")):
        raise UsageError(
            f"from_pretrained({given[0]}={keywords[given[0]]!r}) would be ignored: the model is "
            "loaded without a bpe; pass the bpe it is for beside it (bpe='sentencepiece')"
        )


# The files fairseq's from_pretrained takes from the model folder for the bpe, by these names.
FOLDER_FILES = ("sentencepiece.bpe.model", "code", "bpecodes", "merges.txt", "vocab.json")


def check_no_interpolated_paths(data_path: str, folder_files: List[str]) -> None:
    """Refuse a data folder, or a file fairseq takes from the model folder, whose path holds
    ``${``: fairseq sets it on the checkpoint's configuration, which would resolve it (it was
    refused as an interpolation of the checkpoint's own)."""
    present = [("the model folder's file", path) for path in folder_files if os.path.exists(path)]
    for said, path in [("the data folder", data_path), *present]:
        if "${" in path:
            raise interpolation_refused(f"{said} {path}")


def check_stored_files(cfg: DictConfig, keywords: Dict[str, Any], model_path: str) -> None:
    """Refuse a file that the checkpoint, not the user, names for the hub to read as it starts
    (its bpe's model, codes or vocabulary) outside the model folder: fairseq read whatever the
    checkpoint named (a pipe hung it, a URL was fetched). The alignment dictionary of a stored
    ``--replace-unk``, which the hub loads and never uses, is not read."""
    for group in ("bpe", "tokenizer"):
        node = cfg.get(group) or {}
        named = keywords.get(group)  # bpe={'_name': ..., 'sentencepiece_model': ...} names too
        given = set(keywords) | (set(named) if isinstance(named, dict) else set())
        for key in BPE_FILE_OPTIONS:
            value = node.get(key)
            if key in given or not isinstance(value, str) or value in ("", "???"):
                continue
            if "://" in value or not is_inside(value, model_path):
                where = "a URL" if "://" in value else "a file outside the model folder"
                raise UsageError(
                    f"the checkpoint names {key}={value!r} for its {group} "
                    f"{node.get('_name')!r}, {where}: the hub reads only the files you name and "
                    f"those fairseq finds in the model folder ({', '.join(FOLDER_FILES)}): give "
                    f"from_pretrained(..., {key}='PATH')"
                )
            check_regular_files([value])
    if cfg.generation.get("replace_unk") and "replace_unk" not in (
        keywords.get("generation_args") or {}
    ):
        with open_dict(cfg.generation):
            cfg.generation.replace_unk = None


def check_regular_files(paths: List[str]) -> None:
    """Refuse a pipe or a device among ``paths``, the files of a received model and its data that
    the hub reads as it starts: reading a pipe without a writer hung ``from_pretrained`` (tar
    recreates a pipe it unpacks)."""
    for path in paths:
        if os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):
            raise UsageError(
                f"{path} is no regular file (a pipe or a device), and from_pretrained would read "
                "it: give the model's folder with the file itself"
            )


def is_inside(path: str, folder: str) -> bool:
    """Whether ``path`` lies inside ``folder`` (links resolved)."""
    return os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep)


def local_folder(path, archive_map: Dict, keyword: str) -> str:
    """``path`` (text or a ``pathlib.Path``) as an absolute folder, else a UsageError: fairseq's
    ``load_archive_file`` would download a URL or a name of ``archive_map`` and unpack it, and
    unpack a local file, with ``tarfile.extractall`` unfiltered (a member ``../x`` is written
    outside the folder: code, in site-packages) and then delete the archive; for a path that is
    not there it returned None, and ``from_pretrained`` failed later with a ``TypeError``."""
    text = str(path)
    if os.path.isdir(text):
        return os.path.abspath(text)
    unpack = (
        "unpack it yourself into a folder you choose (mkdir MODEL && tar -xf ARCHIVE -C MODEL) "
        "and pass the folder"
    )
    if text in archive_map or urllib.parse.urlparse(text).scheme:
        raise UsageError(
            f"from_pretrained({keyword}={text!r}): a name or URL of an archive to download, "
            "which fairseq would unpack unchecked (a member may be written anywhere); download "
            f"it, {unpack}"
        )
    if os.path.isfile(text):
        advice = file_advice(text, keyword, unpack)
        raise UsageError(f"from_pretrained({keyword}={text!r}) is a file, not a folder: {advice}")
    raise UsageError(f"from_pretrained({keyword}={text!r}): no such file or folder")


def file_advice(path: str, keyword: str, unpack: str) -> str:
    """What to pass instead of the file ``path``: a checkpoint's folder and name, or an archive's
    unpacked folder (fairseq would unpack it itself, unchecked, and replace it with the
    folder)."""
    if keyword == "model_name_or_path" and path.endswith(".pt"):
        folder, name = os.path.split(path)
        folder = folder or "."
        return f"pass its folder and name: from_pretrained({folder!r}, checkpoint_file={name!r})"
    return (
        "an archive, which fairseq would unpack unchecked (a member may be written anywhere) "
        f"and then delete; {unpack}"
    )


def data_problem(data_name_or_path, data_path: str, error: Exception) -> Optional[str]:
    """What is wrong with the data folder where loading failed on its dictionaries (``error``):
    none there, the other kind of model's (a translation's dict.SRC.txt and dict.TGT.txt, a
    language model's dict.txt), a translation's dictionaries without the data whose file names
    give fairseq the language pair, or without the one of a language the checkpoint names (its
    ``-s``/``-t``, which fairseq read unchecked: a ``FileNotFoundError``); None for another
    failure."""
    missing = os.path.basename(str(error.filename)) if isinstance(error, FileNotFoundError) else ""
    no_lm_dictionary = missing == "dict.txt"
    no_language_dictionary = missing.startswith("dict.") and missing.endswith(".txt") and (
        not no_lm_dictionary
    )
    messages = (str(error), str(error.__cause__))  # fairseq's, or the plugin's words for it
    no_language_pair = NO_LANGUAGE_PAIR in messages or no_language_dictionary
    if not (no_lm_dictionary or no_language_pair):
        return None
    translation = translation_dictionaries(data_path)
    language_model = language_model_data(data_path)
    said = f"from_pretrained(data_name_or_path={str(data_name_or_path)!r}): {data_path} holds "
    if no_lm_dictionary and translation:
        return said + (
            "a translation's data (dict.SRC.txt, dict.TGT.txt), and this checkpoint is a "
            "language model, whose task reads dict.txt (fairseq-preprocess --only-source "
            "output: examples/lm/prepare.sh): give its data"
        )
    if no_language_pair and language_model:
        return said + (
            "a language model's data (dict.txt), and this checkpoint translates, which needs "
            "dict.SRC.txt and dict.TGT.txt: give its data"
        )
    if no_language_dictionary and translation:
        languages = sorted(dictionary_language(path) for path in translation)
        return said + (
            f"no {missing}, the dictionary of {dictionary_language(missing)}, which the model "
            f"translates (it holds those of {', '.join(languages)}): give the binarized data "
            "the model was trained on"
        )
    if no_language_pair and translation:
        languages = sorted(dictionary_language(path) for path in translation)
        example = ", ".join(f"{side}={language!r}" for side, language in
                            zip(("source_lang", "target_lang"), languages))  # fmt: skip
        return said + (
            f"the dictionaries of {', '.join(languages)} and no binarized data whose names "
            "say which language is the source (train.SRC-TGT.*): give the pair the model "
            f"translates, from_pretrained(..., {example})"
        )
    if translation or language_model:
        return None
    default = " (the default, '.', is the model's folder)" if str(data_name_or_path) == "." else ""
    return said + (
        "no dictionary (dict.SRC.txt and dict.TGT.txt of a translation's data, dict.txt of a "
        f"language model's){default}: give the binarized data the model was trained on, or a "
        "folder with its dictionaries"
    )


# How omegaconf's ValidationError names an enum field's values.
ENUM_CHOICES = re.compile(r"expected one of \[([^\]]*)\]")


def invalid_value(error: Exception) -> Optional[str]:
    """The error for a keyword whose value its config field cannot take, where omegaconf's
    ValidationError spans lines (the field's key and config class): a plugin option's choice as
    ``translate()`` names it (``invalid_choice``: ``san_decoding='statik'``, a precision of the
    static decoder's table, ``san_decoder_precision='bf61'``), another the first line of
    omegaconf's, naming the keyword; None for another error."""
    key = getattr(error, "full_key", None)
    if not isinstance(error, ValidationError) or not key:
        return None
    option = options.OPTIONS.get(key)
    first_line = str(getattr(error, "msg", error)).splitlines()[0]
    allowed = ENUM_CHOICES.search(first_line)  # the task's own: a language model has fewer
    if option is not None and (option.choices or allowed):  # a table's (precision): enum's only
        choices = [choice.strip() for choice in allowed.group(1).split(",")] if allowed else None
        return invalid_choice(option, str(error.value), choices)
    return f"from_pretrained(..., {key}={error.value!r}): {first_line}"


def dictionary_language(path: str) -> str:
    """The language of a translation's dictionary file (``dict.de.txt``: de)."""
    return os.path.basename(path)[len("dict."):-len(".txt")]


def data_folder(data_name_or_path, model_path: str, archive_map: Dict) -> str:
    """The data folder as fairseq reads ``data_name_or_path``: inside the model's folder for a
    path that starts with "." (the default, ".": the model's folder itself), else as given; a
    UsageError naming where it looked if that is no folder."""
    text = str(data_name_or_path)
    first = text.split(os.pathsep)[0]
    if os.pathsep in text and not os.path.isdir(text) and os.path.isdir(first):
        raise UsageError(  # fairseq-train's sharded data, which said "no such file or folder"
            f"from_pretrained(data_name_or_path={text!r}): sharded data (DATA1{os.pathsep}"
            "DATA2...), which the hub does not read: pass one folder, the first, whose "
            "dictionaries fairseq-train read"
        )
    if not text.startswith("."):
        return local_folder(text, archive_map, "data_name_or_path")
    resolved = os.path.abspath(os.path.join(model_path, text))
    if not os.path.isdir(resolved):
        raise UsageError(
            f"from_pretrained(data_name_or_path={text!r}): no such folder {resolved}: fairseq "
            f"takes a data path that starts with '.' inside the model's folder ({model_path}); "
            "for a folder elsewhere, pass its absolute path (or one without the leading '.', "
            "from the working directory)"
        )
    return resolved
