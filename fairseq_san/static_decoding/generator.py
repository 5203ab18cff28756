"""``StaticSequenceGenerator``: a drop-in for fairseq's SequenceGenerator (beam and greedy search,
sampling, diverse beam search, diverse siblings, ``--match-source-len``, ``--constraints``,
``prefix_allowed_tokens_fn``; prefix tokens, n-gram blocking and ``--print-alignment``).

It takes the arguments fairseq's ``task.build_generator`` passes and returns the same n-best
lists from ``generate(models, sample)``, so ``fairseq-generate``, ``fairseq-interactive`` and
``task.inference_step`` use it unchanged. ``build_static_generator`` is what
``--san-decoding static`` calls: it refuses, with one error naming the option, every generation
option the static decoder does not implement (``support.UNSUPPORTED_OPTIONS``), then has fairseq's
``FairseqTask.build_generator`` build it in place of SequenceGenerator, with the options and the
search (``search_strategy``) that fairseq chooses.

Per batch: the encoder runs once (the model's own), encoder-decoder keys/values are projected once
per sentence, the caches are allocated for the longest output, and each step is one call of
``StaticDecoderStep`` followed by one ``TensorBeamSearch.advance`` (position 0 on one row per
sentence: its hypotheses are all the same there). In the sliced layout (the CPU's) the done
sentences leave the batch once at most half are live (``drop_done_sentences``). How the step
runs (eager in the device's layout, fixed layout, compiled, CUDA graphs) is a row of
``execution.EXECUTIONS``; with CUDA graphs a position is one replay of the step, ``advance`` and
the caches' reordering together (``graphs.GraphedSearchStep``), on a cache and a beam search kept
per shape (the ``KEPT_SHAPES`` used last), reset for each batch.
"""

import contextlib
import math
from collections import OrderedDict
from functools import partial
from typing import Callable, ContextManager, Dict, List, NamedTuple, Optional, Tuple, Union

import torch
from fairseq.data import Dictionary
from fairseq.search import BeamSearch, DiverseBeamSearch, LengthConstrainedBeamSearch, Search
from fairseq.tasks import FairseqTask
from torch import Tensor, nn

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.lm_fusion import check_fusion_model, positions_with
from fairseq_san.generation_options import (
    check_alignment_kind,
    check_diverse_beam_groups,
    check_temperature,
    min_len_above_positions,
)
from fairseq_san.modules import training_forwards, weights_key
from fairseq_san.static_decoding.alignment import add_alignments
from fairseq_san.static_decoding.beam_search import SearchSettings, TensorBeamSearch
from fairseq_san.static_decoding.caches import DecoderCache, KeptMemory, length_bucket
from fairseq_san.static_decoding.errors import StaticDecoderError
from fairseq_san.static_decoding.execution import Execution, compiled, execution_for
from fairseq_san.static_decoding.fusion import FusedLanguageModel
from fairseq_san.static_decoding.graphs import (
    Capture,
    GraphedSearchStep,
    GraphedStep,
    capture_cuda_graph,
    forget_memory,
    held_memory,
    mutable_state,
    until_one_fails,
)
from fairseq_san.static_decoding.precision import (
    apply_precision,
    check_compiled_precision,
    check_device,
    convert_encoder,
    warn_if_slower_than_fp32,
)
from fairseq_san.static_decoding.step import StaticDecoderStep
from fairseq_san.static_decoding.support import (
    GenerationArgs,
    check_decoder,
    check_generation_options,
    check_generator_arguments,
)


def checked_execution(precision: str, asked: Optional[str], device: torch.device) -> Execution:
    """The execution of the step at ``precision`` on ``device`` (``asked``, the name given to
    ``--san-decoder-execution``, or None: the device's default); StaticDecoderError where the
    precision, the execution or the two together do not run there."""
    check_device(precision, device)
    execution = execution_for(asked, device)
    check_compiled_precision(precision, execution.compiles)
    return execution


