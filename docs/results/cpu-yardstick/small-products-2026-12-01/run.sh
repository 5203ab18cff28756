#!/usr/bin/env bash
# in_process.py for each row (the same process holds both sides; each row a process of its own).
#
#   docs/results/cpu-yardstick/small-products-2026-12-01/run.sh > in-process.txt
cd "$(dirname "$0")/../../../.."
for beam in 20 4; do
  for policy in san-6-6 baseline; do
    for decoder in static-int8 static-fp32; do
      PYTHONPATH=. .venv/bin/python docs/results/cpu-yardstick/small-products-2026-12-01/in_process.py \
        "$decoder" "$beam" "$policy" 2>&1 | grep -A3 "rounds"
    done
  done
done
# bfloat16 products go to torch.bmm either side: the control
PYTHONPATH=. .venv/bin/python docs/results/cpu-yardstick/small-products-2026-12-01/in_process.py \
  static-bf16-full 20 san-6-6 2>&1 | grep -A3 "rounds"
