#!/usr/bin/env bash
# Test BLEU and chrF of trained systems on Multi30k's test sets: test (test_2016_flickr) and
# test1 (test_2017_flickr, where the pair has it), beam 4, batch 16 (DECODE_BATCH_SIZE), sacrebleu
# on detokenized text.
#
#   examples/multi30k/test_bleu.sh DATA TGT OUT_DIR NAME=CHECKPOINT[:OVERRIDES] ...
#
# DATA is prepare.sh's output (data-bin/multi30k.SRC-TGT), TGT its target language. OVERRIDES are fairseq's
# --model-overrides, e.g. a decode-time policy:
#   "base+P1=ckpt.pt:{'san_policy': '{\"decoder_self\": [6], \"decoder_encdec\": [6]}'}"
# Writes OUT_DIR/NAME/SPLIT/{generate-SPLIT.txt,score.json,decoded-by.json}. A split decoded from
# the same checkpoint (its bytes), data and options, the bytes of files OVERRIDES name included
# (decoded-by.json), is only rescored where its output is there; anything else decodes it again.
set -euo pipefail

USAGE="usage: test_bleu.sh DATA TGT OUT_DIR NAME=CHECKPOINT[:OVERRIDES] ..."
case ${1:-} in -h | --help) echo "$USAGE"; exit 0 ;; esac
[ $# -ge 4 ] || { echo "$USAGE" >&2; exit 2; }  # not bash's "line 17: 2: usage"
source "$(dirname "$0")/../commands.sh"
need_commands test_bleu.sh fairseq-san-loop fairseq-generate fairseq-san-score
DATA=$1 TGT=$2 OUT=$3
shift 3
# Checks the data, OUT_DIR, DECODE_BATCH_SIZE and every system (its OVERRIDES and dictionaries
# against its checkpoint too) before decoding any; a line per system and split to score:
# NAME, SPLIT, its REFERENCE, CHECKPOINT and OVERRIDES ("{}" if none), tab-separated.
SCORED=$(fairseq-san-loop test-systems --batch-size="${DECODE_BATCH_SIZE:-16}" --out-dir="$OUT" \
  -- "$DATA" "$TGT" "$@")
USER_DIR=$(fairseq-san-loop user-dir)
BATCH_SIZE=$((10#${DECODE_BATCH_SIZE:-16}))  # checked: "08" decodes (and is keyed) as 8

GENERATE=(--beam 4 --batch-size "$BATCH_SIZE" --max-len-a 1.2 --max-len-b 10 --required-batch-size-multiple 1
  --scoring sacrebleu --post-process sentencepiece)
# fd 3: the commands keep stdin
while IFS=$'\t' read -r -u 3 name split reference checkpoint overrides; do
  dir=$OUT/$name/$split
  key=$(fairseq-san-loop decode-key "$checkpoint" "$DATA" "$split" -- \
    --model-overrides "$overrides" "${GENERATE[@]}")
  # decoded-by.json beside no output (deleted since): fairseq-san-score failed on it, every rerun
  decoded=$dir/generate-$split.txt
  if [ "$(cat "$dir/decoded-by.json" 2>/dev/null)" != "$key" ] || [ ! -f "$decoded" ]; then
    # decode into a partial folder: a stopped run leaves no half output
    rm -rf "$dir.partial" && mkdir -p "$dir.partial"
    fairseq-generate "$DATA" --user-dir "$USER_DIR" --path "$checkpoint" --gen-subset "$split" \
      --model-overrides "$overrides" "${GENERATE[@]}" --results-path "$dir.partial" \
      > "$dir.partial/generate.log" 2>&1 || {
      fairseq-san-loop log-tail "$dir.partial/generate.log" >&2; exit 1; }
    echo "$key" > "$dir.partial/decoded-by.json"
    rm -rf "$dir" && mv "$dir.partial" "$dir"
  fi
  echo "== $name $split"
  fairseq-san-score "$decoded" --reference "$reference" -o "$dir/score.json"
done 3<<< "$SCORED"
