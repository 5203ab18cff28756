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
# the same checkpoint (its bytes), data and options (decoded-by.json) is only rescored; anything
# else decodes it again.
set -euo pipefail

USAGE="usage: test_bleu.sh DATA TGT OUT_DIR NAME=CHECKPOINT[:OVERRIDES] ..."
DATA=${1:?$USAGE} TGT=${2:?$USAGE} OUT=${3:?$USAGE}
shift 3
[ $# -gt 0 ] || { echo "$USAGE" >&2; exit 2; }
[ -d "$DATA" ] || { echo "test_bleu.sh: no data directory $DATA" >&2; exit 1; }
[ -f "$DATA/text/test.raw.$TGT" ] || { echo "test_bleu.sh: no $DATA/text/test.raw.$TGT (run prepare.sh)" >&2; exit 1; }
compgen -G "$DATA/test.*-$TGT.$TGT.idx" > /dev/null ||  # else German scored against English
  { echo "test_bleu.sh: $DATA does not translate into '$TGT' (no test.SRC-$TGT.$TGT.idx):" \
    "TGT is the target language of the pair" >&2; exit 1; }
[[ ${DECODE_BATCH_SIZE:-16} =~ ^[1-9][0-9]*$ ]] ||
  { echo "test_bleu.sh: DECODE_BATCH_SIZE must be a positive integer," \
    "not '$DECODE_BATCH_SIZE'" >&2; exit 2; }
USER_DIR=$(fairseq-san-loop user-dir)

parse() {  # parse NAME=CHECKPOINT[:OVERRIDES]: sets name, checkpoint, overrides
  # OVERRIDES start at the first ":{", as fairseq-san-bench reads a system: a path may hold ":"
  name=${1%%=*} rest=${1#*=}
  checkpoint=${rest%%:\{*} overrides="{}"
  [ "$rest" = "$checkpoint" ] || overrides="{${rest#*:\{}"
}
for spec in "$@"; do  # every checkpoint before decoding any
  parse "$spec"
  # NAME is a folder of OUT_DIR, whose splits are replaced: ".." would replace OUT_DIR/../test
  [[ $spec == *=* && -n $name && $name != */* && $name != . && $name != .. ]] ||
    { echo "test_bleu.sh: '$spec': give NAME=CHECKPOINT, NAME a folder name (not empty, '.'" \
      "or '..', no '/')" >&2; exit 2; }
  [ -f "$checkpoint" ] || { echo "test_bleu.sh: $name: no checkpoint $checkpoint" >&2; exit 1; }
done

GENERATE=(--beam 4 --batch-size "${DECODE_BATCH_SIZE:-16}" --max-len-a 1.2 --max-len-b 10 --required-batch-size-multiple 1
  --scoring sacrebleu --post-process sentencepiece)
for spec in "$@"; do
  parse "$spec"
  for split in test test1; do
    reference=$DATA/text/$split.raw.$TGT
    [ -f "$reference" ] || continue
    dir=$OUT/$name/$split
    key=$(fairseq-san-loop decode-key "$checkpoint" "$DATA" "$split" -- \
      --model-overrides "$overrides" "${GENERATE[@]}")
    if [ "$(cat "$dir/decoded-by.json" 2>/dev/null)" != "$key" ]; then
      # decode into a partial folder: a stopped run leaves no half output
      rm -rf "$dir.partial" && mkdir -p "$dir.partial"
      fairseq-generate "$DATA" --user-dir "$USER_DIR" --path "$checkpoint" --gen-subset "$split" \
        --model-overrides "$overrides" "${GENERATE[@]}" --results-path "$dir.partial" \
        > "$dir.partial/generate.log" 2>&1 || { tail -5 "$dir.partial/generate.log" >&2; exit 1; }
      echo "$key" > "$dir.partial/decoded-by.json"
      rm -rf "$dir" && mv "$dir.partial" "$dir"
    fi
    echo "== $name $split"
    fairseq-san-score "$dir/generate-$split.txt" --reference "$reference" -o "$dir/score.json"
  done
done
