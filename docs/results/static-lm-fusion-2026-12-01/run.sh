#!/usr/bin/env bash
# Shallow fusion (fairseq-generate --lm-path, --lm-weight) through fairseq's decoder and the static
# one: the weak En->De checkpoint of static-options-2026-12-01 (update 330 of the recipe), fused
# with a German language model (transformer_lm_san_small, 600 updates on Multi30k's German
# training side, with the translation's dictionary, as fusion needs); Multi30k's test (1,000
# sentences) at beam 5, every hypothesis compared. Wall times are one run each, sequential: not a
# benchmark.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source docs/results/cpu-yardstick/weak-en-de.sh  # DATA, CHECKPOINT, differing
OUT=${OUT:-runs/static-lm-fusion}
mkdir -p "$OUT"
LM_DATA=$OUT/lm-data
[ -f "$LM_DATA/train.bin" ] || fairseq-preprocess --only-source --srcdict "$DATA/dict.de.txt" \
  --trainpref "$DATA/text/train.de" --validpref "$DATA/text/valid.de" --destdir "$LM_DATA" \
  --workers 2 > "$OUT/lm-preprocess.log" 2>&1
LM=$OUT/lm/checkpoint_last.pt
[ -f "$LM" ] || fairseq-train "$LM_DATA" --user-dir fairseq_san --task language_modeling_san \
  --arch transformer_lm_san_small --sample-break-mode eos --tokens-per-sample 128 \
  --share-decoder-input-output-embed --dropout 0.0 --optimizer adam --adam-betas "(0.9,0.98)" \
  --lr 3e-3 --lr-scheduler inverse_sqrt --warmup-updates 200 --warmup-init-lr 1e-7 \
  --weight-decay 0.01 --clip-norm 1.0 --max-tokens 4096 --max-update 600 --seed 1 \
  --save-dir "$OUT/lm" --no-epoch-checkpoints --num-workers 0 --log-format simple \
  --log-interval 100 > "$OUT/lm-train.log" 2>&1
# fairseq-generate loads the --lm-path model with the decoded data's dict.txt: the target's.
GEN_DATA=$OUT/data
mkdir -p "$GEN_DATA"
for file in "$DATA"/*; do ln -sfn "$(realpath "$file")" "$GEN_DATA/$(basename "$file")"; done
ln -sfn "$(realpath "$DATA/dict.de.txt")" "$GEN_DATA/dict.txt"
decode() {  # NAME DECODING OPTION...
  local name=$1 decoding=$2 start=$SECONDS
  shift 2
  fairseq-generate "$GEN_DATA" --user-dir fairseq_san --task translation_san -s en -t de \
    --path "$CHECKPOINT" --gen-subset test --beam 5 --max-len-b 60 --batch-size 64 \
    --post-process sentencepiece --san-decoding "$decoding" "$@" \
    > "$OUT/$name.txt" 2> "$OUT/$name.log"
  echo "$name: $((SECONDS - start)) s, $(grep -c '^H-' "$OUT/$name.txt") hypotheses; $(tail -1 "$OUT/$name.txt")"
}
decode fairseq-plain fairseq
decode static-plain static
for weight in 0.2 0.5; do
  decode "fairseq-fused-$weight" fairseq --lm-path "$LM" --lm-weight "$weight"
  decode "static-fused-$weight" static --lm-path "$LM" --lm-weight "$weight"
  echo "fused $weight: $(differing "$OUT/fairseq-fused-$weight.txt" "$OUT/static-fused-$weight.txt")" \
    "of $(grep -c '^H-' "$OUT/fairseq-fused-$weight.txt") hypotheses differ between fairseq's" \
    "decoder and the static one; $(differing "$OUT/fairseq-plain.txt" \
    "$OUT/fairseq-fused-$weight.txt") differ from fairseq's without the language model"
done
