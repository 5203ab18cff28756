#!/usr/bin/env bash
# The CPU yardstick of issue 12: fairseq's baseline, SAN {6}/{6} and the baseline converted to
# CTranslate2 (fp32 and int8), Multi30k En->De test, 128 sentences, batches of 16, beams 4 and 20,
# fixed output lengths; each engine timed in a process of its own (fairseq_san/benchmark/workers.py).
#
#   MULTI30K_DIR=/path/to/multi30k docs/results/cpu-yardstick/run.sh   (downloads Multi30k when unset)
#
# Run it from anywhere on an idle machine; every path is relative to the repository root. The two
# models train for UPDATES (20) updates only: at fixed output lengths every hypothesis has exactly
# L tokens, so the speed of a decoder step depends on the model's shapes, not on its weights, and
# a barely trained model measures the same speed as a converged one (its BLEU means nothing; this
# run reports no BLEU). Three benchmark runs show that a system's speed does not depend on the
# company it is timed in: all four systems; the baseline alone; the baseline and CTranslate2
# without SAN. Compare the baseline's tok/s across the three and CTranslate2's across the first
# and the last. Knobs (for a smoke test): SENTENCES (128), REPEATS (3), BEAMS ("4 20"),
# UPDATES (20), OUT (docs/results/cpu-yardstick), RUN_DIR (runs/cpu-yardstick, checkpoints).
set -euo pipefail
cd "$(dirname "$0")/../../.."

DATA=data-bin/multi30k.en-de
RUN=${RUN_DIR:-runs/cpu-yardstick}
OUT=${OUT:-docs/results/cpu-yardstick}
UPDATES=${UPDATES:-20} SENTENCES=${SENTENCES:-128} REPEATS=${REPEATS:-3} BEAMS=${BEAMS:-4 20}

examples/multi30k/prepare.sh en de "$DATA"

train() {  # train NAME [fairseq-train args]: transformer_san_small, UPDATES updates
  local name=$1; shift
  [ -f "$RUN/$name/checkpoint_last.pt" ] || fairseq-train "$DATA" --user-dir fairseq_san \
    --task translation_san --arch transformer_san_small --share-all-embeddings \
    --optimizer adam --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 10 \
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 4096 \
    --max-update "$UPDATES" --disable-validation --no-epoch-checkpoints --seed 1 \
    --num-workers 0 --log-format simple --log-interval 10 --save-dir "$RUN/$name" "$@"
}
train baseline
train san-6-6 --san-decoder-self-policy 6 --san-decoder-encdec-policy 6

bench() {  # bench NAME [fairseq-san-bench args]: one run, results in OUT/NAME
  mkdir -p "$OUT/$1"
  # shellcheck disable=SC2086  # BEAMS is a list of numbers
  fairseq-san-bench --data "$DATA" --subset test --max-sentences "$SENTENCES" \
    --batch-size 16 --beams $BEAMS --modes fixed --cache-beams --repeats "$REPEATS" \
    --system "baseline=$RUN/baseline/checkpoint_last.pt" --baseline baseline \
    --out-dir "$OUT/$1" "${@:2}" 2>&1 | tee "$OUT/$1/bench.log"
}
bench all --system "san-6-6=$RUN/san-6-6/checkpoint_last.pt"
bench baseline-alone --no-ctranslate2
bench baseline-ctranslate2
