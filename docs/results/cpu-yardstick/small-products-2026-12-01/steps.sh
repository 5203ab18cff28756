#!/usr/bin/env bash
# The step timer, A/B: the code before the one-query products (BEFORE, a worktree on PYTHONPATH:
# git worktree add /tmp/before 7228694) and this checkout's, alternating, ROUNDS rounds (3),
# each a process of its own, beams 4 and 20 at the yardstick's 14 tokens + EOS; ms and page
# faults per step.
#
#   BEFORE=/tmp/before docs/results/cpu-yardstick/small-products-2026-12-01/steps.sh > steps.txt
cd "$(dirname "$0")/../../../.."
export PATH=$PWD/.venv/bin:$PATH
for round in $(seq "${ROUNDS:-3}"); do
  for side in before after; do
    tree=${BEFORE:-/tmp/before}; [ $side = after ] && tree=$PWD
    for beam in 4 20; do
      echo "== round $round $side beam $beam $(date -u +%H:%M:%S)"
      PYTHONPATH=$tree fairseq-san-bench steps --beam $beam \
        --decoders fairseq static-fp32 static-int8 static-bf16-full \
        --policies baseline san-6-6 --rounds 3 --batches 4 --length 14 2>&1 | grep -E 'ms/step'
    done
  done
done
echo "== done $(date -u +%H:%M:%S)"
