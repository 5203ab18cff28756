#!/usr/bin/env bash
# The first session's benchmark (2026-11-26, 00:23-00:31 UTC, 2 CPU cores), archived: superseded
# by docs/results/en-de-bench. `san_beamable_encdec` was the flag later replaced by
# `--san-fast-decoding`; it no longer exists, so this no longer runs as written.
# The third command is docs/results/en-de-nocache (not superseded). Run from the repository root.
export PATH=$PWD/.venv/bin:$PATH
R=runs/multi30k.en-de
BASE=$R/iter0/checkpoints/checkpoint_best.pt
SAN=$R/iter1/checkpoints/checkpoint_best.pt
P1='{"san_policy": "{\"decoder_self\": [6], \"decoder_encdec\": [6]}"}'
U='{"san_policy": "{\"decoder_self\": [1, 5], \"decoder_encdec\": [3, 3]}"}'
fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 128 \
  --beams 4 --cache-beams 4 20 --repeats 3 --max-len-a 1.2 --max-len-b 10 \
  --system "baseline=$BASE" --system "baseline+beamable=$BASE:{\"san_beamable_encdec\": true}" \
  --system "base+P1-decode-time=$BASE:$P1" --system "san-P1-retrained=$SAN" \
  --system "san-P1+beamable=$SAN:{\"san_beamable_encdec\": true}" \
  --system "base+1.5-3.3-decode-time=$BASE:$U" \
  --out-dir $R/bench-beam4 > $R/bench-beam4.log 2>&1
fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 32 \
  --beams 1 4 8 20 --modes fixed --cache-beams --no-profile --repeats 3 \
  --system "baseline=$BASE" --system "san-P1=$SAN" \
  --out-dir $R/bench-beams > $R/bench-beams.log 2>&1
fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 32 \
  --beams 4 --modes natural --cache-beams 4 --no-profile --repeats 3 --max-len-a 1.2 --max-len-b 10 \
  --system "baseline=$BASE" --system "baseline-cache=$BASE:{\"san_no_cache\": true}" \
  --out-dir $R/bench-nocache > $R/bench-nocache.log 2>&1
