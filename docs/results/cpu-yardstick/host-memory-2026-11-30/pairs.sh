#!/usr/bin/env bash
# The static decoder before and after keeping freed memory, in the benchmark (beam BEAM, 20 by
# default; fixed lengths): ROUNDS rounds of one fairseq-san-bench run of each code, alternating, each with
# fairseq's baseline, SAN {6}/{6} static int8 and bf16-full, and CTranslate2 (its worker is not
# touched by the change: the control), and the page faults of the fairseq worker, sampled from
# /proc once a second. BEFORE and AFTER: worktrees of the commit before the change and of the
# change (git worktree add /tmp/prev 53503cb; git worktree add /tmp/kept 5901ee1), each put
# first on PYTHONPATH. The yardstick's checkpoints (runs/cpu-yardstick, made by
# docs/results/cpu-yardstick/run.sh) are decoded. Summary: summary.py OUT.
#
#   [BEAM=4] docs/results/cpu-yardstick/host-memory-2026-11-30/pairs.sh BEFORE AFTER OUT [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../../../.."
BEFORE=$1 AFTER=$2 OUT=$3 ROUNDS=${4:-4} BEAM=${BEAM:-20}
SAN=runs/cpu-yardstick/san-6-6/checkpoint_last.pt BASE=runs/cpu-yardstick/baseline/checkpoint_last.pt
STATIC='"san_decoder": "static"'
mkdir -p "$OUT"

run() {  # run CODE NAME: one benchmark of CODE's fairseq_san, its workers' page faults sampled
  PYTHONPATH=$1 .venv/bin/fairseq-san-bench --data data-bin/multi30k.en-de --subset test \
    --max-sentences 128 --batch-size 16 --beams "$BEAM" --modes fixed --cache-beams --repeats 3 \
    --no-profile --system "baseline=$BASE" --baseline baseline \
    --system "int8=$SAN:{$STATIC, \"san_decoder_precision\": \"int8\"}" \
    --system "bf16-full=$SAN:{$STATIC, \"san_decoder_precision\": \"bf16-full\"}" \
    --out-dir "$OUT/$2" > "$OUT/$2.log" 2>&1 &
  local bench=$!
  while kill -0 $bench 2>/dev/null; do  # pid, minor faults, CPU ticks of each worker
    for worker in $(pgrep -P $bench || true); do
      echo "$worker $(awk '{print $10, $14 + $15}' /proc/$worker/stat 2>/dev/null)"
    done >> "$OUT/$2.faults"
    sleep 1
  done
  wait $bench
}
for round in $(seq "$ROUNDS"); do
  run "$BEFORE" "pair-before-$round"
  run "$AFTER" "pair-after-$round"
done
