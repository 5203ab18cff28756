#!/usr/bin/env bash
# The English side of Multi30k (task 1) as a language-modelling corpus for fairseq: a
# sentencepiece vocabulary learned on train, one sentence per line, binarized for
# --task language_modeling_san (use --sample-break-mode eos: every sentence is a sample).
#
#   examples/lm/prepare.sh [OUT_DIR]      (default data-bin/multi30k.en-lm)
#
# MULTI30K_DIR holds {train,val,test_2016_flickr}.en.gz; without it the raw files are downloaded
# from the public multi30k/dataset repository. Splits: train, valid (val), test (test_2016_flickr).
# Re-running a finished OUT_DIR does nothing (one of other data, or prepared from another
# MULTI30K_DIR's text, is refused); a stopped run is prepared again from the start.
# VOCAB_SIZE (default 2000) sets the vocabulary.
set -euo pipefail
source "$(dirname "$0")/../multi30k/raw_files.sh"
source "$(dirname "$0")/../commands.sh"

USAGE="usage: examples/lm/prepare.sh [OUT_DIR]"
case ${1:-} in
  -h | --help) echo "$USAGE"; exit 0 ;;
  -*) echo "prepare.sh: unknown option $1; $USAGE" >&2; exit 2 ;;  # mkdir made "--x/text"
esac
[ $# -le 1 ] || { echo "$USAGE" >&2; exit 2; }
[ $# -eq 0 ] || [ -n "$1" ] || {  # an unset variable ("$DATA") prepared the default silently
  echo "prepare.sh: OUT_DIR is empty: name a folder, or leave it out for" \
    "data-bin/multi30k.en-lm; $USAGE" >&2; exit 2; }
need_commands prepare.sh fairseq-san-loop fairseq-san-spm fairseq-preprocess
OUT=${1:-data-bin/multi30k.en-lm}
check_out_dir "$OUT"
GIVEN=${VOCAB_SIZE:-}
VOCAB_SIZE=${VOCAB_SIZE:-2000}
check_vocab_size
GIVEN_VOCAB_SIZE=${GIVEN:+$VOCAB_SIZE}
TEXT=$OUT/text
splits="train:train val:valid test_2016_flickr:test"  # raw name:fairseq split

if [ -f "$OUT/.done" ]; then
  check_ready "$OUT" dict.txt "language-modelling data" en
  echo "prepare.sh: $OUT is ready"
  exit 0
fi
check_unfinished "$OUT"
check_multi30k_dir en
mkdir -p "$TEXT"
echo "prepare.sh: raw text into $TEXT"
for pair in $splits; do
  raw=$(raw_file "${pair%%:*}" en)
  gzip -dc "$raw" > "$TEXT/${pair##*:}.raw.en"
done

echo "prepare.sh: sentencepiece model ($VOCAB_SIZE pieces)"
# --force: a stopped run's model is learned again (check_unfinished: nothing binarized with it)
fairseq-san-spm train "$TEXT/train.raw.en" --model-prefix "$OUT/spm" --vocab-size "$VOCAB_SIZE" \
  --force
for pair in $splits; do
  split=${pair##*:}
  fairseq-san-spm encode --model "$OUT/spm.model" "$TEXT/$split.raw.en" "$TEXT/$split.en"
done

binarize "$OUT" --only-source --trainpref "$TEXT/train.en" --validpref "$TEXT/valid.en" \
  --testpref "$TEXT/test.en" --workers 1
touch "$OUT/.done"
echo "prepare.sh: done: $OUT"