# The shapes (sentences, positions, source length bucket) whose cache, beam search and CUDA graphs
# are kept for the next batch of that shape; beyond them, or beyond KEPT_MEMORY of the GPU's
# memory held by the kept caches, the least recently used are freed: a kept cache of a base model
# at 128 sentences, beam 4 and 256 positions takes about 3 GB (four would nearly fill a 16 GB
# GPU), and with --max-tokens nearly every batch has a shape of its own. ``generate`` decodes with
# CUDA graphs outside torch.inference_mode (whatever its caller's mode), so that what it keeps is
# made of ordinary tensors: kept from a batch decoded inside it, a batch outside could not write
# them ("Inplace update to inference tensor outside InferenceMode").
KEPT_SHAPES = 4
# (what the caches' self-attention state and AAN sums hold: their encoder state and the graphs'
# own memory pools are not counted)
KEPT_MEMORY = 0.25


def kept_memory_budget(device: torch.device) -> float:
    """The bytes the caches kept for their shapes may hold on ``device``: ``KEPT_MEMORY`` of a
    GPU's memory; no limit elsewhere (the CPU keeps none, but in the tests' stand-in for graphs)."""
    if device.type != "cuda":
        return math.inf
    return KEPT_MEMORY * torch.cuda.get_device_properties(device).total_memory


