#!/usr/bin/env bash
# fairseq-generate, SAN {6}/{6} static int8, beam 20, the 1,000 test sentences at 14 tokens + EOS,
# batches of 16 and 128, code trees alternating (NAME=TREE each, first on PYTHONPATH), ROUNDS
# rounds (2): tok/s (fairseq's own count) and minor page faults (/usr/bin/time). --user-dir names
# the tree's fairseq_san: fairseq puts a --user-dir's parent first on sys.path and imports it from
# there, whatever PYTHONPATH says (this script's first version, which gave --user-dir fairseq_san,
# ran this checkout's code for every tree: generate-first.txt and generate-user-dir-bug.txt).
#
#   docs/results/cpu-yardstick/log-probs-2026-12-01/generate.sh NAME=TREE [NAME=TREE ...] > generate.txt
cd "$(dirname "$0")/../../../.."
for round in $(seq "${ROUNDS:-2}"); do
  for batch in 16 128; do
    for tree in "$@"; do
      echo "== round $round batch $batch ${tree%%=*} $(date -u +%H:%M:%S)"
      PYTHONPATH=${tree#*=} /usr/bin/time -f "minor faults %R" .venv/bin/fairseq-generate \
        data-bin/multi30k.en-de --path runs/cpu-yardstick/san-6-6/checkpoint_last.pt \
        --user-dir "${tree#*=}/fairseq_san" --task translation_san --san-decoding static \
        --san-decoder-precision int8 --beam 20 --batch-size "$batch" --gen-subset test \
        --max-len-a 0 --max-len-b 14 --min-len 14 --quiet 2>&1 | grep -E "Translated|minor faults"
    done
  done
done
