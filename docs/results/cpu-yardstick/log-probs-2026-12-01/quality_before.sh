#!/usr/bin/env bash
# The quality run's decode (run.sh's QUALITY part) by the code before the change (BEFORE, a
# worktree of b325e6a, first on PYTHONPATH) on the same checkpoint: static fp32 (the reference
# row) and int8, whose activations the change quantizes per block of rows instead of per step.
#
#   docs/results/cpu-yardstick/log-probs-2026-12-01/quality_before.sh /tmp/before
set -euo pipefail
cd "$(dirname "$0")/../../../.."
BEFORE=$1 STATIC='"san_decoder": "static"'
ckpt=runs/cpu-yardstick/quality-san-6-6/checkpoint_660.pt
out=docs/results/cpu-yardstick/log-probs-2026-12-01/quality-san-6-6-660-before
mkdir -p "$out"
PYTHONPATH=$BEFORE .venv/bin/fairseq-san-bench --data data-bin/multi30k.en-de --subset test \
  --batch-size 16 --beams 4 --modes natural --max-len-a 1.2 --max-len-b 10 --cache-beams \
  --no-profile --repeats 1 --no-ctranslate2 --baseline static-fp32 \
  --system "static-fp32=$ckpt:{$STATIC}" \
  --system "static-int8=$ckpt:{$STATIC, \"san_decoder_precision\": \"int8\"}" \
  --out-dir "$out" 2>&1 | tee "$out/bench.log"
