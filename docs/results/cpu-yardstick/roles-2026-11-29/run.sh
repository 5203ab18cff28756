#!/usr/bin/env bash
# The step timer, A/B: the code before (BEFORE, a worktree on PYTHONPATH: git worktree add /tmp/old
# 6b3cd10) and this checkout's, alternating, three rounds, each a process of its own; then
#   PYTHONPATH=TREE python docs/results/cpu-yardstick/roles-2026-11-29/opcount.py PRECISION
# in each tree (the aten operators of one static decode, counted by torch.profiler).
cd "$(dirname "$0")/../../../.."
export PATH=$PWD/.venv/bin:$PATH
for round in 1 2 3; do
  for side in before after; do
    tree=${BEFORE:-/tmp/old}; [ $side = after ] && tree=$PWD
    echo "== round $round $side $(date -u +%H:%M:%S)"
    PYTHONPATH=$tree fairseq-san-bench steps --decoders fairseq static-fp32 static-int8 static-bf16-full \
      --policies baseline san-6-6 --rounds 3 --batches 4 --length 40 2>&1 | grep -E 'ms/step|Processor'
    PYTHONPATH=$tree fairseq-san-bench steps --beam 20 --decoders fairseq static-fp32 static-int8 static-bf16-full \
      --policies baseline san-6-6 --rounds 3 --batches 2 --length 20 2>&1 | grep -E 'ms/step'
  done
done
echo "== done $(date -u +%H:%M:%S)"
