"""``language_modeling_san``: fairseq's language modelling task plus the layer-similarity analysis.

Training, ``fairseq-eval-lm``, ``fairseq-generate``/``fairseq-interactive`` and the hub's
``sample`` are ``--task language_modeling``'s. ``fairseq-validate --san-analysis-dir DIR`` writes
the decoder self-attention JS matrix (``js.json``, the other kinds ``null``), its heatmap and
sample attention, as ``translation_san`` does for its three kinds (``tasks.attention_analysis``)::

    fairseq-validate DATA --user-dir fairseq_san --task language_modeling_san --path CKPT \\
        --sample-break-mode eos --valid-subset valid --san-analysis-dir DIR

``--san-decoding static`` generates with the static decoder (``static_decoding.lm_generator``:
the prompt prefilled in one pass, then greedy, beam or sampling steps; the same greedy output as
fairseq's generator). A prompt that leaves the model's positions no room for the start token and
a generated token is refused in one line before decoding (skipped by the batching where asked to
skip too long inputs), and so is one that leaves no room for a generated token under
``--max-len-b`` (fairseq's generators would print the prompt, cut to that length): the longest of
all those batched is checked at the first batch, before any output. A sentence to score (the
hub's ``score``) needs no room after it: it is refused only when the positions do not hold it.
A model trained with ``--add-bos-token`` scores it as it was trained (``StartTokensDataset``).
"""

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, Dictionary, FairseqDataset
from fairseq.dataclass import ChoiceEnum
from fairseq.sequence_scorer import SequenceScorer
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask
from torch import Tensor, nn

from fairseq_san import options
from fairseq_san.errors import UsageError
from fairseq_san.generation_options import check_no_alignment
from fairseq_san.options import option_field
from fairseq_san.tasks.attention_analysis import (
    AnalysisConfig,
    AttentionAnalysisTask,
    check_analysis_options,
)
from fairseq_san.tasks.decoding import DecodingTask, StaticDecoderConfig


logger = logging.getLogger(__name__)

# fairseq's MonolingualDataset puts --add-bos-token's start token before each sample's target as
# well as before its input: the model learns the start token after the start token.
START_TOKEN_GENERATED = (
    "this language model was trained with --add-bos-token: fairseq's dataset puts the start "
    "token <s> before each sample's targets too, so the model learned to predict <s> after <s>; "
    "a prompt's first token is scored where the model expects <s> (low), an empty prompt "
    "generates <s> over and over (printed as nothing), and fairseq-generate's --prefix-size N "
    "forces the target's <s> and its first N - 1 tokens"
)


@dataclass
class LanguageModelingSANConfig(LanguageModelingConfig, AnalysisConfig, StaticDecoderConfig):
    san_decoding: ChoiceEnum(options.LM_DECODING.choices) = option_field(options.LM_DECODING)


# Where fairseq-generate's prompts come from where it is given no --prefix-size.
WHOLE_SAMPLE_PROMPTS = "without --prefix-size, fairseq-generate prompts with each whole sample"


def check_room(tokens: int, generator: object, src_len: int, whole_samples: bool) -> None:
    """Refuse a prompt of ``tokens`` tokens that fills ``generator``'s longest output
    (``--max-len-a`` x ``src_len``, the batch's width, + ``--max-len-b``, the prompt included):
    fairseq's generator (and the static decoder) forces prompt tokens below that length only,
    then ends the output, which would be the prompt, cut, without a generated token.
    ``--match-source-len`` replaces that length. ``whole_samples``: the prompts are the batch's
    samples (no ``--prefix-size``), which fairseq-generate's user did not type as prompts."""
    if not tokens or getattr(generator, "match_source_len", False):
        return
    max_len_a, max_len_b = generator.max_len_a, generator.max_len_b
    limit = int(max_len_a * src_len + max_len_b)
    if tokens < limit:
        return
    allows = f"--max-len-b {max_len_b}"
    if max_len_a:
        allows = f"--max-len-a {max_len_a} x {src_len} + {allows} (= {limit} tokens)"
    longer = f"longer than {allows} allows: the output would be the prompt cut to {limit} tokens"
    if tokens == limit:
        longer = f"as long as {allows} allows: the output would be the prompt, nothing generated"
    whole = f" ({WHOLE_SAMPLE_PROMPTS})"
    raise UsageError(
        f"a prompt of {tokens} tokens is {longer}; raise --max-len-b above "
        f"{tokens - limit + max_len_b} (it counts the prompt){whole if whole_samples else ''}"
    )