def on_its_gpu(device: torch.device) -> ContextManager:
    """``device`` the current CUDA device while the model on it decodes (nothing elsewhere): CUDA
    graphs capture the current device's streams, and a model on ``cuda:1`` while ``cuda:0`` is
    current (a hub user's ``model.to("cuda:1")``) captured empty graphs."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


class Batch(NamedTuple):
    """A batch set up for its first position (``StaticSequenceGenerator._start``)."""

    cache: DecoderCache
    search: TensorBeamSearch
    max_len: int  # the longest output (``_max_len``)
    bos: int
    device: torch.device
    index: Union[int, Tensor]  # where a step runs: the fixed layout's device position (``_at``)


class StaticSequenceGenerator(nn.Module):
    """Beam search with fairseq's semantics over a static-shape decoder step (see module doc)."""

    # Whether the model must have an encoder: translation's does, a language model's not.
    needs_encoder = True

    def __init__(
        self,
        models: List[nn.Module],
        tgt_dict: Dictionary,
        beam_size: int = 1,
        max_len_a: float = 0,
        max_len_b: int = 200,
        max_len: int = 0,
        min_len: int = 1,
        normalize_scores: bool = True,
        len_penalty: float = 1.0,
        unk_penalty: float = 0.0,
        temperature: float = 1.0,
        match_source_len: bool = False,
        no_repeat_ngram_size: int = 0,
        search_strategy: Optional[Search] = None,
        lm_model: Optional[nn.Module] = None,
        lm_weight: float = 1.0,
        print_alignment: Optional[str] = None,
        precision: str = "fp32",
        execution: Optional[str] = None,
        compile_backend: Union[str, Callable] = "inductor",
        capture: Capture = capture_cuda_graph,
        device: Optional[torch.device] = None,
    ) -> None:
        """fairseq's SequenceGenerator's arguments (``search_strategy``: fairseq's search, which
        ``FairseqTask.build_generator`` chooses for the generation options:
        ``build_static_generator`` has it build this generator; ``lm_model`` and ``lm_weight``:
        fairseq-generate's ``--lm-path`` model and ``--lm-weight``), then the static decoder's own.

        ``device``: the one it decodes on where the model is not there yet (fairseq-train
        builds ``--eval-bleu``'s generator before it moves the model): the options are checked
        against it at once, and so are the model's layers (what the step refuses), whose step is
        built at the first batch (the precision against the model's dtype is checked then:
        fairseq-train's ``--fp16`` half-precision model, ``check_eval_bleu_precision``)."""
        super().__init__()
        if len(models) != 1:
            raise StaticDecoderError(  # not "in --path": the hub loads them from checkpoint_file
                "ensembles (several checkpoints, as --path A.pt:B.pt or the hub's "
                "checkpoint_file='A.pt:B.pt' load them)"
            )
        check_temperature(temperature)
        self.model = models[0]
        if self.needs_encoder and getattr(self.model, "encoder", None) is None:
            raise StaticDecoderError(
                "a model without an encoder in StaticSequenceGenerator",
                "StaticLMGenerator decodes a language model (the task language_modeling_san "
                "builds it)",
            )
        self.model.eval()
        self.precision, self.execution_asked = precision, execution
        self.compile_backend, self.capture = compile_backend, capture
        model_device = next(self.model.parameters()).device
        self.choose_execution(torch.device(device) if device is not None else model_device)
        self.fused_lm: Optional[FusedLanguageModel] = None
        if lm_model is not None:  # converted to the precision the device was checked to run
            check_fusion_model(lm_model, tgt_dict)
            lm_model.eval()  # (returns None after fairseq's make_generation_fast_)
            self.fused_lm = FusedLanguageModel(lm_model, lm_weight, self.precision)
        self.built_from: Optional[tuple] = None
        if model_device.type == self.device_type:
            self.build_from_weights()
        else:  # the model's refusals now, not at the first validation, after training began
            check_decoder(self.model.decoder)
        self.tgt_dict = tgt_dict
        self.pad, self.unk, self.eos = tgt_dict.pad(), tgt_dict.unk(), tgt_dict.eos()
        self.symbols_to_strip_from_output = {self.eos}
        self.vocab_size = len(tgt_dict)
        self.beam_size = min(beam_size, self.vocab_size - 1)  # pad is never selected
        self.max_len_a, self.max_len_b, self.min_len = max_len_a, max_len_b, min_len
        self.max_len = max_len or self.model.max_decoder_positions()
        if lm_model is not None:
            self.max_len = positions_with(lm_model, self.max_len)
        self.normalize_scores, self.len_penalty = normalize_scores, len_penalty
        self.unk_penalty, self.temperature = unk_penalty, temperature
        self.no_repeat_ngram_size = no_repeat_ngram_size or 0
        self.match_source_len = match_source_len
        # fairseq's search where it chooses the candidates; every batch's search takes it
        self.search = candidate_search(search_strategy, match_source_len)
        if isinstance(self.search, DiverseBeamSearch):
            check_diverse_beam_groups(self.beam_size, self.search.num_groups, given=beam_size)
        self.print_alignment = self.checked_alignment(print_alignment)
        self._kept_encoder_out: Optional[Dict] = None  # see _for_alignments

    def checked_alignment(self, kind: Optional[str]) -> Optional[str]:
        """``--print-alignment``'s kind (hard or soft; None: no alignment)."""
        check_alignment_kind(kind)
        return str(kind) if kind else None

    @classmethod
    def build(
        cls,
        task: FairseqTask,
        models: List[nn.Module],
        args: GenerationArgs,
        precision: str = "fp32",
        seq_gen_cls: Optional[type] = None,
        extra_gen_cls_kwargs: Optional[Dict] = None,
        prefix_allowed_tokens_fn: Optional[Callable] = None,
        execution: Optional[str] = None,
        device: Optional[torch.device] = None,
    ) -> "StaticSequenceGenerator":
        """The static decoder of ``task``'s ``models`` for fairseq's generation options ``args``
        (what ``task.build_generator`` receives), or StaticDecoderError naming the first option
        it does not support; ``device``: see the class. It refuses, with one StaticDecoderError,
        what the static decoder cannot honour, then has fairseq's ``FairseqTask.build_generator``
        (what fairseq's translation and language-modeling tasks build their generators with)
        build it in place of fairseq's SequenceGenerator: it receives the options and the search
        (``search_strategy``) that fairseq chooses for ``args``, as fairseq's generator would, a
        change of fairseq's included."""
        check_generation_options(args)
        check_generator_arguments(seq_gen_cls, extra_gen_cls_kwargs)
        static = partial(
            cls,
            print_alignment=getattr(args, "print_alignment", None),
            precision=precision,
            execution=None if execution is None else str(execution),
            device=device,
        )
        return FairseqTask.build_generator(
            task, models, args, seq_gen_cls=static, extra_gen_cls_kwargs=extra_gen_cls_kwargs,
            prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
        )  # fmt: skip

    def choose_execution(self, device: torch.device) -> None:
        """The execution of the step on ``device`` (``checked_execution``)."""
        self.execution = checked_execution(self.precision, self.execution_asked, device)
        warn_if_slower_than_fp32(self.precision, device)
        self.device_type = device.type

    def build_from_weights(self) -> None:
        """The step and the encoder from the model's weights as they are now (copies of some:
        fused, converted, packed, captured), with no cache or search kept; the execution for
        the device they are on."""
        device = next(self.model.parameters()).device
        if device.type != self.device_type:  # moved since (a hub user's model.cuda())
            self.choose_execution(device)
        self.step = apply_precision(
            StaticDecoderStep(self.model.decoder), self.precision, pack=self.execution.pack
        )
        # The encoder at this precision (a language model has none).
        encoder = getattr(self.model, "encoder", None)
        self.encoder = (
            None
            if encoder is None
            else convert_encoder(encoder, self.precision, self.execution.pack)
        )
        self.run_first_step, self.run_step, self.run_search_step = self.runners(
            self.compile_backend, self.capture
        )
        # Caches and searches kept across batches, per shape (CUDA graphs read the memory they
        # captured); the fused language model's caches are kept with the decoded model's.
        self._caches: "OrderedDict[Tuple, DecoderCache]" = OrderedDict()
        self._searches: Dict[Tuple, TensorBeamSearch] = {}
        if self.fused_lm is not None:
            self.fused_lm.kept.clear()
        # The memory of the other executions' self-attention state and log-probabilities, from
        # batch to batch.
        self._memory, self._log_probs_memory = KeptMemory(), KeptMemory()
        self.built_from = self.weights_now()

    def weights_now(self) -> tuple:
        """What tells the model's weights as they are now from those the step was built from:
        their tensors' ``weights_key``, and the decoder's passes in training mode (fairseq's
        optimizers write through ``.data``, which the key does not see)."""
        return weights_key(self.model.parameters()), training_forwards(self.model.decoder)

    def follow_the_weights(self) -> None:
        """Build the step again where the model's weights changed since it was built: fairseq-train
        ``--eval-bleu`` builds its generator once, then trains, and the step's copies would
        decode with the weights of the start (the others shared, read as they are now)."""
        if self.weights_now() != self.built_from:  # None: not built yet
            self.build_from_weights()

    def runners(
        self, compile_backend: Union[str, Callable], capture: Capture
    ) -> Tuple[Callable, Callable, Optional[GraphedSearchStep]]:
        """(run_first_step, run_step, run_search_step): what runs translation's position 0, on one
        row per sentence: the step never compiled (one step a batch does not repay a compilation
        of 20-30 s a shape), captured alone (``GraphedStep``) with CUDA graphs; and what runs the
        positions after it: the step, compiled where the execution compiles it; with CUDA graphs
        the whole position captured around it (``GraphedSearchStep``), and the step alone for
        positions whose search needs the host's position (sampling, a language model's prompt
        forcing: ``TensorBeamSearch.takes_tensor_steps``). Once a capture failed, every runner
        runs eagerly (``graphs.until_one_fails``)."""
        step = compiled(self.step, compile_backend) if self.execution.compiles else self.step
        if not self.execution.graphs:
            return self.step, step, None
        capture = until_one_fails(capture)
        first = GraphedStep(self.step, capture)
        return first, GraphedStep(step, capture), GraphedSearchStep(step, capture)

    @torch.inference_mode(False)  # see KEPT_SHAPES
    @torch.no_grad()
    def generate(
        self,
        models: Optional[List[nn.Module]],
        sample: Dict[str, Dict[str, Tensor]],
        prefix_tokens: Optional[Tensor] = None,
        constraints: Optional[Tensor] = None,
        bos_token: Optional[int] = None,
    ) -> List[List[Dict[str, Tensor]]]:
        """fairseq's ``SequenceGenerator.generate``: per sentence, its n-best hypotheses.

        A batch decodes in torch.inference_mode, whose operators skip autograd's bookkeeping
        (a CPU step 1.04-1.08x faster at beam 4 than under no_grad, 1.02x at beam 20, medians:
        docs/results/cpu-yardstick/inference-mode-2026-11-30), except with CUDA graphs, whose
        caches are kept for the next batch (``KEPT_SHAPES``); the n-best are ordinary tensors
        (``TensorBeamSearch.hypotheses``)."""
        if constraints is not None and not getattr(self.search, "supports_constraints", False):
            raise UsageError(
                "constraints were given to a generator built without --constraints (ordered or "
                "unordered): build it with that option"
            )
        self.follow_the_weights()
        # (inference_mode(False) turns gradients on: no_grad after it turns them off)
        with torch.inference_mode(not self.execution.graphs), torch.no_grad(), on_its_gpu(
            next(self.model.parameters()).device
        ):
            search = self.decode(sample, prefix_tokens, bos_token, constraints)
        nbests = search.hypotheses()
        if self.print_alignment:
            encoder_out, self._kept_encoder_out = self._kept_encoder_out, None
            add_alignments(
                self.model, sample, nbests, self.print_alignment, self.pad, self.eos, encoder_out
            )
        return nbests

    def _for_alignments(self, encoder_out: Dict) -> Optional[Dict]:
        """The batch's encoder output, kept for ``--print-alignment``'s passes where it is the
        model's own encoder's (fp32); None where the search ran a converted copy (the passes run
        the model's encoder themselves) or no alignment is printed."""
        own = self.encoder is getattr(self.model, "encoder", None)
        return encoder_out if self.print_alignment and own else None

    def decode(
        self,
        sample: Dict[str, Dict[str, Tensor]],
        prefix_tokens: Optional[Tensor],
        bos_token: Optional[int],
        constraints: Optional[Tensor] = None,
    ) -> TensorBeamSearch:
        """Beam search over a batch to its end; the search, which holds the n-best.
        ``prefix_tokens`` (fairseq-generate's ``--prefix-size``): forced at the first positions,
        one step each, then the positions after them as without (CUDA graphs capture those);
        ``constraints``: fairseq's packed constraints (``--constraints``)."""
        batch = self._start(sample, prefix_tokens, bos_token, constraints)
        search, cache, index = batch.search, batch.cache, batch.index
        # Position 0: every hypothesis of a sentence is the same, so one row per sentence (with
        # CUDA graphs the step alone replayed, on the first-step cache kept with the cache).
        first = cache.first_step()
        tokens = search.last_tokens(0)[:: self.beam_size]
        lprobs = self.run_first_step(tokens, index, first, self.temperature, length=1)
        if self.fused_lm is not None:
            shared = self.fused_lm.shared_positions(tokens.view(-1, 1))
            lprobs = self.fused_lm.fuse(lprobs, shared[:, 0])
        cache.spread(first)
        finished = self._follow(search.advance(0, lprobs), cache, 1)
        for position in range(1, batch.max_len + 1):
            if finished:
                break
            search.release_prefix(position)
            finished = self._position(search, position, index, cache)
        return search

    def _start(
        self,
        sample: Dict[str, Dict[str, Tensor]],
        prefix_tokens: Optional[Tensor],
        bos_token: Optional[int],
        constraints: Optional[Tensor],
    ) -> Batch:
        """A batch's set-up before its first position (``decode``'s arguments): its output
        limit, its cache, empty, with the encoder's output projected into it (a language model
        has none), the step's position table, and its beam search."""
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]
        sentences, src_len = src_tokens.size()[:2]
        src_lengths = self._source_lengths(net_input)
        max_len = self._max_len(src_len, src_lengths)
        source, padding = self._encode(net_input)
        device = src_tokens.device
        fixed = self.execution.fixed_layout(device)
        positions = length_bucket(max_len + 1) if fixed else max_len + 1
        table = self._table(max_len, fixed)
        bucket = 0 if source is None else length_bucket(src_len)
        cache = self._cache(sentences, positions, fixed, device, table, bucket)
        cache.sentences = sentences
        self.step.prepare(source, padding, cache, table)
        bos = self.eos if bos_token is None else bos_token
        search = self._search(
            sentences, positions, bos, max_len, src_lengths, prefix_tokens, constraints,
            sample.get("id"),
        )  # fmt: skip
        index = torch.zeros(1, dtype=torch.long, device=device) if fixed else 0
        return Batch(cache, search, max_len, bos, device, index)

    def _encode(self, net_input: Dict[str, Tensor]) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """The batch's encoder output and its padding mask (None where no sentence is padded);
        (None, None) for a model without an encoder (a language model's)."""
        if self.encoder is None:
            return None, None
        encoder_out = self.encoder.forward_torchscript(net_input)
        self._kept_encoder_out = self._for_alignments(encoder_out)
        padding = encoder_out["encoder_padding_mask"]
        return encoder_out["encoder_out"][0], padding[0] if padding else None

    def _position(
        self, search: TensorBeamSearch, position: int, index: Union[int, Tensor],
        cache: DecoderCache,
    ) -> bool:  # fmt: skip
        """Beam search at ``position`` > 0; whether every sentence is then done. With CUDA graphs
        one replay (step, fused language model, search, reordering) and one host sync, where the
        search takes tensor steps."""
        at, length = self._at(position, index, cache)
        if self.run_search_step is None or not search.takes_tensor_steps():
            tokens = search.last_tokens(position)
            lprobs = self.run_step(tokens, at, cache, self.temperature, length)
            if self.fused_lm is not None:
                lm_lprobs = self.fused_lm.position(tokens, at, length)
                lprobs = self.fused_lm.fuse(lprobs, lm_lprobs)
            finished = self._follow(search.advance(position, lprobs), cache, position + 1)
            if not finished:
                drop_done_sentences(search, self._in_use(cache), self.beam_size, position + 1)
            return finished
        self.run_search_step(search, at, cache, self.temperature, length, self.fused_lm)
        if bool(search.done.all()):
            return True
        search.check_max_len(position)
        return False

    def _follow(self, order: Optional[Tensor], cache: DecoderCache, written: int) -> bool:
        """The caches follow beam search's ``order`` (``written`` positions); whether every
        sentence is done (``order`` None)."""
        if order is None:
            return True
        for in_use in self._in_use(cache):
            in_use.follow(order, written, self.beam_size)
        return False

    def _in_use(self, cache: DecoderCache) -> List[DecoderCache]:
        """The batch's caches: the decoded model's ``cache``, the fused language model's."""
        return [cache] if self.fused_lm is None else [cache, self.fused_lm.cache]

    def _search(
        self,
        sentences: int,
        positions: int,
        bos: int,
        max_len: int,
        src_lengths: Tensor,
        prefix: Optional[Tensor] = None,
        constraints: Optional[Tensor] = None,
        ids: Optional[Tensor] = None,
    ) -> TensorBeamSearch:
        """A beam search for a batch (``prefix``: tokens to force, a reference's or a language
        model's prompt), room for ``positions`` (so that the tokens a compiled step reads have
        one layout per length bucket); with CUDA graphs, the one kept for its shape, restarted.
        ``src_lengths`` limit the scored lengths with ``--match-source-len``; ``constraints`` and
        the sample's ``ids`` go to fairseq's own search, as its generator gives them."""
        settings, device = self._settings(max_len), src_lengths.device
        lengths = src_lengths if self.match_source_len else None
        batch = dict(source_lengths=lengths, constraints=constraints, ids=ids)
        if not self.execution.graphs:
            return TensorBeamSearch(settings, sentences, bos, device, prefix, positions, **batch)
        key = (sentences, positions)
        if key in self._searches:
            self._searches[key].restart(settings, bos, prefix, **batch)
        else:
            self._searches[key] = TensorBeamSearch(
                settings, sentences, bos, device, prefix, positions, fixed_address=True, **batch
            )
        return self._searches[key]

    def _source_lengths(self, net_input: Dict[str, Tensor]) -> Tensor:
        """fairseq's source lengths: ``src_lengths``, else the tokens that are neither EOS nor
        padding."""
        if "src_lengths" in net_input:
            return net_input["src_lengths"]
        tokens = net_input["src_tokens"]
        return (tokens.ne(self.eos) & tokens.ne(self.pad)).long().sum(dim=1)

    def _max_len(self, src_len: int, src_lengths: Tensor) -> int:
        """fairseq's limit on a batch's output length (``--max-len-a/b``, the model's positions;
        with ``--match-source-len`` the longest source), at least ``min_len``."""
        if self.match_source_len:
            max_len = int(src_lengths.max())
            if self.min_len > max_len:
                raise UsageError(
                    f"--min-len {self.min_len} is above the longest source of a batch ({max_len} "
                    "tokens), the longest output --match-source-len allows: lower --min-len"
                )
            return max_len
        if self.min_len > self.max_len - 1:
            raise min_len_above_positions(self.min_len, self.max_len)
        max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_len - 1)
        if self.min_len > max_len:
            raise UsageError(
                f"--min-len {self.min_len} is above the longest output of a batch of source length "
                f"{src_len} ({max_len}: --max-len-a {self.max_len_a} x {src_len} + --max-len-b "
                f"{self.max_len_b}, at most the model's positions - 1): lower --min-len or raise "
                "--max-len-b"
            )
        return max_len

    def _table(self, max_len: int, fixed: bool) -> int:
        """The positions the step's position table holds for a batch decoding ``max_len``. Fixed
        layout: every position this generator may decode, once, so that compiled steps and
        captured graphs read one table whatever the batch (replacing it for a longer batch made
        dynamo compile, and CUDA graphs capture, every shape again: on an H100 a benchmark's 128
        test sentences hit dynamo's limit of 8 compilations, docs/results/gpu-steps). Sliced
        layout: the batch's own positions. ``--match-source-len`` may decode past the model's
        positions (a source longer than them): the table then holds the batch's, as fairseq's
        sinusoidal positions grow (learned ones fail in both, where a decode reaches them)."""
        return max(self.max_len, max_len + 1) if fixed else max_len + 1

    def _cache(
        self, sentences: int, positions: int, fixed: bool, device: torch.device, table: int,
        source: int = 0,
    ) -> DecoderCache:  # fmt: skip
        """An empty cache for a batch: with CUDA graphs, the one kept for its shape (the
        sentences, the positions and the source's length bucket, 0 without a source), reused;
        else a new one, its self-attention state (and on the CPU its steps' log-probabilities) in
        the memory of the batches before (``KeptMemory``). The fused language model's started
        beside it, kept with it (its position table holding ``table`` positions)."""
        key = (sentences, positions, source)
        graphs = self.execution.graphs
        if self.fused_lm is not None:
            self.fused_lm.start(
                sentences, self.beam_size, positions, fixed, table, device, key if graphs else None
            )  # fmt: skip
        if key in self._caches:
            self._caches.move_to_end(key)
            self._caches[key].reset()
            return self._caches[key]
        cache = self.step.empty_cache(
            sentences * self.beam_size, positions, device, fixed, fixed_address=graphs,
            memory=None if graphs else self._memory,
            # decode reads each step's log-probabilities before the next
            log_probs_memory=None if graphs else self._log_probs_memory,
        )  # fmt: skip
        if graphs:
            self._keep(key, cache, device)
        return cache

    def _keep(self, key: Tuple[int, int, int], cache: DecoderCache, device: torch.device) -> None:
        """Keep ``cache`` for its shape (``key``); beyond ``KEPT_SHAPES`` shapes, or where the kept
        caches with it would hold more than ``kept_memory_budget`` of ``device``, free the least
        recently used shapes (``_free_oldest``) until they do not; the other shapes keep theirs."""
        budget = kept_memory_budget(device)
        while self._caches and (
            len(self._caches) >= KEPT_SHAPES or self._kept_bytes(cache) > budget
        ):
            self._free_oldest()
        self._caches[key] = cache

    def _kept_bytes(self, *new: DecoderCache) -> int:
        """The bytes of the kept caches' self-attention state and AAN sums (their bulk; a new
        cache holds no encoder state yet), the fused language model's too, with ``new``."""
        caches = [*self._caches.values(), *new]
        if self.fused_lm is not None:  # the new shape's is kept already (``_cache``)
            caches += list(self.fused_lm.kept.values())
        return sum(tensor.nbytes for kept in caches for tensor in mutable_state(kept))

    def _free_oldest(self) -> None:
        """Free the least recently used shape's cache (the fused language model's kept with it;
        its beam search too where no kept cache shares it) and the graphs that read them."""
        oldest, freed_cache = self._caches.popitem(last=False)
        freed = held_memory(freed_cache)
        if self.fused_lm is not None:
            freed += held_memory(self.fused_lm.kept.pop(oldest))
        if all(kept[:2] != oldest[:2] for kept in self._caches):
            search = self._searches.pop(oldest[:2], None)
            freed += [] if search is None else search.state()
        for runner in (self.run_first_step, self.run_step, self.run_search_step):
            forget_memory(runner.replays, freed)

    def _at(
        self, position: int, index: Union[int, Tensor], cache: DecoderCache
    ) -> Tuple[Union[int, Tensor], Optional[int]]:
        """Where a step runs ``position``: (the int, None) in the sliced layout; in the fixed one,
        (the device tensor ``index``, written with it: no host sync, its length bucket)."""
        if not cache.fixed:
            return position, None
        index.fill_(position)
        return index, length_bucket(position + 1)

    def _settings(self, max_len: int) -> SearchSettings:
        return SearchSettings(
            beam=self.beam_size,
            min_len=self.min_len,
            max_len=max_len,
            len_penalty=self.len_penalty,
            normalize_scores=self.normalize_scores,
            unk_penalty=self.unk_penalty,
            pad=self.pad,
            unk=self.unk,
            eos=self.eos,
            search=self.search,
            no_repeat_ngram=self.no_repeat_ngram_size,
            match_source_len=self.match_source_len,
        )


