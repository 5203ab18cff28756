#!/usr/bin/env bash
# Speed of each sensitivity-run policy (paper Tables 3-5), on an idle machine: the policies applied
# at decode time to the En->De baseline's weights (docs/results/en-de-loop), every output forced to
# the same length, so the speed does not depend on the weights (the trained models of
# docs/results/en-de-gpu-sensitivity have the same layers). Plain fairseq decoding (no
# --san-fast-decoding, no CTranslate2): the pure effect of each policy. Run from the repository root.
set -euo pipefail
export PATH=$PWD/.venv/bin:$PATH
BASE=runs/multi30k.en-de/iter0/checkpoints/checkpoint_best.pt  # baseline, 660 updates
policy() {  # policy SELF ENCDEC [ENCODER [KEYS]]: --model-overrides setting that policy, KEYS more
  echo "{\"san_policy\": \"{\\\"decoder_self\\\": $1, \\\"decoder_encdec\\\": $2, \\\"encoder_self\\\": ${3:-null}}\"${4:-}}"
}
fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 64 \
  --beams 4 --modes fixed --cache-beams 4 --no-profile --no-ctranslate2 --repeats 5 \
  --system "baseline=$BASE" \
  --system "6/6=$BASE:$(policy '[6]' '[6]')" \
  --system "6/3.3=$BASE:$(policy '[6]' '[3, 3]')" \
  --system "1.5/3.3=$BASE:$(policy '[1, 5]' '[3, 3]')" \
  --system "1.5/6=$BASE:$(policy '[1, 5]' '[6]')" \
  --system "1.1.1.3/6=$BASE:$(policy '[1, 1, 1, 3]' '[6]')" \
  --system "6/2.1.1.1.1=$BASE:$(policy '[6]' '[2, 1, 1, 1, 1]')" \
  --system "6/6-own-V=$BASE:$(policy '[6]' '[6]' null ', "san_encdec_share": "weights"')" \
  --system "6/6-enc-6=$BASE:$(policy '[6]' '[6]' '[6]')" \
  --system "6/6-enc-1.5=$BASE:$(policy '[6]' '[6]' '[1, 5]')" \
  --out-dir runs/multi30k.en-de/bench-policies > runs/multi30k.en-de/bench-policies.log 2>&1
# Committed: runs/multi30k.en-de/bench-policies/results.{md,json} (bench-policies/).