def longest_sample(dataset, indices: np.ndarray) -> Dict:
    """The batch of one sample, the longest of ``dataset``'s among ``indices`` (not empty:
    fairseq's batches hold one)."""
    sizes = dataset.sizes[0] if isinstance(dataset.sizes, list) else dataset.sizes
    index = int(indices[np.argmax(np.asarray(sizes)[indices])])
    return dataset.collater([dataset[index]])


def prompts_of(sentences: List[int], whole_samples: bool, prefix: bool = False) -> str:
    """The prompts of ``sentences``, and where fairseq-generate's come from (``whole_samples``:
    no ``--prefix-size``; ``prefix``: its first tokens) and why they can hold the end of
    sentence."""
    said = f"the prompt of sample {', '.join(map(str, sentences))}"
    if prefix:
        return (
            f"--prefix-size: {said} (its first tokens, which reach past a sentence's end where the "
            "sample is shorter than --prefix-size or is a block of --sample-break-mode none or "
            "complete)"
        )
    if not whole_samples:
        return said
    return (
        f"{said} (without --prefix-size, fairseq-generate prompts a language model with each "
        "whole sample: with --add-bos-token, --sample-break-mode eos begins each with the end of "
        "the sentence before it, and the blocks of the other modes hold sentence ends)"
    )


def remedy(whole_samples: bool, prefix: bool = False) -> str:
    """How to prompt without the end of sentence."""
    if prefix:
        return "pass a smaller --prefix-size"
    if whole_samples:
        return "pass --prefix-size N to prompt with each sample's first N target tokens"
    return "leave the end-of-sentence symbol out of the prompt"


def prompt_ends_refused(
    sentences: List[int], beam: int, whole_samples: bool, prefix: bool
) -> UsageError:
    """The error for ``sentences`` whose prompts (``prompts_of``) begin with the end of sentence,
    which fairseq's generator failed at its maximum length above beam 1 (a traceback)."""
    return UsageError(
        f"{prompts_of(sentences, whole_samples, prefix)} begins with the end of sentence "
        f"(EOS), which beam search at --beam {beam} cannot finish: "
        f"{remedy(whole_samples, prefix)} (at --beam 1 the hypothesis ends at once, with no "
        "token generated)"
    )


def prompt_ends_warning(sentences: List[int], whole_samples: bool, prefix: bool) -> str:
    """The warning for ``sentences`` whose prompts (``prompts_of``) hold the end of sentence:
    the search forces it and ends the hypothesis there (fairseq's output lacked a word why)."""
    return (
        f"{prompts_of(sentences, whole_samples, prefix)} holds the end of sentence (EOS), "
        "which the search forces: the hypothesis ends there, with no token generated; "
        f"{remedy(whole_samples, prefix)} (said of the first batch with such prompts only)"
    )


def prompt_start_token(dictionary: Dictionary, args: object) -> int:
    """The token before each prompt (the ``bos_token`` of fairseq's ``inference_step``)."""
    return dictionary.bos() if getattr(args, "add_bos_token", False) else dictionary.eos()


def forced_prompts(sample: Dict, prefix_tokens: Optional[Tensor], start: int) -> Tensor:
    """The batch's prompts as fairseq's ``inference_step`` forces them, padded on the right:
    ``prefix_tokens`` (fairseq-generate's ``--prefix-size``), else the batch's tokens after
    their ``start`` token (fairseq-interactive's and the hub's prompts, or whole sentences)."""
    if prefix_tokens is None:
        prefix_tokens = sample["net_input"]["src_tokens"]
        if prefix_tokens.nelement() and prefix_tokens[:, 0].eq(start).all():
            prefix_tokens = prefix_tokens[:, 1:]
    return prefix_tokens


def scored_tokens(tokens: Tensor, eos: int) -> int:
    """The tokens of a sentence that fairseq's ``build_dataset_for_inference`` scores: those
    between the end-of-sentence tokens at either end, which its ``StripTokenDataset`` strips."""
    words = (tokens != eos).nonzero()
    return int(words[-1] - words[0] + 1) if len(words) else 0


