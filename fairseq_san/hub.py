"""The plugin's models from Python (``from_pretrained``): fairseq's hub interface, its keywords
checked whatever task the checkpoint was trained with.

Upstream behaviour corrected: fairseq's ``GeneratorHubInterface.generate`` sets each keyword of
``translate()``, ``sample()`` and ``generate()`` on its generation config unchecked and hands it
to the checkpoint's task. The plugin's tasks check it (``tasks.decoding.check_generation_args``);
fairseq's do not, and a ``transformer_san`` model trained with fairseq-train's default task
(``translation``) decoded a misspelt ``bema=1`` at the default beam, and ``san_decoding="static"``
with fairseq's generator. ``SANHubInterface`` checks the keywords before any task sees them and
refuses the plugin's decoding options where the task cannot honour them. ``from_pretrained``
(the plugin's models', ``models.hub_model``) returns it; its keywords are checked where
``--model-overrides`` are (``fairseq_fixes.model_overrides``).
"""

import copy
import os
import urllib.parse
from typing import Any, Callable, Dict, Optional

from fairseq import hub_utils
from fairseq.tasks.language_modeling import LanguageModelingTask
from omegaconf import DictConfig, open_dict

from fairseq_san import options
from fairseq_san.errors import UsageError
from fairseq_san.tasks.decoding import DECODER_OPTION_NAMES, DecodingTask, check_generation_args


class SANHubInterface(hub_utils.GeneratorHubInterface):
    """fairseq's hub interface, refusing a generation keyword that no generator would follow."""

    def generate(
        self,
        tokenized_sentences,
        beam: int = 5,
        verbose: bool = False,
        skip_invalid_size_inputs: bool = False,
        inference_step_args: Optional[dict] = None,
        prefix_allowed_tokens_fn: Optional[Callable] = None,
        **kwargs,
    ):
        """fairseq's ``generate``, after its keywords (``kwargs``: the generation config's)
        are checked."""
        check_generation_args(self.generation_config(beam, kwargs))
        self.check_plugin_keywords(kwargs)
        return super().generate(
            tokenized_sentences,
            beam,
            verbose,
            skip_invalid_size_inputs,
            inference_step_args,
            prefix_allowed_tokens_fn,
            **kwargs,
        )

    def generation_config(self, beam: int, keywords: Dict[str, Any]) -> DictConfig:
        """The generation config fairseq's ``generate`` builds from ``beam`` and ``keywords``."""
        config = copy.deepcopy(self.cfg.generation)
        with open_dict(config):
            config.beam = beam
            for key, value in keywords.items():
                setattr(config, key, value)
        return config

    def check_plugin_keywords(self, keywords: Dict[str, Any]) -> None:
        """Refuse a plugin's decoding option for a checkpoint of fairseq's own task, whose
        generator would ignore it."""
        if isinstance(self.task, DecodingTask):
            return
        for key, value in keywords.items():
            if key in DECODER_OPTION_NAMES and options.OPTIONS[key].is_set(value):
                plugin_task = (
                    "language_modeling_san"
                    if isinstance(self.task, LanguageModelingTask)
                    else "translation_san"
                )
                raise UsageError(
                    f"{key}={value!r} is an option of the task {plugin_task}, and this "
                    f"model's task is {self.cfg.task._name}, whose generator would ignore it: "
                    f"load it with from_pretrained(..., task={{'_name': '{plugin_task}'}})"
                )


def from_pretrained(
    model_class: type, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".",
    **kwargs,
) -> SANHubInterface:
    """fairseq's ``from_pretrained`` (``BaseFairseqModel``'s) for ``model_class``, with the
    plugin's interface. Its keywords are the checkpoint's overrides, checked as
    ``--model-overrides`` are (``fairseq_fixes.model_overrides``: ``task='translation'`` for a
    checkpoint of another task, which fairseq ignored, is refused there)."""
    archive_map = model_class.hub_models()
    check_local_path(model_name_or_path, archive_map, "model_name_or_path")
    if not str(data_name_or_path).startswith("."):  # else inside the model's folder
        check_local_path(data_name_or_path, archive_map, "data_name_or_path")
    loaded = hub_utils.from_pretrained(
        model_name_or_path,
        checkpoint_file,
        data_name_or_path,
        archive_map=archive_map,
        **kwargs,
    )
    return SANHubInterface(loaded["args"], loaded["task"], loaded["models"])


def check_local_path(path, archive_map: Dict, keyword: str) -> None:
    """UsageError for a local ``path`` that is not there: fairseq's ``load_archive_file`` logs
    that it found nothing and returns None, and ``from_pretrained`` fails later with a
    ``TypeError``. A name of ``archive_map`` or a URL (any scheme) is fairseq's to fetch."""
    text = str(path)
    if text in archive_map or urllib.parse.urlparse(text).scheme:
        return
    if not os.path.exists(text):
        raise UsageError(f"from_pretrained({keyword}={text!r}): no such file or folder")
