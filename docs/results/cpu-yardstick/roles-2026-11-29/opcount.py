"""aten operator counts of one static decode (SAN {6}/{6}, random weights, beam 4, 4 sentences,
6 tokens), then its best hypothesis: run in two trees of the code, the same counts and tokens say
that both run the same operators; a difference in speed between them is then the machine's.

    PYTHONPATH=TREE python docs/results/cpu-yardstick/roles-2026-11-29/opcount.py PRECISION

(PRECISION: fp32, int8 or bf16-full; output: one operator and its count a line.)
"""
import argparse
parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
)
parser.add_argument("precision", metavar="PRECISION")
args = parser.parse_args()
import torch
from fairseq_san.benchmark import step_timer as st

precision = args.precision
dictionary = st.dictionary_of(400)
model = st.build_model("transformer_san_small", st.POLICIES["san-6-6"], dictionary)
sample = next(st.batches(dictionary, 1, 4, 9))
generator = st.make_generator(f"static-{precision}", model, dictionary, 4, 6)
with torch.no_grad():
    generator.generate(None, sample)
    with torch.profiler.profile() as prof:
        out = generator.generate(None, sample)
counts = {e.key: e.count for e in prof.key_averages()}
for key in sorted(counts):
    print(key, counts[key])
print("TOKENS", out[0][0]["tokens"].tolist(), float(out[0][0]["score"]))