class StartTokensDataset(BaseWrapperDataset):
    """fairseq's sentences to score (``build_dataset_for_inference``: input ``<s> w1 ... wn``),
    read as a model trained with ``--add-bos-token`` read its samples, and fairseq-eval-lm scores
    them (``MonolingualDataset``: input ``<s> </s> w1 ... wn``, targets ``<s> w1 ... wn``): each
    input takes ``</s>`` after ``<s>``, a position more, and its first target, ``<s>``, is not
    scored (fairseq's scorer starts at each sample's ``start_indices``)."""

    # fairseq's, over the sizes of this dataset (``BaseWrapperDataset``'s read the sentences')
    batch_by_size = FairseqDataset.batch_by_size
    filter_indices_by_size = FairseqDataset.filter_indices_by_size

    def __init__(self, dataset: FairseqDataset, dictionary: Dictionary) -> None:
        super().__init__(dataset)
        self.dictionary = dictionary

    @property
    def sizes(self) -> np.ndarray:
        (sizes,) = self.dataset.sizes
        return sizes + 1

    def num_tokens(self, index: int) -> int:
        return self.dataset.num_tokens(index) + 1

    def size(self, index: int) -> int:
        return self.dataset.size(index) + 1

    def collater(self, samples: List[Dict]) -> Dict:
        batch = self.dataset.collater(samples)
        if not batch:
            return batch
        net_input, tokens = batch["net_input"], batch["net_input"]["src_tokens"]
        starts = tokens.new_tensor([self.dictionary.bos(), self.dictionary.eos()])
        starts = starts.expand(len(tokens), 2)
        net_input["src_tokens"] = torch.cat([starts, tokens[:, 1:]], dim=1)  # after their <s>
        net_input["src_lengths"] = net_input["src_lengths"] + 1
        batch["target"] = torch.cat([starts[:, :1], batch["target"]], dim=1)
        batch["start_indices"] = [1] * len(tokens)
        return batch


class CallState(threading.local):
    """The plugin language model's record of the call it serves, each thread's own: the hub's
    calls in threads of their own share its task, and one call's scorer, prompts or
    ``skip_invalid_size_inputs`` decided another's checks (a sentence to score refused as a
    prompt, a sample checked against another call's longest prompt and max_len_b). A copy of
    the task (``copy.deepcopy`` of a hub) starts with a record of its own."""

    scoring = False  # whether the last generator built scores (``build_generator``)
    typed_prompts = False  # whether prompts come from build_dataset_for_inference
    # whether the batching skips prompts too long for the positions (fairseq-interactive's
    # --skip-invalid-size-inputs-valid-test, the hub's skip_invalid_size_inputs)
    skipping_too_long = False
    prompts = None  # the dataset of the last typed prompts (filter_indices_by_size)
    batched = None  # (dataset, the indices kept) of the last dataset batched

    def __deepcopy__(self, memo: dict) -> "CallState":
        return type(self)()  # a thread's record cannot be copied ("cannot pickle '_thread._local'")

    def __reduce__(self):
        return type(self), ()


