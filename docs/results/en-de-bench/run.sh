#!/usr/bin/env bash
# The CPU decoding benchmark of Multi30k En->De (test_2016_flickr) on the idle machine
# (2026-11-26 05:38-05:50 UTC, nothing else running): beam 4 with natural and fixed lengths,
# profile and cache size over 128 sentences, then speed against beam size over 32. Run from the
# repository root, after docs/results/en-de-loop, en-de-full-retrain and en-de-aan-san (their
# checkpoints). The committed reports were written to runs/multi30k.en-de/bench-beam4-rerun and
# bench-beams-rerun (the first line of each report is its exact command); the same commands' first,
# noisier run, earlier that night, is docs/results/archive/en-de-bench-noisy.
# These runs had CTranslate2 rows in the same process, which slows torch: every tok/s here is
# distorted; re-measured in docs/results/cpu-yardstick.
set -euo pipefail
export PATH=$PWD/.venv/bin:$PATH
R=runs/en-de-bench
BASE=runs/multi30k.en-de/iter0/checkpoints/checkpoint_best.pt              # baseline, 660 updates
SAN=runs/multi30k.en-de-full/iter1/checkpoints/checkpoint_best.pt          # SAN {6}/{6}, 660 updates
AANSAN=runs/multi30k.en-de-aan-san/iter0/checkpoints/checkpoint_best.pt    # AAN + enc-dec {6}
FAST='{"san_fast_decoding": true}'
U='{"san_policy": "{\"decoder_self\": [1, 5], \"decoder_encdec\": [3, 3]}"}'
mkdir -p $R
fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 128 \
  --beams 4 --cache-beams 4 20 --repeats 3 --max-len-a 1.2 --max-len-b 10 \
  --system "baseline=$BASE" --system "baseline+fast=$BASE:$FAST" \
  --system "san=$SAN" --system "san+fast=$SAN:$FAST" \
  --system "aan-san=$AANSAN" --system "aan-san+fast=$AANSAN:$FAST" \
  --system "base+1.5-3.3-decode-time=$BASE:$U" \
  --out-dir $R/bench-beam4 > $R/bench-beam4.log 2>&1
fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 32 \
  --beams 1 4 8 12 16 20 --modes fixed --cache-beams --no-profile --repeats 3 \
  --system "baseline=$BASE" --system "baseline+fast=$BASE:$FAST" \
  --system "san=$SAN" --system "san+fast=$SAN:$FAST" --system "aan-san+fast=$AANSAN:$FAST" \
  --out-dir $R/bench-beams > $R/bench-beams.log 2>&1
# Committed: $R/bench-beam4/ and $R/bench-beams/ (results.md, results.json, plots).
