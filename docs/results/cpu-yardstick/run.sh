#!/usr/bin/env bash
# The CPU yardstick: fairseq's baseline and SAN {6}/{6}, the same two checkpoints on
# the static-shape decoder (fairseq_san/static_decoding; SAN also at bf16, bf16-fp32-logits,
# bf16-full and int8, the baseline also at int8, to compare with CTranslate2 int8), and the
# baseline converted to CTranslate2 (fp32 and int8), Multi30k En->De test, 128 sentences, batches
# of 16, beams 4 and 20, fixed output lengths; each engine timed in a process of its own
# (fairseq_san/benchmark/workers.py). Every row of the reports names its decoder and precision.
#
#   MULTI30K_DIR=/path/to/multi30k docs/results/cpu-yardstick/run.sh   (downloads Multi30k when unset)
#
# Run it from anywhere on an idle machine; every path is relative to the repository root. The two
# models train for UPDATES (20) updates only: at fixed output lengths every hypothesis has exactly
# L tokens, so the speed of a decoder step depends on the model's shapes, not on its weights, and
# a barely trained model measures the same speed as a converged one (its BLEU, and whether bf16 or
# int8 change its translations, mean nothing: see the QUALITY section at the end). Three benchmark
# runs show that a system's speed does not depend on the company it is timed in: all systems; the
# baseline alone; the baseline and CTranslate2 without the others. Compare the baseline's tok/s
# across the three and CTranslate2's across the first and the last. Knobs (for a smoke test):
# SENTENCES (128), REPEATS (3), BEAMS ("4 20"), MODES ("fixed"; "natural fixed" adds natural
# lengths, meaningful only for trained models), UPDATES (20), OUT (docs/results/cpu-yardstick),
# RUN_DIR (runs/cpu-yardstick, checkpoints), SPEED (1: the speed runs), QUALITY (0: see below),
# BF16 (1; 0 leaves out the bfloat16 rows, which a CPU without AVX-512 runs slower than fp32:
# the static decoder warns there).
set -euo pipefail
cd "$(dirname "$0")/../../.."

DATA=data-bin/multi30k.en-de
RUN=${RUN_DIR:-runs/cpu-yardstick}
OUT=${OUT:-docs/results/cpu-yardstick}
UPDATES=${UPDATES:-20} SENTENCES=${SENTENCES:-128} REPEATS=${REPEATS:-3} BEAMS=${BEAMS:-4 20}
MODES=${MODES:-fixed}
STATIC='"san_decoding": "static"'
LOGITS32='"san_decoder_precision": "bf16-fp32-logits"'

examples/multi30k/prepare.sh en de "$DATA"

train() {  # train NAME MAX_UPDATE [fairseq-train args]: transformer_san_small, resumable
  local name=$1 updates=$2; shift 2
  [ -f "$RUN/$name/trained-$updates" ] && return  # a larger MAX_UPDATE resumes and goes on
  fairseq-train "$DATA" --user-dir fairseq_san \
    --task translation_san --arch transformer_san_small --share-all-embeddings \
    --optimizer adam --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 10 \
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 4096 \
    --max-update "$updates" --disable-validation --no-epoch-checkpoints --seed 1 \
    --num-workers 0 --log-format simple --log-interval 10 --save-dir "$RUN/$name" "$@"
  cp "$RUN/$name/checkpoint_last.pt" "$RUN/$name/checkpoint_$updates.pt"  # this budget's model
  touch "$RUN/$name/trained-$updates"
}
SAN_POLICY=(--san-decoder-self-policy 6 --san-decoder-encdec-policy 6)
if [ "${SPEED:-1}" = 1 ]; then
  train baseline "$UPDATES"
  train san-6-6 "$UPDATES" "${SAN_POLICY[@]}"
  BASE=$RUN/baseline/checkpoint_last.pt SAN=$RUN/san-6-6/checkpoint_last.pt

  bench() {  # bench NAME [fairseq-san-bench args]: one run, results in OUT/NAME
    mkdir -p "$OUT/$1"
    # shellcheck disable=SC2086  # BEAMS and MODES are lists
    fairseq-san-bench --data "$DATA" --subset test --max-sentences "$SENTENCES" \
      --batch-size 16 --beams $BEAMS --modes $MODES --cache-beams --repeats "$REPEATS" \
      --system "baseline=$BASE" --baseline baseline \
      --out-dir "$OUT/$1" "${@:2}" 2>&1 | tee "$OUT/$1/bench.log"
  }
  BF16_ROWS=() BF16_FULL=()
  if [ "${BF16:-1}" = 1 ]; then
    BF16_ROWS=(--system "san-6-6-static-bf16=$SAN:{$STATIC, \"san_decoder_precision\": \"bf16\"}"
               --system "san-6-6-static-bf16-fp32-logits=$SAN:{$STATIC, $LOGITS32}")
    BF16_FULL=(--system
               "san-6-6-static-bf16-full=$SAN:{$STATIC, \"san_decoder_precision\": \"bf16-full\"}")
  fi
  bench all --system "san-6-6=$SAN" \
    --system "baseline-static=$BASE:{$STATIC}" \
    --system "san-6-6-static=$SAN:{$STATIC}" \
    "${BF16_ROWS[@]}" \
    --system "san-6-6-static-int8=$SAN:{$STATIC, \"san_decoder_precision\": \"int8\"}" \
    "${BF16_FULL[@]}" \
    --system "baseline-static-int8=$BASE:{$STATIC, \"san_decoder_precision\": \"int8\"}"
  bench baseline-alone --no-ctranslate2
  bench baseline-ctranslate2
