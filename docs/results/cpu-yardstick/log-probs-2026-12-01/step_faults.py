"""Where a static decode's page faults and time go, per step: timers and getrusage around the
calls inside whole decodes (the step timer's synthetic batch, SAN {6}/{6}, vocabulary 8,000, 14
tokens + EOS).

    PYTHONPATH=TREE python docs/results/cpu-yardstick/log-probs-2026-12-01/step_faults.py DECODER BEAM BATCH
"""

import argparse, collections, resource, time, warnings
parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
)
parser.add_argument("decoder", metavar="DECODER")
parser.add_argument("beam", type=int, metavar="BEAM")
parser.add_argument("batch", type=int, metavar="BATCH")
args = parser.parse_args()
warnings.filterwarnings("ignore")
import torch
from fairseq_san.benchmark import step_timer
from fairseq_san.static_decoding import beam_search, caches, step as step_module
from fairseq_san.static_decoding.generator import StaticSequenceGenerator
def faults(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
stats = collections.defaultdict(lambda: [0.0, 0])
def timed(function, label):
    def wrapper(*a, **k):
        t, f = time.perf_counter(), faults()
        r = function(*a, **k)
        stats[label][0] += time.perf_counter() - t; stats[label][1] += faults() - f
        return r
    return wrapper
torch.set_num_threads(2)
decoder, beam, batch = args.decoder, args.beam, args.batch
dictionary = step_timer.dictionary_of(8000)
sample = next(iter(step_timer.batches(dictionary, 1, batch, 16)))
model = step_timer.build_model("transformer_san_small", step_timer.POLICIES["san-6-6"], dictionary)
generator = step_timer.make_generator(decoder, model, dictionary, beam, 14)
for owner, name, label in ((beam_search.TensorBeamSearch, "advance", "advance"), (caches.DecoderCache, "follow", "follow"),
    (step_module.StaticDecoderStep, "forward", "step"), (torch, "log_softmax", " log_softmax"), (beam_search, "best_of_rows", "  best_of_rows"),
    (beam_search.TensorBeamSearch, "_continuations", "  continuations"), (beam_search.TensorBeamSearch, "_constrain", "  constrain"),
    (caches, "allocate_cache", "allocate_cache"), (StaticSequenceGenerator, "generate", "generate (all)")):
    setattr(owner, name, timed(getattr(owner, name), label))
s = generator.step
for i, layer in enumerate(s.layers):
    layer.forward = timed(layer.forward, f" layer {i}")
s.output_projection.forward = timed(s.output_projection.forward, " output projection")
with torch.no_grad():
    for _ in range(2): generator.generate(None, sample)
    stats.clear()
    for _ in range(3): generator.generate(None, sample)
steps = 3 * 15
for label, (sec, f) in sorted(stats.items(), key=lambda kv: -kv[1][0]):
    print(f"{label:22s} {sec/steps*1e3:8.2f} ms/step {f/steps:10.0f} faults/step")
