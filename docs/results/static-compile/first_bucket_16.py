"""``fairseq-san-bench steps`` with the fixed layout's length buckets starting at 16 positions
(16, 32, 64, 128, 256) instead of 32: what finer buckets would give the fixed and compiled steps.

    python docs/results/static-compile/first_bucket_16.py --threads 1 --length 14 --beam 4 \\
        --decoders fairseq static-fp32 static-fp32-fixed static-fp32-compile
"""

import sys

from fairseq_san.static_decoding import caches

caches.length_bucket.__defaults__ = ((16, 32, 64, 128, 256),)

from fairseq_san.benchmark import step_timer  # noqa: E402  (after the buckets are set)

if __name__ == "__main__":
    step_timer.main(sys.argv[1:])
