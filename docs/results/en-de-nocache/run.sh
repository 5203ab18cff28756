#!/usr/bin/env bash
# Decoding without the attention cache (the paper's "Baseline-Cache"), Multi30k En->De baseline of
# docs/results/en-de-loop, first 32 sentences of test_2016_flickr, natural lengths (2026-11-26
# 00:30 UTC, 2 CPU cores shared with a training job). Run from the repository root.
# ctranslate2 was not installed then: no CTranslate2 rows, so these tok/s are not distorted by it.
set -euo pipefail
export PATH=$PWD/.venv/bin:$PATH
R=runs/multi30k.en-de
BASE=$R/iter0/checkpoints/checkpoint_best.pt
fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 32 \
  --beams 4 --modes natural --cache-beams 4 --no-profile --repeats 3 --max-len-a 1.2 --max-len-b 10 \
  --system "baseline=$BASE" --system "baseline-cache=$BASE:{\"san_no_cache\": true}" \
  --out-dir $R/bench-nocache > $R/bench-nocache.log 2>&1
# Committed: $R/bench-nocache/ (results.md, results.json, plots).
