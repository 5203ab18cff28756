#!/usr/bin/env bash
# Issue 19's GPU checks in one device call (about 3 minutes), from the repository root on the GPU
# machine, after `source build/offline-bundle/activate.sh` with a bundle built with --tests:
#   1. the static decoder's CUDA tests (captured positions against the eager fixed step: fp32,
#      fp16, bf16; baseline, SAN, AAN+SAN) and the capture logic's CPU tests;
#   2. ms per decoder step (fairseq-san-bench steps: random weights, fixed lengths, all decoders
#      in one process, so a profile, not the end-to-end targets): fairseq, the static
#      decoder eager in the fixed layout, and captured as CUDA graphs; baseline and SAN {6}/{6};
#      beam 4 at batch 16 and 128, fp32 and fp16 models; beam 20 at batch 16;
#   3. torch.profiler's view of one batch of captured positions (fp32, beam 4, batch 16).
# Everything goes to $OUT/gpu-steps.txt (OUT: runs/gpu-steps when unset), line by line, so that a
# call cut short still returns what ran. LEFT_S (default 600): the seconds the call has; a part
# that would not fit in what is left is skipped and says so.
#
#   export FAIRSEQ_SAN_PREFIX=/tmp/fairseq-san; source build/offline-bundle/activate.sh &&
#     LEFT_S=$((590 - SECONDS)) docs/results/gpu-steps/run.sh
set -uo pipefail

OUT=${OUT:-runs/gpu-steps}
LEFT_S=${LEFT_S:-600}
mkdir -p "$OUT"
LOG=$OUT/gpu-steps.txt
STEPS=(fairseq-san-bench steps --device cuda --threads 4 --length 40 --rounds 3
  --policies baseline san-6-6 --decoders fairseq static-fp32-fixed static-fp32-graph)

part() {  # part SECONDS TITLE COMMAND...: run COMMAND under a SECONDS timeout if they are left
  local seconds=$1 title=$2; shift 2
  if [ $((LEFT_S - SECONDS)) -lt "$seconds" ]; then
    echo "== skipped (under $seconds s left): $title"
    return
  fi
  echo "== $title"
  timeout "$seconds" "$@"
}

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  git log -1 --format="commit %H" 2>/dev/null || true
  part 150 "CUDA tests" python -m pytest -p no:cacheprovider -q -rs tests/test_static_decoder.py \
    -k "cuda or graph or whole_position or host_sync"
  for dtype in fp32 fp16; do
    for batch in 16 128; do
      part 90 "steps: $dtype model, beam 4, batch $batch" \
        "${STEPS[@]}" --dtype "$dtype" --beam 4 --batch "$batch"
    done
  done
  part 90 "steps: fp32 model, beam 20, batch 16" "${STEPS[@]}" --beam 20 --batch 16
  part 60 "profile: fp32, beam 4, batch 16, captured positions" \
    fairseq-san-bench steps --device cuda --threads 4 --length 40 --rounds 1 \
    --policies baseline san-6-6 --decoders static-fp32-graph --beam 4 --batch 16 --profile
} 2>&1 | grep --line-buffered -v "^INFO" > "$LOG"
tail -n 60 "$LOG"
