"""The cost of --print-alignment's teacher-forced passes against the static decoding of one batch
(Multi30k's test, its first 64 sentences, beam 5, at most 60 tokens; the weak En->De checkpoint of
weak-en-de.sh): seconds for generate() and for add_alignments() on its n-best, one run each
(then add_alignments() given the encoder's output, as the static decoder gives it since
2026-12-01's evening).

    PATH=.venv/bin:$PATH python docs/results/static-options-2026-12-01/alignment_cost.py CHECKPOINT
"""

import argparse
import time

from fairseq import checkpoint_utils

import fairseq_san  # noqa: F401 (registers the plugin's models and tasks)
from fairseq_san.static_decoding import StaticSequenceGenerator
from fairseq_san.static_decoding.alignment import add_alignments


def main(checkpoint: str) -> None:
    overrides = {"data": "data-bin/multi30k.en-de"}
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], overrides)
    model = models[0].eval()
    task.load_dataset("test")
    batches = task.get_batch_iterator(task.dataset("test"), max_sentences=64)
    sample = next(batches.next_epoch_itr(shuffle=False))
    generator = StaticSequenceGenerator([model], task.target_dictionary, beam_size=5, max_len_b=60)
    start = time.perf_counter()
    nbests = generator.generate([model], sample)
    decoded = time.perf_counter()
    add_alignments(model, sample, nbests, "hard", generator.pad, generator.eos)
    aligned = time.perf_counter()
    print(f"decode {decoded - start:.2f} s, alignment passes {aligned - decoded:.2f} s "
          f"({sum(len(nbest) for nbest in nbests)} hypotheses)")
    # Since the static decoder hands the passes its search's encoder output (fp32): without the
    # encoder's pass.
    encoder_out = model.encoder.forward_torchscript(sample["net_input"])
    start = time.perf_counter()
    add_alignments(model, sample, nbests, "hard", generator.pad, generator.eos, encoder_out)
    print(f"alignment passes over the search's encoder output {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="the checkpoint decoded")
    args = parser.parse_args()
    main(args.checkpoint)
