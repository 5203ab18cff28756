"""fairseq-generate (SAN {6}/{6} static int8, beam 20, the yardstick's checkpoint, the 1,000 test
sentences at 14 tokens + EOS, batch BATCH) with timers and getrusage around the static
decoder's calls: where its page faults are.

    PYTHONPATH=TREE python docs/results/cpu-yardstick/log-probs-2026-12-01/generate_faults.py BATCH
"""

import argparse, collections, os, resource, sys, time
parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
)
parser.add_argument("batch", type=int, metavar="BATCH")
args = parser.parse_args()
import fairseq_san
import torch
from fairseq_san.static_decoding import beam_search, caches, step as step_module
from fairseq_san.static_decoding.generator import StaticSequenceGenerator
def faults(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
stats = collections.defaultdict(lambda: [0.0, 0, 0])
def timed(function, label):
    def wrapper(*a, **k):
        t, f = time.perf_counter(), faults()
        r = function(*a, **k)
        s = stats[label]; s[0] += time.perf_counter() - t; s[1] += faults() - f; s[2] += 1
        return r
    return wrapper
for owner, name, label in ((beam_search.TensorBeamSearch, "advance", "advance"), (caches.DecoderCache, "follow", "follow"),
    (step_module.StaticDecoderStep, "forward", "step"), (StaticSequenceGenerator, "decode", "decode"), (torch, "log_softmax", " log_softmax"),
    (StaticSequenceGenerator, "generate", "generate (all)"), (step_module.StaticDecoderStep, "_layers", " _layers")):
    setattr(owner, name, timed(getattr(owner, name), label))
from fairseq_cli.generate import cli_main
sys.argv = ["fairseq-generate", "data-bin/multi30k.en-de", "--path", "runs/cpu-yardstick/san-6-6/checkpoint_last.pt",
 "--user-dir", os.path.dirname(fairseq_san.__file__), "--task", "translation_san", "--san-decoding", "static", "--san-decoder-precision", "int8",
 "--beam", "20", "--batch-size", str(args.batch), "--gen-subset", "test", "--max-len-a", "0", "--max-len-b", "14", "--min-len", "14", "--quiet"]
f0 = faults()
cli_main()
print("total faults", faults() - f0)
for label, (sec, f, n) in sorted(stats.items(), key=lambda kv: -kv[1][0]):
    print(f"{label:22s} {sec:8.2f} s {f:10d} faults {n} calls")
