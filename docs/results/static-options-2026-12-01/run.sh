#!/usr/bin/env bash
# fairseq's generation options through fairseq's decoder and the static one: one checkpoint
# (En->De, update 330 of the recipe), Multi30k's test (1,000 sentences) decoded with n-gram
# blocking off, 2 and 3, with the first 1 and 3 tokens of each reference forced, sampled (plain,
# beam 1; top-k 10, 4 samples each; one seed for the whole run), with outputs as long as the
# sources, with diverse beam search (2 groups of 2, 4 hypotheses each) and diverse siblings (rate
# 0.5), with hard alignments, and constrained (fairseq-interactive); every sentence's hypotheses
# (and alignments) compared, and the hypotheses that repeat a word bigram counted (at most 60
# tokens: the weak model's outputs run long). Wall times are one run each, sequential: not a
# benchmark.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source docs/results/cpu-yardstick/weak-en-de.sh  # DATA, CHECKPOINT, differing
OUT=${OUT:-runs/static-options}
mkdir -p "$OUT"
repeating() {  # how many hypotheses of a fairseq-generate output repeat a word bigram
  grep '^H-' "$1" | cut -f3 | python3 -c '
import sys
print(sum(len(set(zip(w, w[1:]))) < len(w) - 1 for w in (line.split() for line in sys.stdin)))'
}
decode() {  # NAME DECODING OPTION...
  local name=$1 decoding=$2 start=$SECONDS length=(--max-len-b 60)
  shift 2
  # --match-source-len ignores --max-len-b (refused beside it since 2026-12-04; the same output)
  [[ " $* " != *" --match-source-len "* ]] || length=()
  fairseq-generate "$DATA" --user-dir fairseq_san --task translation_san \
    --path "$CHECKPOINT" --gen-subset test --beam 5 \
    "${length[@]}" --batch-size 64 --post-process sentencepiece --san-decoding "$decoding" \
    "$@" > "$OUT/$name.txt" 2> "$OUT/$name.log"
  echo "$name: $((SECONDS - start)) s, $(grep -c '^H-' "$OUT/$name.txt") hypotheses," \
    "$(repeating "$OUT/$name.txt") repeat a word bigram; $(tail -1 "$OUT/$name.txt")"
}
compare() {  # NAME OPTION...: fairseq's decoder and the static one, best hypotheses compared
  local name=$1
  shift
  decode "fairseq-$name" fairseq "$@"
  decode "static-$name" static "$@"
  echo "$name: $(differing "$OUT/fairseq-$name.txt" "$OUT/static-$name.txt") of" \
    "$(grep -c '^H-' "$OUT/fairseq-$name.txt") hypotheses differ between fairseq's decoder and" \
    "the static one"
}
compare plain
compare no-repeat-2 --no-repeat-ngram-size 2
compare no-repeat-3 --no-repeat-ngram-size 3
compare prefix-1 --prefix-size 1
compare prefix-3 --prefix-size 3
compare sampling --sampling --seed 1 --beam 1
compare sampling-topk-10 --sampling --sampling-topk 10 --seed 1 --beam 4 --nbest 4
compare match-source-len --match-source-len
compare diverse-beam-groups --diverse-beam-groups 2 --beam 4 --nbest 4
compare diversity-rate --diversity-rate 0.5
compare print-alignment --print-alignment
echo "print-alignment: $(diff <(grep '^A-' "$OUT/fairseq-print-alignment.txt" | sort) \
  <(grep '^A-' "$OUT/static-print-alignment.txt" | sort) | grep -c '^<' || true) of" \
  "$(grep -c '^A-' "$OUT/fairseq-print-alignment.txt") hard alignments differ between fairseq's" \
  "decoder and the static one"
# --constraints: fairseq-interactive (fairseq-generate has no constraints to give), each test
# sentence constrained to contain the longest piece of its reference.
paste "$DATA/text/test.en" <(python3 -c '
import sys
for line in open(sys.argv[1]):
    print(max(line.split(), key=len))' "$DATA/text/test.de") > "$OUT/constrained.txt"
constrain() {  # DECODING: the constrained test set through fairseq-interactive
  local start=$SECONDS
  fairseq-interactive "$DATA" --user-dir fairseq_san --task translation_san \
    --source-lang en --target-lang de --path "$CHECKPOINT" --beam 5 --max-len-b 60 \
    --batch-size 64 --buffer-size 64 --constraints --san-decoding "$1" \
    < "$OUT/constrained.txt" > "$OUT/$1-constraints.txt" 2> "$OUT/$1-constraints.log"
  echo "$1-constraints: $((SECONDS - start)) s, $(grep -c '^H-' "$OUT/$1-constraints.txt")" \
    "hypotheses, $(holding "$OUT/$1-constraints.txt") hold their constraint"
}
holding() {  # how many hypotheses of a fairseq-interactive output hold their constraint
  python3 -c '
import sys
pieces = [line.rstrip("\n").split("\t")[1] for line in open(sys.argv[1])]
hypotheses = [line.split("\t") for line in open(sys.argv[2]) if line.startswith("H-")]
print(sum(pieces[int(h[0][2:])] in h[2].split() for h in hypotheses))' \
    "$OUT/constrained.txt" "$1"
}
constrain fairseq
constrain static
echo "constraints: $(differing "$OUT/fairseq-constraints.txt" "$OUT/static-constraints.txt") of" \
  "$(grep -c '^H-' "$OUT/fairseq-constraints.txt") hypotheses differ between fairseq's decoder" \
  "and the static one"