def candidate_search(search_strategy: Optional[Search], match_source_len: bool) -> Optional[Search]:
    """The fairseq search that chooses the candidates at each position (``SearchSettings.search``),
    or None where the static search chooses them itself: beam search, and --match-source-len's
    length-constrained beam search, whose rules the static search applies (a length-constrained
    search of other lengths is refused)."""
    if search_strategy is None or type(search_strategy) is BeamSearch:
        return None
    if isinstance(search_strategy, LengthConstrainedBeamSearch):
        lengths = (search_strategy.min_len_a, search_strategy.min_len_b,
                   search_strategy.max_len_a, search_strategy.max_len_b)  # fmt: skip
        if not match_source_len or lengths != MATCH_SOURCE_LENGTHS:
            raise StaticDecoderError(
                f"a length-constrained beam search of lengths {lengths} (min_len_a, min_len_b, "
                f"max_len_a, max_len_b): only --match-source-len's {MATCH_SOURCE_LENGTHS}"
            )
        return None
    return search_strategy


# The lengths of FairseqTask.build_generator's search for --match-source-len: the source's length.
MATCH_SOURCE_LENGTHS = (1, 0, 1, 0)


# The sliced layout drops the done sentences once the live ones are at most this share of those
# searched: halving bounds the copies to a few per batch.
DROP_DONE_AT = 0.5


def drop_done_sentences(
    search: TensorBeamSearch, caches: List[DecoderCache], beam: int, written: int
) -> None:
    """The sliced layout's batch shrinking: once at most ``DROP_DONE_AT`` of the sentences
    searched are live, the done ones leave the search and the ``caches`` (``written``
    positions), so that the steps left no longer compute their rows, as fairseq's batch shrinks.
    The fixed layout keeps its shapes (compiled steps and CUDA graphs depend on them)."""
    if caches[0].fixed:
        return
    live = ~search.done
    count = int(live.sum())
    if count == search.sentences or count > search.sentences * DROP_DONE_AT:
        return
    sentences = live.nonzero().view(-1)
    search.keep_sentences(sentences)
    for cache in caches:
        cache.keep_sentences(sentences, beam, written)


# What ``--san-decoding static`` calls for a translation model (``StaticSequenceGenerator.build``).
build_static_generator = StaticSequenceGenerator.build
