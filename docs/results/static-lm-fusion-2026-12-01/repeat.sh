#!/usr/bin/env bash
# The decoding time of fused fairseq-generate runs, fairseq's decoder and the static one
# interleaved, REPEATS times each (default 3), each in a process of its own: fairseq-generate's
# own "Translated ... in Xs" (the decoding, without loading), then the medians and their ratio.
# Run after run.sh, whose OUT (the language model, the data with dict.txt) it reuses.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source docs/results/cpu-yardstick/weak-en-de.sh  # DATA, CHECKPOINT
OUT=${OUT:-runs/static-lm-fusion}
WEIGHT=${WEIGHT:-0.2}
REPEATS=${REPEATS:-3}
[ -f "$OUT/lm/checkpoint_last.pt" ] && [ -e "$OUT/data/dict.txt" ] || {
  echo "repeat.sh: run run.sh with OUT=$OUT first" >&2
  exit 1
}
seconds() {  # DECODING: fairseq-generate's decoding time, in seconds
  fairseq-generate "$OUT/data" --user-dir fairseq_san --task translation_san -s en -t de \
    --path "$CHECKPOINT" --gen-subset test --beam 5 --max-len-b 60 --batch-size 64 \
    --post-process sentencepiece --san-decoding "$1" --lm-path "$OUT/lm/checkpoint_last.pt" \
    --lm-weight "$WEIGHT" 2>&1 >/dev/null | sed -n 's/.*Translated .* in \([0-9.]*\)s .*/\1/p'
}
fairseq_times=() static_times=()
for repeat in $(seq "$REPEATS"); do
  fairseq_times+=("$(seconds fairseq)")
  static_times+=("$(seconds static)")
  echo "repeat $repeat: fairseq ${fairseq_times[-1]} s, static ${static_times[-1]} s"
done
python -c '
import statistics, sys
weight, repeats = sys.argv[1:3]
fairseq, static = sys.argv[3].split(), sys.argv[4].split()
f, s = (statistics.median(map(float, times)) for times in (fairseq, static))
print(f"--lm-weight {weight}, medians of {repeats}: fairseq {f} s, static {s} s, ratio {f / s:.2f}")
' "$WEIGHT" "$REPEATS" "${fairseq_times[*]}" "${static_times[*]}"
