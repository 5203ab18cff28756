#!/usr/bin/env bash
# `make demo`: the learn-to-share loop on Multi30k En->De at demo scale (about 15-20 minutes on
# 2 CPU cores), then the baseline and the learned SAN model decoded side by side: fairseq's
# decoder, the static decoder at fp32 and at int8 (the fastest precision of the CPU yardstick
# that keeps BLEU), and CTranslate2 where it is installed.
#
#   MULTI30K_DIR=/path/to/multi30k examples/demo.sh     (downloads Multi30k when unset)
#
# Demo scale means a few hundred updates: the BLEU scores are far below a trained model's; the
# speed ratio and the learned policy are the point. RUN_DIR (runs/demo) keeps everything; running
# again resumes. UPDATES (100) sets the updates per iteration. DATA_DIR (data-bin/multi30k.en-de)
# is where prepare.sh writes the binarized data: another one for other text (MULTI30K_DIR) or
# another VOCAB_SIZE, which prepare.sh refuses to mix with the data prepared before. It takes no
# arguments but --help.
set -euo pipefail

USAGE="usage: [MULTI30K_DIR=DIR] [RUN_DIR=RUN] [UPDATES=N] [DATA_DIR=DATA] examples/demo.sh"
case ${1:-} in -h | --help) echo "$USAGE"; exit 0 ;; esac
[ $# -eq 0 ] || {  # ignored: --help (or --dry-run) ran the whole demo
  echo "demo.sh: $1: it takes no arguments (set its variables instead); $USAGE" >&2
  exit 2; }
source "$(dirname "$0")/commands.sh"
need_commands demo.sh fairseq-san-loop fairseq-san-bench
# A relative MULTI30K_DIR or RUN_DIR names a folder of the caller's directory, not the repository.
[ -z "${MULTI30K_DIR:-}" ] || MULTI30K_DIR=$(realpath -m -- "$MULTI30K_DIR")
RUN=$(realpath -m -- "${RUN_DIR:-$(dirname "$0")/../runs/demo}")
[ -z "${DATA_DIR:-}" ] || DATA_DIR=$(realpath -m -- "$DATA_DIR")
cd "$(dirname "$0")/.."

DATA=${DATA_DIR:-data-bin/multi30k.en-de}  # as runs/demo/run.json recorded it before DATA_DIR

UPDATES=${UPDATES:-100}
LOOP=(--data "$DATA" --run-dir "$RUN" --updates "$UPDATES" --max-iterations 2
  -- --warmup-updates 50 --save-interval-updates 50 --num-workers 0)

# The loop's values (UPDATES=abc) and RUN's record, checked by a dry run before prepare.sh's
# minutes (they were checked after): its commands dropped, its one-line error said.
CHECKED=$(examples/learn_to_share.sh --dry-run "${LOOP[@]}" 2>&1 > /dev/null) || {
  STATUS=$?; tail -n 1 <<< "$CHECKED" >&2; exit "$STATUS"; }
examples/multi30k/prepare.sh en de "$DATA"
examples/learn_to_share.sh "${LOOP[@]}"
BASELINE=$RUN/iter0/checkpoints/checkpoint_best.pt SAN=$RUN/last/checkpoints/checkpoint_best.pt
STATIC='{"san_decoding": "static"}'
STATIC_INT8='{"san_decoding": "static", "san_decoder_precision": "int8"}'
[ -f "$RUN/bench/results.md" ] || fairseq-san-bench --data "$DATA" --subset test \
  --system "baseline=$BASELINE" --system "san=$SAN" \
  --system "baseline-static=$BASELINE:$STATIC" --system "san-static=$SAN:$STATIC" \
  --system "baseline-static-int8=$BASELINE:$STATIC_INT8" \
  --system "san-static-int8=$SAN:$STATIC_INT8" --baseline baseline \
  --beams 4 --repeats 3 --max-sentences 128 --max-len-a 1.2 --max-len-b 10 \
  --out-dir "$RUN/bench"

echo
cat "$RUN/loop.md"
echo
cat "$RUN/bench/results.md"
echo
echo "Heatmaps of the attention analysis: $RUN/iter*/analysis/js-*.png"
