"""A static-shape decoder for beam search (``--san-decoding static``): same translations as
fairseq's SequenceGenerator, without its per-step overhead.

* ``caches.py``: self-attention, AAN and encoder-decoder state, allocated once per batch, in the
  sliced (CPU) or fixed (position as a tensor: GPU, torch.compile) layout;
* ``step.py``: one decoder step over the loaded model's own weights (baseline, SAN, AAN);
* ``execution.py``: how the step runs (eager, fixed layout, torch.compile, CUDA graphs);
* ``graphs.py``: CUDA graphs, captured and replayed: a whole position (step, beam search,
  reordering), or the step alone where the search needs the host's position (fairseq's own
  searches: sampling, diverse beam search; a language model's prompt forcing);
* ``beam_search.py``: fairseq's beam search (and its other searches, prefix tokens, n-gram
  blocking) on tensors, the position an int or a device tensor (no host sync: capturable);
* ``precision.py``: the step's linear layers on the CPU: packed weights; bf16 / bf16-full / int8
  (the encoder's too, on a copy, below fp32);
* ``generator.py``: the SequenceGenerator drop-in (built by fairseq's ``build_generator`` with
  the search fairseq chooses);
* ``fusion.py``: ``--lm-path`` shallow fusion, the language model a step of its own whose cache
  follows the search (one token a position, where fairseq's runs it over the whole prefix);
* ``alignment.py``: ``--print-alignment``, from one teacher-forced pass over the n-best;
* ``lm_generator.py``: the same for a decoder-only language model (the prompt prefilled in one
  pass; greedy, beam, sampling or diverse searches);
* ``support.py``: what the static decoder refuses, one list per kind checked in one place
  (generation options, ``build_generator``'s arguments, decoders);
* ``errors.py``: the one error it refuses with (``StaticDecoderError``).
"""

from fairseq_san.static_decoding.errors import StaticDecoderError
from fairseq_san.static_decoding.generator import (
    StaticSequenceGenerator,
    build_static_generator,
)
from fairseq_san.static_decoding.precision import PRECISIONS

__all__ = ["PRECISIONS", "StaticDecoderError", "StaticSequenceGenerator", "build_static_generator"]
