#!/usr/bin/env bash
# int8's translations against the batch they are decoded in: one checkpoint (En->De, update 330 of
# the recipe), Multi30k's test decoded by the static decoder at batch 1, 16 and 64, fp32 and int8,
# every sentence's best hypothesis compared (max length fixed at 60: fairseq's --max-len-a reads a
# batch's longest source, which would change translations with the batch at any precision).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
source docs/results/cpu-yardstick/weak-en-de.sh  # DATA, CHECKPOINT, differing
OUT=${OUT:-$RUN/decoded}
mkdir -p "$OUT"
decode() {  # NAME BATCH PRECISION
  fairseq-generate "$DATA" --user-dir fairseq_san --task translation_san \
    --path "$CHECKPOINT" --gen-subset test --beam 4 \
    --max-len-a 0 --max-len-b 60 --post-process sentencepiece --san-decoding static \
    --batch-size "$2" --san-decoder-precision "$3" > "$OUT/$1.txt" 2> "$OUT/$1.log"
  echo "$1: $(tail -1 "$OUT/$1.txt")"
}
decode fp32-16 16 fp32; decode fp32-1 1 fp32
decode int8-16 16 int8; decode int8-64 64 int8; decode int8-1 1 int8
differ() {  # how many of the sentences' best hypotheses differ between two decodings
  echo "$1 vs $2: $(differing "$OUT/$1.txt" "$OUT/$2.txt") of $(grep -c '^H-' "$OUT/$1.txt") differ"
}
differ fp32-1 fp32-16; differ int8-1 int8-16; differ int8-16 int8-64; differ int8-1 int8-64
differ fp32-16 int8-16; differ fp32-16 int8-1
