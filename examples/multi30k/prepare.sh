#!/usr/bin/env bash
# Multi30k (task 1) SRC->TGT for fairseq: joint sentencepiece vocabulary, binarized data.
#
#   MULTI30K_DIR=/path/to/multi30k examples/multi30k/prepare.sh en de [OUT_DIR]
#
# MULTI30K_DIR holds {train,val,test_2016_flickr,test_2017_flickr}.LANG.gz; without it the raw
# files are downloaded from the public multi30k/dataset repository. Splits: train, valid (val),
# test (test_2016_flickr) and test1 (test_2017_flickr, when it exists for the pair).
# Re-running a finished OUT_DIR does nothing (one of other data, or prepared from another
# MULTI30K_DIR's text, is refused); a stopped run is prepared again from the start.
# VOCAB_SIZE (default 8000) sets the joint vocabulary.
set -euo pipefail
source "$(dirname "$0")/raw_files.sh"
source "$(dirname "$0")/../commands.sh"

USAGE="usage: prepare.sh SRC TGT [OUT_DIR]"
for arg in "$@"; do  # anywhere: an OUT_DIR "--out" made mkdir fail on an option
  case $arg in
    -h | --help) echo "$USAGE"; exit 0 ;;
    -*) echo "prepare.sh: unknown option $arg; $USAGE" >&2; exit 2 ;;
  esac
done
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "$USAGE" >&2; exit 2; }  # not bash's "line 16: 2: usage"
SRC=$1 TGT=$2
[ "$SRC" != "$TGT" ] || { echo "prepare.sh: SRC and TGT are both $SRC: give two languages" >&2
  exit 2; }
[ $# -lt 3 ] || [ -n "$3" ] || {  # an unset variable ("$DATA") prepared the default silently
  echo "prepare.sh: OUT_DIR is empty: name a folder, or leave it out for" \
    "data-bin/multi30k.$SRC-$TGT; $USAGE" >&2; exit 2; }
need_commands prepare.sh fairseq-san-loop fairseq-san-spm fairseq-preprocess
OUT=${3:-data-bin/multi30k.$SRC-$TGT}
check_out_dir "$OUT"
GIVEN=${VOCAB_SIZE:-}
VOCAB_SIZE=${VOCAB_SIZE:-8000}
check_vocab_size
GIVEN_VOCAB_SIZE=${GIVEN:+$VOCAB_SIZE}
TEXT=$OUT/text
splits="train:train val:valid test_2016_flickr:test"  # raw name:fairseq split

if [ -f "$OUT/.done" ]; then
  check_ready "$OUT" "train.$SRC-$TGT.$SRC.idx" "$SRC->$TGT translation data" "$SRC" "$TGT"
  echo "prepare.sh: $OUT is ready"
  exit 0
fi
check_unfinished "$OUT"
if has_test_2017 "$SRC" && has_test_2017 "$TGT"; then  # checked with the others: a broken one too
  splits="$splits test_2017_flickr:test1"
fi
check_multi30k_dir "$SRC" "$TGT"
mkdir -p "$TEXT"

echo "prepare.sh: raw text into $TEXT"
for pair in $splits; do
  for lang in "$SRC" "$TGT"; do
    raw=$(raw_file "${pair%%:*}" "$lang")
    gzip -dc "$raw" > "$TEXT/${pair##*:}.raw.$lang"
  done
  check_parallel "${pair##*:}" "$SRC" "$TGT" "${pair%%:*}"
done

echo "prepare.sh: joint sentencepiece model ($VOCAB_SIZE pieces)"
# --force: a stopped run's model is learned again (check_unfinished: nothing binarized with it)
fairseq-san-spm train "$TEXT/train.raw.$SRC" "$TEXT/train.raw.$TGT" \
  --model-prefix "$OUT/spm" --vocab-size "$VOCAB_SIZE" --force
for pair in $splits; do
  for lang in "$SRC" "$TGT"; do
    fairseq-san-spm encode --model "$OUT/spm.model" "$TEXT/${pair##*:}.raw.$lang" "$TEXT/${pair##*:}.$lang"
  done
done

testpref=$TEXT/test
case $splits in *test1*) testpref=$testpref,$TEXT/test1 ;; esac
binarize "$OUT" --source-lang "$SRC" --target-lang "$TGT" --joined-dictionary \
  --trainpref "$TEXT/train" --validpref "$TEXT/valid" --testpref "$testpref" --workers 2
touch "$OUT/.done"
echo "prepare.sh: done: $OUT"
