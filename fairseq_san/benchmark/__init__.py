"""Decoding-speed benchmark of SAN systems (paper Figure 4 and Table 6): ``fairseq-san-bench``.

It times translation models on translation data (binarized by fairseq-preprocess with a source
and a target language); a language model, or its data, is refused before anything loads
(``fairseq_system.check_translation``). A *system* is a fairseq checkpoint plus optional model
overrides: the same checkpoint decoded with ``{"san_decoding": "no-cache"}`` is the paper's
"Baseline-Cache" system, and a checkpoint trained without sharing decoded with
``{"san_policy": "..."}`` is a decode-time sharing policy. An override the checkpoint's
configuration does not have is an error that names the nearest valid key. The decoder's options
choose the decoder instead of changing the model: ``{"san_decoding": "static",
"san_decoder_precision": "bf16"}`` decodes the checkpoint with the static-shape decoder
(``fairseq_san.static_decoding``, at a precision of its table), otherwise fairseq's
SequenceGenerator decodes it; every row shows its decoder and precision. Every system
decodes the same pre-collated batches of one subset, so data loading is never timed. What is
measured, and how:

* **Speed** (tokens/s: tokens of the best hypothesis, eos included, as fairseq-generate counts
  them, over the summed wall time of the ``generate`` calls; the device is synchronized around
  every call). Each engine decodes in a worker process of its own (``workers``), so that no
  other engine's threads share the timed process. For each beam size and each length mode, every
  system first decodes the subset once untimed (warm-up), then the systems decode it ``repeats``
  times interleaved (A B C ... A B C ...). Reported: the median tokens/s, and the median over
  repeats of the per-repeat ratio to the baseline system, which cancels most of the drift of a
  shared machine. Every row carries its decoder and precision (fp32, fp16, bf16, int8), the
  report its processor.
* **Length modes.** ``natural``: the systems stop where their search stops, so a model that
  writes longer outputs pays for it. ``fixed``: every hypothesis has exactly L tokens plus eos
  (``min_len = max_len = L``), which isolates the cost of a decoder step.
* **Quality.** BLEU and chrF (``data``), and the share of sentences whose best hypothesis reads
  as the baseline's (how often a reduced precision changes a translation), per beam size, from
  the natural-length warm-up pass (beam search is deterministic, so the timed passes produce
  the same output).
* **Decoding cache, profile, FLOPs** (``meters``): the peak of the decoder's cache (fairseq's
  incremental state, or the static decoder's preallocated tensors); one more pass per system
  timing the parts of a decoder step; the matrix-multiply FLOPs per output token, whose ratio
  to the baseline's is the speed-up a system would reach at the baseline's FLOP rate.
  ``overhead`` compares the profiled pass with the timed passes (none for a row profiled eager in
  place of its graphs or compiled step).
* **CTranslate2** (``ctranslate2_system``): the baseline converted, as float32 and int8.

Modules, one concept each: ``config`` (systems, settings, defaults; no torch), ``system`` (what
decodes, whichever engine), ``fairseq_system`` and ``ctranslate2_system`` (the engines), ``data``
(batches, references, scores), ``meters``, ``timing`` (clock, pass, the timing loop), ``workers``
(the processes), ``machine``, ``report`` (results.json and results.md), ``plots``, ``run``
(``run_benchmark``, end to end).
"""