class PerCall:
    """A task attribute read from and written to the thread's ``CallState`` (``task.calls``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, task, owner: Optional[type] = None):
        return self if task is None else getattr(task.calls, self.name)

    def __set__(self, task, value) -> None:
        setattr(task.calls, self.name, value)


@register_task("language_modeling_san", dataclass=LanguageModelingSANConfig)
class LanguageModelingSANTask(AttentionAnalysisTask, DecodingTask, LanguageModelingTask):
    """``language_modeling`` with the attention analysis of ``--san-analysis-dir`` and
    ``--san-decoding static`` (``tasks.decoding``)."""

    decoding_switch = options.LM_DECODING
    # The call's record (``CallState``), each thread's own.
    scoring, typed_prompts, skipping_too_long = PerCall(), PerCall(), PerCall()
    prompts, batched = PerCall(), PerCall()

    def __init__(self, args, dictionary, output_dictionary=None, targets=None) -> None:
        check_analysis_options(args)
        self.calls = CallState()
        super().__init__(args, dictionary, output_dictionary, targets)
        self.cfg = args
        self.start_token_said = False  # whether START_TOKEN_GENERATED was logged
        self.start_analysis()

    def analysis_masks(
        self, sample: dict, rows: Tensor, model: nn.Module
    ) -> Dict[str, Tuple[Tensor, Tensor]]:
        """The tokens of the model's input that are not padding."""
        tokens = sample["net_input"]["src_tokens"].index_select(0, rows)
        mask = tokens.ne(self.source_dictionary.pad())
        return {"decoder_self": (mask, mask)}

    def build_model(self, cfg, from_checkpoint: bool = False) -> nn.Module:
        """fairseq's; the task keeps the fewest positions of its models for ``check_prompt``."""
        model = super().build_model(cfg, from_checkpoint)
        positions = model.max_decoder_positions()
        self.positions = min(positions, getattr(self, "positions", positions))
        return model

    def check_prompt(self, tokens: int, whole_samples: bool = False, prefix: bool = False) -> None:
        """Refuse a prompt of ``tokens`` tokens (without the start token) that leaves the model
        no position to generate in: fairseq's generator would cut it, its batching drop it (where
        it is ``skipping_too_long``, the batching skips it: ``filter_indices_by_size``).
        fairseq-generate's prompts are its samples (``whole_samples``) or their first
        ``--prefix-size`` tokens (``prefix``), which its user shortens by those options."""
        if self.skipping_too_long:
            return
        positions = getattr(self, "positions", None)
        if positions is not None and tokens + 2 > positions:
            fits = positions - 2
            shorten = f"shorten it to at most {fits} tokens"
            if prefix:
                shorten = f"pass --prefix-size {fits} or less"
            elif whole_samples:
                shorten = (
                    f"{WHOLE_SAMPLE_PROMPTS}: pass --prefix-size N (N at most {fits}) to prompt "
                    f"with each sample's first N tokens, or --tokens-per-sample {fits} or less"
                )
            raise UsageError(
                f"a prompt of {tokens} tokens is longer than the model's {positions} positions "
                f"leave room for (the start token and one generated token): {shorten}"
            )

    def check_sentence(self, tokens: int, scored: int) -> None:
        """Refuse a sentence to score of ``tokens`` tokens (without the end-of-sentence token)
        that the model's positions do not hold after its start token (or two,
        ``StartTokensDataset``: fairseq's batching would refuse it with the sizes of its
        samples), or that has none to score, ``scored`` (the hub's ``score('')``, or
        ``score('</s>')``: ``scored_tokens``): the mean of no token's score, NaN."""
        if scored == 0:
            raise UsageError(
                "an empty sentence to score: a language model scores a sentence's tokens (not its "
                "end), and its score would be NaN; leave it out"
            )
        positions = getattr(self, "positions", None)
        starts = 1 + self.added_start_tokens()
        if positions is not None and tokens + starts > positions:
            after = "the start token"
            if starts == 2:
                after = "the start tokens <s> </s> of --add-bos-token"
            raise UsageError(
                f"a sentence of {tokens} tokens is longer than the model's {positions} positions "
                f"hold (after {after}): shorten it to at most {positions - starts} tokens"
            )

    def added_start_tokens(self) -> int:
        """The tokens this thread's call adds before each sentence beside fairseq's start token:
        1 where it scores for a model trained with --add-bos-token (``StartTokensDataset``)."""
        return int(bool(self.scoring and self.args.add_bos_token))

    def build_generator(self, models: List[nn.Module], args, *rest, **keywords):
        """The decoding task's generator; the task keeps whether it scores sentences (the hub's
        ``score``, ``--score-reference``) for ``build_dataset_for_inference``; no alignment
        (``check_no_alignment``)."""
        check_no_alignment(getattr(args, "print_alignment", None))
        generator = super().build_generator(models, args, *rest, **keywords)
        self.scoring = isinstance(generator, SequenceScorer)
        if not self.scoring and self.args.add_bos_token and not self.start_token_said:
            logger.warning(START_TOKEN_GENERATED)
            self.start_token_said = True
        return generator

    def build_dataset_for_inference(
        self, src_tokens: List[Tensor], src_lengths: List[int], **kwargs
    ):
        """fairseq-interactive's and the hub's prompts (``check_prompt``), or the sentences the
        hub's ``score`` scores (``check_sentence``: no token generated after them), checked
        without the end-of-sentence token that fairseq strips from them; a model trained with
        ``--add-bos-token`` scores them as it was trained (``StartTokensDataset``)."""
        self.typed_prompts = not self.scoring
        eos = self.source_dictionary.eos()
        for tokens in src_tokens:
            length = len(tokens) - int(len(tokens) > 0 and tokens[-1] == eos)
            if self.scoring:
                self.check_sentence(length, scored_tokens(tokens, eos))
            else:
                self.check_prompt(length)
        dataset = super().build_dataset_for_inference(src_tokens, src_lengths, **kwargs)
        self.prompts = None if self.scoring else dataset
        if self.added_start_tokens():
            return StartTokensDataset(dataset, self.source_dictionary)
        return dataset

    def filter_indices_by_size(
        self, indices, dataset, max_positions=None, ignore_invalid_inputs: bool = False
    ):
        """fairseq's, where typed prompts need one position more than their samples' size (the
        start token and the prompt): one to generate in (``check_prompt``). fairseq's batching
        skipped a prompt longer than the positions only, and one of the positions but one
        stopped the command; fairseq's warning names the lowered ``max_positions``."""
        if dataset is self.prompts and isinstance(max_positions, int):  # a model's, resolved
            max_positions -= 1
        indices = super().filter_indices_by_size(
            indices, dataset, max_positions, ignore_invalid_inputs
        )
        self.batched = dataset, indices
        return indices

    def inference_step(
        self,
        generator,
        models: List[nn.Module],
        sample: Dict,
        prefix_tokens: Optional[Tensor] = None,
        constraints: Optional[Tensor] = None,
    ):
        """fairseq's (after ``DecodingTask``'s checks), after ``check_prompts`` of the batch (a
        scorer, ``--score-reference``, forces none: it scores sentences), and at the first batch,
        of the longest sample of all those batched (fairseq batches the shortest first: the
        refusal came after the others' output, with advice for that batch only)."""
        if not isinstance(generator, SequenceScorer):
            batched, self.batched = self.batched, None
            if batched is not None and prefix_tokens is None:  # whole samples or typed prompts
                self.check_prompts(generator, longest_sample(*batched), None)
            self.check_prompts(generator, sample, prefix_tokens)
        return super().inference_step(generator, models, sample, prefix_tokens, constraints)

    def check_prompts(self, generator, sample: Dict, prefix_tokens: Optional[Tensor]) -> None:
        """``check_prompt`` and ``check_room`` of the longest prompt of ``sample`` that
        ``generator`` forces."""
        prompts = self.forced_tokens(sample, prefix_tokens)
        tokens = int(prompts.ne(self.source_dictionary.pad()).sum(dim=1).max())
        whole_samples = prefix_tokens is None and not self.typed_prompts  # fairseq-generate's
        self.check_prompt(tokens, whole_samples, prefix=prefix_tokens is not None)
        width = sample["net_input"]["src_tokens"].size(1)
        check_room(tokens, generator, width, whole_samples)

    def forced_ends_refused(
        self, sentences: List[int], beam: int, prefix_tokens: Optional[Tensor]
    ) -> UsageError:
        """``prompt_ends_refused`` of the task's prompts."""
        whole_samples, prefix = not self.typed_prompts, prefix_tokens is not None
        return prompt_ends_refused(sentences, beam, whole_samples, prefix)

    def forced_ends_warning(self, sentences: List[int], prefix_tokens: Optional[Tensor]) -> str:
        """``prompt_ends_warning`` of the task's prompts."""
        return prompt_ends_warning(sentences, not self.typed_prompts, prefix_tokens is not None)

    def start_token(self) -> int:
        """The token before each prompt (``prompt_start_token``)."""
        return prompt_start_token(self.source_dictionary, self.args)

    def forced_tokens(self, sample: Dict, prefix_tokens: Optional[Tensor]) -> Tensor:
        """The batch's prompts (``forced_prompts``)."""
        return forced_prompts(sample, prefix_tokens, self.start_token())

    def static_generator(self) -> Callable:
        from fairseq_san.static_decoding.lm_generator import build_static_lm_generator

        return build_static_lm_generator
