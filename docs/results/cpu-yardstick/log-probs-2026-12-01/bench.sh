#!/usr/bin/env bash
# The benchmark at beam BEAM (20; fixed lengths), code trees alternating: ROUNDS rounds (3) of one
# fairseq-san-bench run per tree, each with fairseq's baseline, SAN {6}/{6} static int8 and
# bf16-full, and CTranslate2 (its own worker: the control), the yardstick's checkpoints
# (runs/cpu-yardstick, made by docs/results/cpu-yardstick/run.sh). Trees are put first on
# PYTHONPATH; NAME=TREE each, e.g. before=/tmp/before (git worktree add /tmp/before b325e6a).
# Summary: ../host-memory-2026-11-30/summary.py OUT.
#
#   docs/results/cpu-yardstick/log-probs-2026-12-01/bench.sh OUT NAME=TREE [NAME=TREE ...]
set -euo pipefail
cd "$(dirname "$0")/../../../.."
OUT=$1; shift
ROUNDS=${ROUNDS:-3} BEAM=${BEAM:-20}
SAN=runs/cpu-yardstick/san-6-6/checkpoint_last.pt BASE=runs/cpu-yardstick/baseline/checkpoint_last.pt
STATIC='"san_decoder": "static"'
mkdir -p "$OUT"
for round in $(seq "$ROUNDS"); do
  for tree in "$@"; do
    name=${tree%%=*}
    echo "== round $round $name $(date -u +%H:%M:%S)"
    PYTHONPATH=${tree#*=} .venv/bin/fairseq-san-bench --data data-bin/multi30k.en-de --subset test \
      --max-sentences 128 --batch-size 16 --beams "$BEAM" --modes fixed --cache-beams --repeats 3 \
      --no-profile --system "baseline=$BASE" --baseline baseline \
      --system "int8=$SAN:{$STATIC, \"san_decoder_precision\": \"int8\"}" \
      --system "bf16-full=$SAN:{$STATIC, \"san_decoder_precision\": \"bf16-full\"}" \
      --out-dir "$OUT/$name-$round" > "$OUT/$name-$round.log" 2>&1
  done
done
echo "== done $(date -u +%H:%M:%S)"