fi

# ---------------------------------------------------------------------------------------------
# QUALITY=1 (off by default; about an hour per model on 2 cores): do bf16 and int8 keep the
# translations? The target: BLEU within 0.3 of fp32 and the same translation for at least
# 99% of the sentences. The yardstick models above cannot say, so this trains QUALITY_MODELS
# ("baseline san-6-6") for QUALITY_UPDATES (660, 5 epochs: the recipe of docs/results/en-de-loop)
# with examples/learn_to_share.sh's optimizer settings (resumable: rerun to go on), then decodes
# the whole test set at natural lengths (test_bleu.sh's limits) with the static decoder at fp32
# (each run's reference row), bf16, bf16-fp32-logits, bf16-full and int8, beside fairseq at
# fp32. Read BLEU and "= base" (sentences that read as the static fp32 row's) in
# OUT/quality-MODEL-UPDATES/results.md.
# A larger QUALITY_UPDATES goes on training the same model (its learning-rate schedule continues).
# SPEED=0 QUALITY=1 runs this part alone.
if [ "${QUALITY:-0}" = 1 ]; then
  QUALITY_UPDATES=${QUALITY_UPDATES:-660}
  TRAINED=(--adam-betas "(0.9,0.98)" --adam-eps 1e-9 --warmup-updates 500
           --warmup-init-lr 1e-7 --dropout 0.3 --weight-decay 0.0001)
  for model in ${QUALITY_MODELS:-baseline san-6-6}; do
    policy=()
    [ "$model" = san-6-6 ] && policy=("${SAN_POLICY[@]}")
    train "quality-$model" "$QUALITY_UPDATES" "${TRAINED[@]}" "${policy[@]}"
    ckpt=$RUN/quality-$model/checkpoint_$QUALITY_UPDATES.pt out=$OUT/quality-$model-$QUALITY_UPDATES
    mkdir -p "$out"
    fairseq-san-bench --data "$DATA" --subset test --batch-size 16 --beams 4 \
      --modes natural --max-len-a 1.2 --max-len-b 10 --cache-beams --no-profile \
      --repeats "$REPEATS" --no-ctranslate2 --baseline static-fp32 \
      --system "static-fp32=$ckpt:{$STATIC}" \
      --system "static-bf16=$ckpt:{$STATIC, \"san_decoder_precision\": \"bf16\"}" \
      --system "static-bf16-fp32-logits=$ckpt:{$STATIC, $LOGITS32}" \
      --system "static-bf16-full=$ckpt:{$STATIC, \"san_decoder_precision\": \"bf16-full\"}" \
      --system "static-int8=$ckpt:{$STATIC, \"san_decoder_precision\": \"int8\"}" \
      --system "fairseq-fp32=$ckpt" \
      --out-dir "$out" 2>&1 | tee "$out/bench.log"
  done
fi
