"""Beam search on tensors with the semantics of fairseq's ``SequenceGenerator`` + ``BeamSearch``
(or ``LengthConstrainedBeamSearch`` for ``--match-source-len``, or another of fairseq's own
searches), prefix tokens and ``--no-repeat-ngram-size`` included.

Per step, as fairseq does: pad is never chosen, the unknown-word penalty is subtracted, EOS is
forbidden before ``min_len`` and forced at ``max_len``; with ``no_repeat_ngram`` n, a token that
would repeat an n-gram of its hypothesis is forbidden (fairseq's ``NGramRepeatBlock``); with
``match_source_len``, EOS is forbidden before a sentence's source length and free (0) from it on,
and a hypothesis finished after it scores -inf; the top 2 x beam candidates (beam x vocabulary,
or the first beam only at step 0) are ranked by cumulative log-probability; EOS candidates among
the top ``beam`` are finished, with score (cumulative log-probability) / length ** lenpen, in
candidate order, until a sentence has ``beam`` finished hypotheses (it is then done); the first
``beam`` non-EOS candidates continue. At the end each sentence's finished hypotheses are sorted
by score (fairseq's n-best).

With ``search`` (one of fairseq's own search strategies, called on the hypotheses in fairseq's
order) the candidates are that search's: ``Sampling`` (``--sampling``, ``--sampling-topk``,
``--sampling-topp``) draws one token per hypothesis from its distribution (restricted to the top
k, or to the smallest set whose probability exceeds p), at step 0 ``beam`` tokens from the first
hypothesis; ``DiverseBeamSearch`` (``--diverse-beam-groups``) searches groups of hypotheses,
each penalised for the tokens of the groups before it; ``DiverseSiblingsSearch``
(``--diversity-rate``) penalises each hypothesis' k-th best continuation by k x the rate;
``LexicallyConstrainedBeamSearch`` (``--constraints``) keeps each hypothesis' progress through
its sentence's constraints (told which sentences finished and which candidates continue, as
fairseq's generator tells it) and holds EOS back until they are met;
``PrefixConstrainedBeamSearch`` (``task.build_generator``'s ``prefix_allowed_tokens_fn``) allows
each hypothesis the tokens a function of its sample id and tokens so far returns. The rest is
the same. With ``prefix`` tokens (a reference's first tokens, a language model's prompt)
a hypothesis must take its prefix token at each step where it has one (not padding) and the step
is below ``max_len``; EOS is then allowed before ``min_len`` where the prefix token is, as
fairseq does, and forbidden before it where a shorter prefix has ended (fairseq allowed it:
``fairseq_fixes.prefix_min_len``).

What differs is the bookkeeping, not the result:

* a done sentence keeps its rows in the batch (masked: its candidates are never finished again),
  so shapes never change during a batch, until the caller drops the done sentences from the
  search and its caches together (``keep_sentences``, the CPU's path; their n-best are set aside);
  fairseq's own search sees the sentences not done only, as fairseq's batch holds only those;
* finished hypotheses are written into per-sentence tensors with one scatter per step, with no
  Python loop over hypotheses or sentences (candidates that are not stored go to a spare slot);
* a continuing hypothesis takes its parent's row when it is the parent's first continuation, and
  the row of a hypothesis that did not continue otherwise (``place_children``). Which row holds
  which hypothesis does not change the search (candidates are ranked by score, and fairseq's
  ``cands_to_ignore`` is indexed by rank), but the decoder's caches then copy only the rows of
  the hypotheses that moved (caches.py), not all of them;
* tokens and scores (small) are reordered by one gather each into preallocated buffers;
* on the CPU the 2 x beam best continuations are looked for only in the chunks of scores with
  the largest maxima (``best_of_rows``), not in all beam x vocabulary of them.

The step may be a Python int or a (1,) long tensor on the device. With a tensor, ``advance`` does
not read anything back to the host: its shapes and control flow do not depend on the step, so
the decoder step, ``advance`` and the caches' reordering can be captured as one CUDA graph and
replayed at every position (graphs.py); the caller reads ``done`` after it. With an int (every
step on the CPU; on a GPU position 0, the eager and fixed executions, a language model's
prompt), it skips the finishing when no candidate finishes and returns None once every sentence
is done.
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from fairseq.search import Search
from torch import Tensor

from fairseq_san.fairseq_fixes.prefix_min_len import block_early_eos
from fairseq_san.generation_options import (
    exhausted_ngrams,
    unfinished_prefix_ends,
    unmet_constraints,
)
from fairseq_san.static_decoding.caches import Reorderable, sentence_rows

Step = Union[int, Tensor]  # a position: an int, or a (1,) long tensor on the device
CHUNK = 64  # scores per chunk in best_of_rows


class LiveAtMaxLen(RuntimeError):
    """Sentences still live after step ``max_len`` (``BeamSearch.check_max_len``), where fairseq's
    generator asserts ``step < max_len``: a task tells its causes (``tasks.decoding``)."""


def synced(step: Step) -> bool:
    """Whether ``step`` is a Python int (the host knows it) rather than a device tensor."""
    return isinstance(step, int)


def nan_to_minus_inf_(scores: Tensor) -> Tensor:
    """fairseq's ``lprobs[lprobs != lprobs] = -inf``, in place and without a host sync; -inf stays
    -inf (``nan_to_num``'s default would make it the dtype's lowest finite number, a score that
    beam search would rank, finish and store as a real one)."""
    return scores.nan_to_num_(nan=-math.inf, posinf=math.inf, neginf=-math.inf)


def column(tensor: Tensor, step: Step) -> Tensor:
    """``tensor[:, step]`` for an int or a (1,) tensor step."""
    return tensor[:, step] if synced(step) else tensor.index_select(1, step).squeeze(1)


def set_column(tensor: Tensor, step: Step, values: Tensor) -> None:
    """``tensor[:, step] = values`` for an int or a (1,) tensor step, in place."""
    if synced(step):
        tensor[:, step] = values
    else:
        tensor.index_copy_(1, step, values.unsqueeze(1).to(tensor.dtype))


@dataclass
class SearchSettings:
    """The options of fairseq's SequenceGenerator that the search honours."""

    beam: int
    min_len: int
    max_len: int  # the last step is max_len: at most max_len tokens, then EOS
    len_penalty: float
    normalize_scores: bool
    unk_penalty: float
    pad: int
    unk: int
    eos: int
    # fairseq's search strategy that chooses the candidates (Sampling, DiverseBeamSearch,
    # DiverseSiblingsSearch, LexicallyConstrainedBeamSearch, PrefixConstrainedBeamSearch);
    # None: beam search, done here
    search: Optional[Search] = None
    no_repeat_ngram: int = 0  # fairseq's --no-repeat-ngram-size: 0 (off) or at least 2
    match_source_len: bool = False  # fairseq's --match-source-len (LengthConstrainedBeamSearch)


