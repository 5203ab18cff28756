#!/usr/bin/env bash
# The decoding benchmark on the lent GPU (NVIDIA H200, 2026-11-26), over the systems that
# docs/results/en-de-gpu-sensitivity/train.sh trained there (fp32, batch 16): beam 4 with natural
# and fixed lengths, profile and cache size; then speed against beam size. It ran in the same call
# as the trainings, as `timeout 191 docs/results/en-de-gpu-bench/run.sh` (the time left in the
# call), which cut the beam sweep (second command) during beam 4: only bench-beam4/ was obtained.
# No CTranslate2 rows (not installed there). Run from the repository root with fairseq-san's
# console commands on PATH (offline GPU machine: scripts/build_offline_bundle.py).
set -euo pipefail
R=runs/gpu
ckpt() { echo "$R/$1/iter0/checkpoints/checkpoint_best.pt"; }
FAST='{"san_fast_decoding": true}'
fairseq-san-bench --gpu --data data-bin/multi30k.en-de --subset test --max-sentences 256 \
  --beams 4 --cache-beams 4 20 --repeats 3 --max-len-a 1.2 --max-len-b 10 \
  --system "baseline=$(ckpt baseline)" --system "baseline+fast=$(ckpt baseline):$FAST" \
  --system "san=$(ckpt san-6-6)" --system "san+fast=$(ckpt san-6-6):$FAST" \
  --system "aan-san=$(ckpt aan-san)" --system "aan-san+fast=$(ckpt aan-san):$FAST" \
  --out-dir $R/bench-beam4 > $R/bench-beam4.log 2>&1
fairseq-san-bench --gpu --data data-bin/multi30k.en-de --subset test --max-sentences 64 \
  --beams 1 4 8 12 16 20 --modes fixed --cache-beams --no-profile --repeats 3 \
  --system "baseline=$(ckpt baseline)" --system "baseline+fast=$(ckpt baseline):$FAST" \
  --system "san=$(ckpt san-6-6)" --system "san+fast=$(ckpt san-6-6):$FAST" \
  --system "aan-san+fast=$(ckpt aan-san):$FAST" \
  --out-dir $R/bench-beams > $R/bench-beams.log 2>&1
# Committed: $R/bench-beam4/ (results.md, results.json, plots).
