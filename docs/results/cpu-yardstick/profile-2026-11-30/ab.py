"""ms per step of whole static decodes (the step timer's synthetic batch, LENGTH tokens); PATCH=1:
bfloat16 keys made contiguous before Q K^T (a trial, not in the decoder).

    PATCH=0|1 PYTHONPATH=. python docs/results/cpu-yardstick/profile-2026-11-30/ab.py \
        baseline|san-6-6 static-bf16-full BEAM LENGTH

ab.txt: three rounds of beams 4 and 20, LENGTH 30, before and after alternating, each a process
of its own (15:42-15:50 UTC, idle).
"""
import argparse, os, time
parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
)
parser.add_argument("policy", metavar="baseline|san-6-6")
parser.add_argument("decoder", metavar="DECODER")
parser.add_argument("beam", type=int, metavar="BEAM")
parser.add_argument("length", type=int, metavar="LENGTH")
args = parser.parse_args()
import torch
from fairseq_san.benchmark import step_timer
from fairseq_san.static_decoding import caches
if os.environ.get("PATCH") == "1":
    original = caches.Position.logits
    def logits(self, query, keys):
        if keys.dtype == torch.bfloat16:
            keys = keys.contiguous()
        return original(self, query, keys)
    caches.Position.logits = logits
torch.set_num_threads(2)
d = step_timer.dictionary_of(8000)
policy, decoder, beam, length = args.policy, args.decoder, args.beam, args.length
sample = next(iter(step_timer.batches(d, 1, 16, 16)))
model = step_timer.build_model("transformer_san_small", step_timer.POLICIES[policy], d)
gen = step_timer.make_generator(decoder, model, d, beam, length)
with torch.no_grad():
    for _ in range(2): gen.generate(None, sample)
    t = time.perf_counter()
    for _ in range(4): gen.generate(None, sample)
print(f"PATCH={os.environ.get('PATCH')} {policy} {decoder} beam {beam} len {length}: {(time.perf_counter()-t)/4/(length+1)*1e3:.2f} ms/step")