class TensorBeamSearch:
    """State of one batch: live hypotheses (sentences x beam rows) and finished ones."""

    # The tensors with one entry per sentence (``keep_sentences``), besides ``prefix``.
    PER_SENTENCE = (
        "ignore", "final_tokens", "final_positional", "final_scores", "final_lengths",
        "final_count", "done", "beam_rows", "origin", "source_lengths", "ids",
    )  # fmt: skip

    def __init__(
        self,
        settings: SearchSettings,
        sentences: int,
        bos: int,
        device: Union[str, torch.device],
        prefix: Optional[Tensor] = None,
        positions: Optional[int] = None,
        fixed_address: bool = False,
        source_lengths: Optional[Tensor] = None,
        constraints: Optional[Tensor] = None,
        ids: Optional[Tensor] = None,
    ) -> None:
        s = settings
        # ``positions``: room for outputs of up to positions - 1 tokens (default: max_len + 1), so
        # that a search kept for a shape serves later batches with other max_len (``restart``).
        rows, width = sentences * s.beam, positions or s.max_len + 1
        self.sentences = sentences
        self.fixed_address = fixed_address
        # bos + tokens + eos; cumulative scores. fixed_address: see Reorderable (CUDA graphs).
        self.tokens = Reorderable(
            (rows, width + 1), torch.long, device, fixed_address=fixed_address
        )
        self.scores = Reorderable((rows, width), torch.float32, device, fixed_address=fixed_address)
        self.ignore = torch.empty(sentences, s.beam, dtype=torch.bool, device=device)
        self.row_offsets = torch.arange(sentences, device=device).unsqueeze(1) * s.beam
        self.candidate_offsets = torch.arange(2 * s.beam, device=device)
        self.earlier = torch.ones(s.beam, s.beam, dtype=torch.bool, device=device).tril(-1)
        # resized by _constrain_on_device
        self.not_eos = torch.ones(1, dtype=torch.bool, device=device)
        self.limit = torch.empty(1, dtype=torch.long, device=device)  # max_len, for tensor steps
        # Finished hypotheses, slot j of sentence i = the j-th fairseq finalized for it; slot
        # ``beam`` is spare: what is not stored is written there (no host sync to leave it out).
        slots = s.beam + 1
        self.final_tokens = torch.empty(sentences, slots, width, dtype=torch.long, device=device)
        self.final_positional = torch.empty(sentences, slots, width, device=device)
        self.final_scores = torch.empty(sentences, slots, device=device)
        self.final_lengths = torch.empty(sentences, slots, dtype=torch.long, device=device)
        self.final_count = torch.empty(sentences, dtype=torch.long, device=device)
        self.done = torch.empty(sentences, dtype=torch.bool, device=device)
        # The row (within its sentence) of fairseq's j-th hypothesis (place_children).
        self.beam_rows = torch.empty(sentences, s.beam, dtype=torch.long, device=device)
        # Each sentence's source length, read with settings.match_source_len only.
        self.source_lengths = torch.zeros(sentences, dtype=torch.long, device=device)
        self.restart(settings, bos, prefix, source_lengths, constraints, ids)

    def restart(
        self,
        settings: SearchSettings,
        bos: int,
        prefix: Optional[Tensor] = None,
        source_lengths: Optional[Tensor] = None,
        constraints: Optional[Tensor] = None,
        ids: Optional[Tensor] = None,
    ) -> None:
        """A new batch of the same shape, in the same memory (a captured graph reads it), with
        its own ``max_len``; ``prefix``: forced tokens per sentence (sentences, width), padding
        where none; ``source_lengths``: each sentence's, for ``match_source_len``;
        ``constraints``: fairseq's packed constraints, for its search (``init_constraints``);
        ``ids``: the sample's sentence ids, which fairseq's generator gives its search (default:
        the positions in the batch)."""
        if settings.max_len >= self.scores.tensor.size(1):
            raise ValueError(f"max_len {settings.max_len}: room for {self.scores.tensor.size(1)}")
        self.settings = settings
        self.limit.fill_(settings.max_len)
        pad = settings.pad
        self.tokens.tensor.fill_(pad)
        self.tokens.tensor[:, 0] = bos
        self.scores.tensor.zero_()
        self.ignore.zero_()
        self.final_tokens.fill_(pad)
        self.final_positional.zero_()
        self.final_scores.zero_()
        self.final_lengths.zero_()
        self.final_count.zero_()
        self.done.zero_()
        self.beam_rows.copy_(torch.arange(self.settings.beam).expand_as(self.beam_rows))
        if source_lengths is not None:
            self.source_lengths.copy_(source_lengths)
        self.prefix = prefix
        # The batch's index of each sentence still searched, and the n-best of those dropped.
        self.origin = torch.arange(self.sentences, device=self.done.device)
        self.ids = self.origin if ids is None else ids.to(self.done.device)
        # The ids of the sentences whose prefix forces EOS (read only where a search fails).
        self.ended_by_prefix = None if prefix is None else self.ids[prefix.eq(settings.eos).any(1)]
        if settings.search is not None:  # fairseq's generator does it at every batch
            settings.search.init_constraints(constraints, settings.beam)
        self.set_aside: Dict[int, List[Dict[str, Tensor]]] = {}

    def keep_sentences(self, sentences: Tensor) -> None:
        """Only ``sentences`` (indices, in order; done ones are left out) stay in the search; the
        n-best of the others are set aside for ``hypotheses``. The caches must keep the same
        sentences (``DecoderCache.keep_sentences``)."""
        kept = set(sentences.tolist())
        dropped = [sentence for sentence in range(self.sentences) if sentence not in kept]
        origin = self.origin.tolist()
        for sentence, nbest in zip(dropped, self._nbests(dropped)):
            self.set_aside[origin[sentence]] = nbest
        rows = sentence_rows(sentences, self.settings.beam)
        self.tokens.keep_rows(rows)
        self.scores.keep_rows(rows)
        for name in self.PER_SENTENCE:
            setattr(self, name, getattr(self, name).index_select(0, sentences))
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, sentences)
        self.sentences = sentences.numel()
        self.row_offsets = self.row_offsets[: self.sentences]

    def release_prefix(self, step: int) -> None:
        """Forget the prefix once ``step`` is past every forced token (its width, or max_len):
        the rules are then the same without it, and ``advance`` may take tensor steps."""
        if self.prefix is not None and step >= min(self.prefix.size(1), self.settings.max_len):
            self.prefix = None

    def takes_tensor_steps(self) -> bool:
        """Whether ``advance`` may take a tensor step: not with fairseq's own search (it takes the
        host's position; sampling's draws) or while forcing a prefix (``release_prefix``)."""
        return self.settings.search is None and self.prefix is None

    def state(self) -> List[Tensor]:
        """Every tensor ``advance`` writes (what a capture's warm-up runs must restore)."""
        return [
            self.tokens.tensor, self.scores.tensor, self.ignore, self.final_tokens,
            self.final_positional, self.final_scores, self.final_lengths, self.final_count,
            self.done, self.beam_rows,
        ]  # fmt: skip

    def last_tokens(self, step: Step) -> Tensor:
        """The input of step ``step``: each hypothesis' latest token (bos at step 0)."""
        return column(self.tokens.tensor, step)

    def advance(self, step: Step, lprobs: Tensor) -> Optional[Tensor]:
        """Take the step's log-probabilities (rows, vocabulary; at step 0, rows may also be one per
        sentence); return the order in which the decoder's caches must be reordered, or None when
        every sentence is done (an int ``step`` only: with a tensor, read ``done``)."""
        s = self.settings
        on_host = synced(step)
        if not on_host and (s.search is not None or self.prefix is not None):
            raise ValueError("fairseq's searches and prefix tokens take int steps (the host's)")
        lprobs = self._constrain(step, lprobs)
        if self.prefix is not None:  # int steps only (above)
            self._replicate_first_hypothesis(step, lprobs)
        if s.no_repeat_ngram:
            self._block_repeated_ngrams(step, lprobs)
        if s.match_source_len:
            self._match_source_lengths(step, lprobs)
        if s.search is not None:
            searched = ~self.done  # the sentences in fairseq's batch at this step
            cand_scores, cand_rows, cand_tokens = self._fairseq_search(step, lprobs)
        else:
            cand_scores, cand_rows, cand_tokens = self._best(step, lprobs)

        eos = cand_tokens.eq(s.eos) & cand_scores.ne(-math.inf)
        eos[:, : s.beam] &= ~self.ignore
        eos &= ~self.done.unsqueeze(1)
        finishing = eos[:, : s.beam]
        if not on_host or finishing.any():
            self._finish(step, finishing, cand_rows[:, : s.beam], cand_scores[:, : s.beam])
            if on_host and bool(self.done.all()):
                return None
        if on_host:
            if self.search_stops(step):
                return None
            self.check_max_len(step)

        # The first `beam` candidates that are not EOS continue (fairseq's active_mask).
        eos[:, : s.beam] |= self.ignore
        rank = eos.long() * (2 * s.beam) + self.candidate_offsets[: eos.size(1)]
        rank, active = torch.topk(rank, k=s.beam, dim=1, largest=False)
        self.ignore.copy_(rank.ge(2 * s.beam))
        parents = torch.gather(cand_rows, 1, active) - self.row_offsets
        rows = place_children(parents, self.earlier)
        self.beam_rows.copy_(rows)
        if s.search is not None:
            self._follow_fairseq_search(searched, active)
        order = torch.empty_like(parents).scatter_(1, rows, parents + self.row_offsets).view(-1)
        self.tokens.reorder(order)
        set_column(self.tokens.tensor, step + 1, placed(cand_tokens, active, rows))
        self.scores.reorder(order)
        set_column(self.scores.tensor, step, placed(cand_scores, active, rows))
        return order

    def search_stops(self, step: int) -> bool:
        """Whether fairseq's own search ends the batch at ``step`` whatever is live
        (``stop_on_max_len``: PrefixConstrainedBeamSearch, whose allowed tokens may leave a
        hypothesis no EOS there; those sentences get fewer hypotheses, as in fairseq)."""
        search = self.settings.search
        return step >= self.settings.max_len and getattr(search, "stop_on_max_len", False)

    def check_max_len(self, step: int) -> None:
        """RuntimeError where sentences are still live after step ``max_len`` (EOS is forced
        there: fairseq asserts the same), so a broken search never returns short n-best lists;
        a UsageError where fairseq's constrained search held EOS back (``unmet_constraints``),
        a forced prefix ended a sentence (``check_prefix_ends``) or n-gram blocking left no token
        before ``min_len`` (``exhausted_ngrams``)."""
        s = self.settings
        if step >= s.max_len:
            if getattr(s.search, "supports_constraints", False):
                raise unmet_constraints(s.max_len)
            self.check_prefix_ends()
            if s.no_repeat_ngram and s.min_len > 1:
                raise exhausted_ngrams(s.no_repeat_ngram, s.min_len)
            raise LiveAtMaxLen(f"beam search reached max_len {s.max_len} with live sentences")

    def check_prefix_ends(self) -> None:
        """A UsageError naming the live sentences whose forced prefix holds EOS, which the
        search cannot finish (``unfinished_prefix_ends``)."""
        if self.ended_by_prefix is None:
            return
        live = self.ids[~self.done]
        stuck = live[torch.isin(live, self.ended_by_prefix)].tolist()
        if stuck:
            raise unfinished_prefix_ends(stuck, self.settings.beam)

    def _best(self, step: Step, lprobs: Tensor):
        """Beam search's candidates (fairseq's BeamSearch): the 2 x beam best continuations of
        each sentence; their cumulative scores, rows and tokens, (sentences, 2 x beam) each."""
        vocab = lprobs.size(1)
        flat = self._continuations(step, lprobs)
        k = min(2 * self.settings.beam, flat.size(1) - 1)
        if not synced(step):  # no host sync: fairseq's NaN -> -inf, on every score
            nan_to_minus_inf_(flat)
        cand_scores, cand_flat = best_of_rows(flat, k)
        if synced(step) and bool(cand_scores.isnan().any()):  # topk ranks NaN first
            cand_scores, cand_flat = best_of_rows(nan_to_minus_inf_(flat), k)
        cand_rows = torch.div(cand_flat, vocab, rounding_mode="trunc") + self.row_offsets
        return cand_scores, cand_rows, cand_flat.fmod(vocab)

    def _fairseq_search(self, step: int, lprobs: Tensor):
        """The candidates of fairseq's own search (``SearchSettings.search``), called on the
        hypotheses in fairseq's order (at step 0 every one is the first): their cumulative
        scores, rows and tokens, (sentences, candidates) each."""
        s = self.settings
        lprobs = nan_to_minus_inf_(lprobs).view(self.sentences, -1, lprobs.size(1))
        if step == 0:  # every hypothesis is the first one (a copy: searches view it flat)
            lprobs = lprobs[:, :1].expand(-1, s.beam, -1).contiguous()
        else:
            lprobs = lprobs.gather(1, self._beam_index(lprobs))
        # fairseq reads the hypotheses' scores at step - 1 only: every column of this view.
        previous = self.scores.tensor[:, max(step - 1, 0)].view(self.sentences, s.beam)
        previous = previous.gather(1, self.beam_rows).unsqueeze(2).expand(-1, -1, max(step, 1))
        tokens = self.tokens.tensor[:, : step + 1].view(self.sentences, s.beam, -1)
        tokens = tokens.gather(1, self.beam_rows.unsqueeze(2).expand(-1, -1, step + 1))
        scores, tokens, beams = self._search_live(step, lprobs, previous, tokens)
        return scores, self.beam_rows.gather(1, beams) + self.row_offsets, tokens

    def _search_live(
        self, step: int, lprobs: Tensor, previous: Tensor, tokens: Tensor
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """fairseq's search on the sentences not done, as fairseq's batch holds only those, with
        their hypotheses' tokens so far (``tokens``: sentences, beam, step + 1) and their sample
        ids, as fairseq's generator calls it: sampling's draws, one random number per row, then
        come from the same numbers as fairseq's (a done sentence's rows drew numbers fairseq
        does not, and every later draw differed), and the searches that keep state per sentence
        (diverse beam search, constraints) keep it for the same sentences. A done sentence's
        candidates are never finished: they get score -inf, padding, the first row."""
        search = self.settings.search
        if not bool(self.done.any()):
            return search.step(step, lprobs, previous, tokens.flatten(0, 1), self.ids)
        live = (~self.done).nonzero().squeeze(1)
        found = search.step(
            step, lprobs[live], previous[live], tokens[live].flatten(0, 1), self.ids[live]
        )
        shape = (self.sentences, found[0].size(1))
        scores = found[0].new_full(shape, -math.inf).index_copy_(0, live, found[0])
        tokens = found[1].new_full(shape, self.settings.pad).index_copy_(0, live, found[1])
        return scores, tokens, found[2].new_zeros(shape).index_copy_(0, live, found[2])

    def _follow_fairseq_search(self, searched: Tensor, active: Tensor) -> None:
        """What fairseq's generator tells its search after a step (no-ops but for constrained
        decoding's states): the sentences that finished leave its batch (``prune_sentences``,
        among ``searched``), and the candidates that continue, ``active`` (sentences, beam),
        become its hypotheses, in fairseq's order (``update_constraints``)."""
        search, live = self.settings.search, ~self.done
        if not bool(live[searched].all()):
            search.prune_sentences(live[searched].nonzero().squeeze(1))
        search.update_constraints(active[live])

    def _beam_index(self, lprobs: Tensor) -> Tensor:
        """Where fairseq's hypotheses are among the rows of ``lprobs`` (sentences, beam, vocab)."""
        return self.beam_rows.unsqueeze(2).expand(-1, -1, lprobs.size(2))

    def _continuations(self, step: Step, lprobs: Tensor) -> Tensor:
        """The score of every continuation of each sentence, (sentences, beam x vocabulary):
        ``lprobs`` (constrained) summed with the hypotheses' scores, in place."""
        s = self.settings
        lprobs = lprobs.view(self.sentences, -1, lprobs.size(1))
        if synced(step) and step == 0:  # the same hypothesis in every row: the first
            lprobs = lprobs[:, :1]
        else:
            lprobs.add_(column(self.scores.tensor, step - 1).view(self.sentences, s.beam, 1))
        return lprobs.reshape(self.sentences, -1)

    def _constrain(self, step: Step, lprobs: Tensor) -> Tensor:
        """fairseq's per-step rules on the log-probabilities (in place). fairseq first turns NaN
        into -inf: with an int step ``advance`` does it last, and only when a NaN is among the
        candidates (the result is the same, without a pass over every score at every step)."""
        s = self.settings
        lprobs[:, s.pad] = -math.inf
        if s.unk_penalty:
            lprobs[:, s.unk] -= s.unk_penalty
        if not synced(step):
            return self._constrain_on_device(step, lprobs)
        if step >= s.max_len:
            lprobs[:, : s.eos] = -math.inf
            lprobs[:, s.eos + 1 :] = -math.inf
        if self.prefix is not None and step < min(self.prefix.size(1), s.max_len):
            self._force_prefix(step, lprobs)
            if step < s.min_len:  # rows whose shorter prefix ended: no EOS yet
                rows = lprobs.size(0) // self.prefix.size(0)  # 1 or beam per sentence
                block_early_eos(lprobs, self.prefix[:, step], rows, s.pad, s.eos)
        elif step < s.min_len:
            lprobs[:, s.eos] = -math.inf
        return lprobs

    def _constrain_on_device(self, step: Tensor, lprobs: Tensor) -> Tensor:
        """``_constrain``'s length rules for a tensor step, as masks (no host sync): only EOS at
        ``max_len``, no EOS before ``min_len``. Prefix tokens are forced at int steps only."""
        s = self.settings
        if self.not_eos.numel() != lprobs.size(1):
            self.not_eos = torch.ones(lprobs.size(1), dtype=torch.bool, device=lprobs.device)
            self.not_eos[s.eos] = False
        lprobs.masked_fill_(step.ge(self.limit) & self.not_eos, -math.inf)
        lprobs.select(1, s.eos).masked_fill_(step.lt(s.min_len), -math.inf)
        return lprobs

    def _force_prefix(self, step: int, lprobs: Tensor) -> None:
        """Every hypothesis with a prefix token at ``step`` keeps only its log-probability."""
        tokens = self.prefix[:, step]
        if lprobs.size(0) != tokens.size(0):  # one row per hypothesis, not per sentence
            tokens = tokens.repeat_interleave(self.settings.beam)
        column = tokens.unsqueeze(1)
        kept = lprobs.gather(1, column)  # padding (no prefix token there) is already -inf
        lprobs.masked_fill_(tokens.ne(self.settings.pad).unsqueeze(1), -math.inf)
        lprobs.scatter_(1, column, kept)

    def _block_repeated_ngrams(self, step: Step, lprobs: Tensor) -> None:
        """fairseq's ``--no-repeat-ngram-size n`` (``NGramRepeatBlock``, as its CUDA kernel reads
        the tokens): where a hypothesis's last n - 1 tokens (the start token included) begin an
        n-gram it already holds, the token that ended that n-gram gets -inf. With an int step,
        the n-grams of the tokens so far; with a tensor step (no host sync), those of the whole
        buffer: the slots after the step hold padding, so an n-gram reaching past the step
        blocks at most padding, which is never chosen."""
        n, tokens = self.settings.no_repeat_ngram, self.tokens.tensor
        if synced(step):
            if step < n - 1:  # no n-gram ends before the step yet
                return
            tokens = tokens[:, : step + 1]
        ngrams = tokens.unfold(1, n, 1)  # (rows, n-grams, n), in order of their first token
        last = torch.arange(2 - n, 1, device=tokens.device) + step  # the last n - 1 positions
        latest = tokens.index_select(1, last.clamp(min=0)).unsqueeze(1)
        repeated = ngrams[:, :, :-1].eq(latest).all(dim=2)
        blocked = torch.full_like(repeated, math.inf, dtype=lprobs.dtype)  # amin: unchanged
        blocked.masked_fill_(repeated, -math.inf)
        lprobs.scatter_reduce_(1, ngrams[:, :, -1], blocked, reduce="amin")

    def _match_source_lengths(self, step: Step, lprobs: Tensor) -> None:
        """fairseq's ``LengthConstrainedBeamSearch`` as ``--match-source-len`` builds it: EOS is
        forbidden before a sentence's source length and free (log-probability 0) from it on."""
        eos = lprobs.view(self.sentences, -1, lprobs.size(1)).select(2, self.settings.eos)
        eos.fill_(0).masked_fill_(self.source_lengths.gt(step).unsqueeze(1), -math.inf)

    def _replicate_first_hypothesis(self, step: int, lprobs: Tensor) -> None:
        """Where a sentence's forced prefix token at ``step`` is EOS, give every row of it the
        first hypothesis' tokens, scores and log-probabilities (fairseq's
        ``replicate_first_beam``): forcing the prefix left the other hypotheses at -inf, so EOS
        would finish one of ``beam`` and the others never (step 0 ranks the first row only)."""
        if not 0 < step < min(self.prefix.size(1), self.settings.max_len):
            return
        forced = self.prefix[:, step].eq(self.settings.eos)
        if not bool(forced.any()):
            return
        beam = self.settings.beam
        offsets = self.row_offsets[forced]  # (sentences forced, 1)
        rows = (offsets + self.candidate_offsets[:beam]).reshape(-1)
        firsts = (offsets.squeeze(1) + self.beam_rows[forced, 0]).repeat_interleave(beam)
        for tensor in (self.tokens.tensor, self.scores.tensor, lprobs):
            tensor[rows] = tensor[firsts]

    def _finish(self, step: Step, finishing: Tensor, rows: Tensor, scores: Tensor) -> None:
        """Store the EOS candidates ``finishing`` (sentences, beam) of live sentences, in candidate
        order, while their sentence has fewer than ``beam`` finished; mark sentences done. Every
        candidate is written, those not stored into the spare slot: no host sync."""
        s = self.settings
        slot = self.final_count.unsqueeze(1) + finishing.long().cumsum(dim=1) - 1
        accept = finishing & slot.lt(s.beam)
        slot = torch.where(accept, slot, s.beam)
        rows = rows.reshape(-1)
        tokens = self.tokens.tensor.index_select(0, rows)[:, 1:]  # positions after step: pad
        set_column(tokens, step, torch.full_like(rows, s.eos))
        cumulative = self.scores.tensor.index_select(0, rows)
        set_column(cumulative, step, scores.reshape(-1))
        positional = torch.cat([cumulative[:, :1], cumulative[:, 1:] - cumulative[:, :-1]], 1)
        self._store(self.final_tokens, slot, tokens)
        self._store(self.final_positional, slot, positional)
        length = step + 1
        if s.normalize_scores:  # fairseq divides by a Python float: the power in float64
            on_host = synced(step)
            scores = scores / (
                length**s.len_penalty if on_host else length.double().pow(s.len_penalty).float()
            )
        if s.match_source_len:  # fairseq's finalize: a hypothesis longer than its source
            scores = scores.masked_fill(self.source_lengths.lt(step).unsqueeze(1), -math.inf)
        self.final_scores.scatter_(1, slot, scores)
        self.final_lengths.scatter_(1, slot, torch.zeros_like(slot).add_(length))
        self.final_count += accept.sum(dim=1)
        last = step == s.max_len if synced(step) else step.eq(self.limit)
        complete = self.final_count.eq(s.beam) | last
        self.done |= finishing.any(dim=1) & complete

    def _store(self, final: Tensor, slot: Tensor, rows: Tensor) -> None:
        """Write ``rows`` (sentences x beam, width) into ``final`` (sentences, slots, width) at
        ``slot`` (sentences, beam)."""
        rows = rows.view(self.sentences, -1, rows.size(1))
        final.scatter_(1, slot.unsqueeze(2).expand_as(rows), rows)

    def hypotheses(self) -> List[List[Dict[str, Tensor]]]:
        """fairseq's output: per sentence of the batch, its finished hypotheses by descending
        score; called outside torch.inference_mode, ordinary tensors where the search ran in it
        (fairseq-generate divides the positional scores in place, which an inference tensor
        refuses outside that mode)."""
        results = dict(self.set_aside)
        results.update(zip(self.origin.tolist(), self._nbests(range(self.sentences))))
        return [
            [ordinary(hypothesis) for hypothesis in results[original]]
            for original in range(len(results))
        ]

    def _nbests(self, sentences: Sequence[int]) -> List[List[Dict[str, Tensor]]]:
        """Per sentence of ``sentences`` (indices in the search), its finished hypotheses by
        descending score, ties in the order they finished, as views of the final tensors (of a
        copy when the search is kept for the next batch of its shape, which would overwrite them
        while a caller still holds these: fairseq-interactive's buffer, the hub). Three reads
        from the device whatever the batch size (one per sentence costs a host sync each on a
        GPU)."""
        slots = torch.arange(self.final_scores.size(1), device=self.final_scores.device)
        stored = slots < self.final_count.unsqueeze(1)  # the spare slot never is
        scores = self.final_scores.masked_fill(~stored, -math.inf)
        ranked = torch.sort(scores, dim=1, descending=True, stable=True).indices
        counts, lengths = self.final_count.tolist(), self.final_lengths.tolist()
        ranked = ranked.tolist()
        finals = (self.final_tokens, self.final_scores, self.final_positional)
        if self.fixed_address:
            finals = tuple(final.clone() for final in finals)
        return [
            [
                hypothesis(*finals, sentence, slot, lengths[sentence][slot])
                for slot in ranked[sentence][: counts[sentence]]
            ]
            for sentence in sentences
        ]


def ordinary(hypothesis: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """``hypothesis`` with a copy of each tensor made in torch.inference_mode."""
    return {
        key: value.clone() if value.is_inference() else value for key, value in hypothesis.items()
    }


def hypothesis(
    tokens: Tensor, scores: Tensor, positional: Tensor, sentence: int, slot: int, length: int
) -> Dict[str, Tensor]:
    """fairseq's record of the finished hypothesis in ``slot`` of ``sentence``, from the search's
    final tokens, scores and positional scores."""
    return {
        "tokens": tokens[sentence, slot, :length],
        "score": scores[sentence, slot],
        "attention": torch.empty(0),
        "alignment": torch.empty(0),
        "positional_scores": positional[sentence, slot, :length],
    }


def best_of_rows(scores: Tensor, k: int, chunk: int = CHUNK) -> Tuple[Tensor, Tensor]:
    """``torch.topk(scores, k)`` along dimension 1 (the same values; tied values may come in
    another order), on the CPU from the ``k`` chunks of ``chunk`` consecutive scores with the
    largest maxima, and the scores after the last whole chunk: each of the ``k`` best lies there
    (were its chunk not among them, ``k`` other chunks would each hold a score at least as
    large). At beam 20 a batch of 16 sentences has (16, 20 x 8,000) candidates: a step's top-k
    took 1.8-2.0 ms of its 24-27 ms on a 2-core AMD EPYC with torch.topk over all of them, 0.3 ms
    this way (docs/results/cpu-yardstick/topk-2026-11-29). On a GPU (launch-bound) torch.topk
    stays, and so it does where the chunks would hold a large share of the scores anyway."""
    if scores.is_cuda or scores.size(1) // chunk < 4 * k:
        return torch.topk(scores, k)
    return best_of_chunks(scores, k, chunk)


def best_of_chunks(scores: Tensor, k: int, chunk: int) -> Tuple[Tensor, Tensor]:
    """``best_of_rows`` on the CPU: ``torch.topk`` over the ``k`` chunks with the largest maxima
    and the scores after the last whole chunk."""
    rows, width = scores.shape
    whole = width // chunk
    maxima = scores[:, : whole * chunk].reshape(rows, whole, chunk).amax(dim=2)
    chunks = torch.topk(maxima, k, sorted=False).indices
    offsets = torch.arange(chunk, device=scores.device)
    columns = (chunks.unsqueeze(2) * chunk + offsets).view(rows, -1)
    if whole * chunk < width:
        rest = torch.arange(whole * chunk, width, device=scores.device)
        columns = torch.cat([columns, rest.expand(rows, -1)], dim=1)
    values, picked = torch.topk(scores.gather(1, columns), k)
    return values, columns.gather(1, picked)


def place_children(parents: Tensor, earlier: Tensor) -> Tensor:
    """The row (within its sentence) of each continuing hypothesis, given ``parents`` (sentences,
    beam): the row of its parent for the first hypothesis continuing a parent, in rank order, and
    the rows of the parents without continuation, in increasing order, for the others.
    ``earlier`` is (beam, beam), True below the diagonal. Every parent row keeps its own state."""
    repeated = (parents.unsqueeze(2) == parents.unsqueeze(1)) & earlier
    first = ~repeated.any(dim=2)
    is_parent = torch.zeros_like(first).scatter_(1, parents, True)
    free_rows = torch.sort(is_parent.to(torch.uint8), dim=1, stable=True).indices
    rank = (~first).long().cumsum(dim=1) - 1
    return torch.where(first, parents, free_rows.gather(1, rank.clamp(min=0)))


def placed(candidates: Tensor, active: Tensor, rows: Tensor) -> Tensor:
    """The ``active`` entries of ``candidates`` (sentences, 2 x beam), each at its row, flat."""
    return torch.empty_like(active, dtype=candidates.dtype).scatter_(
        1, rows, torch.gather(candidates, 1, active)
    ).view(-1)
