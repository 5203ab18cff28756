#!/usr/bin/env bash
# The static decoder's GPU checks, from the repository root on the GPU machine, after
# `source build/offline-bundle/activate.sh` with a bundle built with --tests. PARTS (default: all,
# in this order) chooses among:
#   tests    the static decoder's CUDA tests (captured positions against the eager fixed step:
#            fp32, fp16, bf16; baseline, SAN, AAN+SAN; language models) and the capture logic's
#            CPU tests;
#   e2e      end to end (fairseq-san-bench --gpu, each engine in a process of its own, fp32): the
#            converged campaign's en-de models on this machine (BASE and SAN, checkpoints: stage
#            1's baseline loop/iter0 and uniform-6-6 under CHECKPOINTS by default; after stage 2,
#            baseline-s4/iter0 and loop/iter1; skipped when absent; AAN_SAN, where set, an AAN+SAN
#            checkpoint decoded beside them), each decoded by fairseq and by the static decoder as
#            CUDA graphs; natural lengths (BLEU, and "= fairseq": translations identical to
#            fairseq's) and fixed; beam 4, batch 128 on every test sentence, then batch 16 on the
#            first 128;
#   steps    ms per decoder step (fairseq-san-bench steps: random weights, fixed lengths, all
#            decoders in one process, so a profile): fairseq, static eager (fixed layout), static
#            as CUDA graphs; baseline and SAN {6}/{6}; beam 4 at batch 16 and 128, fp32 and fp16
#            models; beam 20 at batch 16;
#   profile  torch.profiler's view of one batch of captured positions (fp32, beam 4, batch 16),
#            and each configuration's bound per position (measured matmul peak and bandwidth);
#            then beam 20 at batch 128 (2,560 hypotheses a step), fairseq, static eager and
#            graph, where the graphs gained least end to end;
#   compile  the inductor-compiled step captured (static-fp32-compile-graph) against the graph of
#            the uncompiled one: ms per step and the profile (fp32, beam 4, batch 16; inductor
#            compiles each policy's step first, about a minute);
#   e2e-more the e2e models again at beams 4 and 20: fp16 at batch 128, and fp32 at batch 16 with
#            static eager and --san-decoding fast rows beside them (not for the baseline);
#   e2e-compile  end to end, compile-graph against graph (and fairseq): SAN, and BASE where it
#            exists (name the models a slice left on the machine, and their language pair as
#            PAIR, en-de by default); fp32, beam 4, batch 16, the first 128 test sentences,
#            natural lengths; all the call has left, as its compilations (20-30 s a shape, four
#            shapes a model for En->De's first 128 sentences) are the warm-up.
# The log goes to LOG ($OUT/gpu-steps.txt) line by line, so that a call cut short still returns
# what ran; the benchmarks' results are written outside $OUT (at most 8 files come back) and
# packed into $OUT/gpu-steps.tar.gz after each part, so that a call cut short loses only the part
# it was in. LEFT_S (580): the seconds the call has; a part that would not fit in what is left is
# skipped, and says so. The exit status is 1 where a part failed (the log says which).
#
#   export FAIRSEQ_SAN_PREFIX=/tmp/fairseq-san; source build/offline-bundle/activate.sh &&
#     LEFT_S=$((590 - SECONDS)) docs/results/gpu-steps/run.sh
# (results.md: how a GPU session runs it beside and after the en-de slice.)
set -uo pipefail

# This checkout's plugin runs, not the bundle's wheel of it: activate.sh installs one that may be
# older than the tree the device tool sent, and fairseq-san-* would import it.
# (CDPATH unset: with it, cd prints the folder it found, and PYTHONPATH would hold that line too)
CHECKOUT=$(CDPATH= cd -- "$(dirname "${BASH_SOURCE[0]}")/../../.." > /dev/null && pwd)
export PYTHONPATH="$CHECKOUT${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-runs/gpu-steps}
LEFT_S=${LEFT_S:-580}
PARTS=${PARTS:-tests e2e steps profile compile e2e-more}  # e2e-compile: a call of its own
LOG=${LOG:-$OUT/gpu-steps.txt}
TESTS_S=${TESTS_S:-420}  # the CUDA tests' limit: 45 tests, 113 s alone on an H100 for 32 of them
KNOWN_PARTS="tests e2e steps profile compile e2e-more e2e-compile"
for name in $PARTS; do  # before anything runs: a misspelt part ran nothing, and exited 0
  case " $KNOWN_PARTS " in
    *" $name "*) ;;
    *) echo "run.sh: unknown part $name (PARTS takes: $KNOWN_PARTS)" >&2; exit 2 ;;
  esac
done
[ -n "${PARTS// /}" ] || { echo "run.sh: PARTS is empty: name the parts to run ($KNOWN_PARTS)" >&2; exit 2; }
for limit in LEFT_S TESTS_S; do
  case ${!limit} in
    '' | *[!0-9]* | ?????????????*) echo "run.sh: $limit=${!limit}: a whole number of seconds (at most 12 digits)" >&2; exit 2 ;;
  esac
  # decimal, as written: bash read LEFT_S=010 as octal 8, and 09 failed ("value too great")
  printf -v "$limit" '%d' "$((10#${!limit}))"
done
[ "$TESTS_S" -gt 0 ] || { echo "run.sh: TESTS_S=0: at least 1 (timeout 0 sets no limit)" >&2; exit 2; }
CHECKPOINTS=${CHECKPOINTS:-runs/converged/en-de/en-de}
PAIR=${PAIR:-en-de}  # the language pair of BASE and SAN
DATA=data-bin/multi30k.$PAIR
[ -d "$DATA" ] || DATA=build/offline-bundle/data-bin/multi30k.$PAIR
BENCH=$(mktemp -d)/gpu-steps  # packed at the end: its files are too many to come back one by one
TIMER=(fairseq-san-bench steps --device cuda --threads 4 --length 40 --policies baseline san-6-6)
STEPS=("${TIMER[@]}" --rounds 3 --decoders fairseq static-fp32-fixed static-fp32-graph)
mkdir -p "$OUT" "$BENCH" "$(dirname -- "$LOG")"
if ! : 2> /dev/null >> "$LOG"; then  # else no part ran, and the exit status was 0
  echo "run.sh: LOG=$LOG: cannot write it" >&2
  exit 2
fi

FAILED=$BENCH/failed-parts  # a line per part that failed: the exit status

part() {  # part SECONDS TITLE COMMAND...: run COMMAND under a SECONDS timeout if they are left
  local seconds=$1 title=$2 status=0
  shift 2
  if [ $((LEFT_S - SECONDS)) -lt "$seconds" ]; then
    echo "== skipped (under $seconds s left): $title"
    return
  fi
  echo "== $title (at ${SECONDS} s, up to $seconds s)"
  timeout "$seconds" "$@" || status=$?
  [ "$status" = 0 ] || echo "== failed (exit $status): $title" | tee -a "$FAILED"
  pack
}

pack() {  # the benchmarks' results so far into $OUT/gpu-steps.tar.gz, replaced whole
  tar czf "$OUT/gpu-steps.tar.gz.tmp" --exclude failed-parts -C "$(dirname "$BENCH")" gpu-steps &&
    mv "$OUT/gpu-steps.tar.gz.tmp" "$OUT/gpu-steps.tar.gz"
}

rest_or() {  # rest_or SECONDS: what is left of the call but 10 s for the archive, at least SECONDS
  local rest=$((LEFT_S - SECONDS - 10))
  echo $((rest > $1 ? rest : $1))
}

static() {  # static EXECUTION: the overrides of a static decoder system
  echo "{\"san_decoding\": \"static\", \"san_decoder_execution\": \"$1\"}"
}

# add_systems NAME CHECKPOINT EXECUTION...: one model's systems, appended to SYSTEMS: NAME with
# fairseq's decoder, and NAME-EXECUTION with the static decoder run that way
add_systems() {
  local name=$1 checkpoint=$2 execution
  shift 2
  SYSTEMS+=(--system "$name=$checkpoint")
  for execution in "$@"; do
    SYSTEMS+=(--system "$name-$execution=$checkpoint:$(static "$execution")")
  done
}

# e2e SECONDS TITLE NAME BATCH SENTENCES BEAMS [fairseq-san-bench args]: a part that decodes the
# slice's models end to end into $BENCH/NAME
e2e() {
  local seconds=$1 title=$2 name=$3 batch=$4 sentences=$5 beams=$6
  shift 6
  SYSTEMS=()
  add_systems baseline "$BASE" graph
  add_systems san "$SAN" graph
  [ -z "$AAN_SAN" ] || add_systems aan-san "$AAN_SAN" graph
  part "$seconds" "e2e: $title" fairseq-san-bench --gpu --data "$DATA" --subset test \
    --batch-size "$batch" --max-sentences "$sentences" --beams $beams --modes natural fixed \
    --repeats 3 --max-len-a 1.2 --max-len-b 10 --no-profile --cache-beams --no-ctranslate2 \
    "${SYSTEMS[@]}" "$@" --out-dir "$BENCH/$name"
}

# e2e_compile: the e2e-compile part (see the top), on SAN and, where it exists, BASE
e2e_compile() {
  SYSTEMS=()
  add_systems san "$SAN" graph compile-graph
  [ ! -f "$BASE" ] || add_systems baseline "$BASE" graph compile-graph
  # dynamo logs each compilation after the first, with the guard that failed: the shapes
  # compiled, in the log
  TORCH_LOGS=recompiles part "$(rest_or 200)" "e2e: fp32, beam 4, batch 16, 128 sentences, compile-graph" \
    fairseq-san-bench --gpu --data "$DATA" --subset test --batch-size 16 --max-sentences 128 \
    --beams 4 --modes natural --repeats 3 --max-len-a 1.2 --max-len-b 10 --no-profile \
    --cache-beams --no-ctranslate2 "${SYSTEMS[@]}" --out-dir "$BENCH/fp32-batch16-compile"
}

BASE=${BASE:-$CHECKPOINTS/loop/iter0/checkpoints/checkpoint_best.pt}
SAN=${SAN:-$CHECKPOINTS/uniform-6-6/iter0/checkpoints/checkpoint_best.pt}
AAN_SAN=${AAN_SAN:-}  # optional: an AAN+SAN checkpoint, decoded beside BASE and SAN end to end
FAST='{"san_decoding": "fast"}'
MORE=(--system "baseline-eager=$BASE:$(static eager)" --system "san-fast=$SAN:$FAST")
MODELS=2  # the models decoded end to end: each part's time limit grows with them
if [ -n "$AAN_SAN" ]; then
  if [ -f "$AAN_SAN" ]; then
    MODELS=3
    MORE+=(--system "aan-san-eager=$AAN_SAN:$(static eager)" --system "aan-san-fast=$AAN_SAN:$FAST")
  else
    echo "run.sh: AAN_SAN=$AAN_SAN: no such checkpoint; the end-to-end parts decode BASE and" \
      "SAN alone" >&2
    AAN_SAN=
  fi
fi
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  git log -1 --format="commit %H" 2>/dev/null || true
  for name in $PARTS; do
    case $name in
      tests)  # beside a slice's trainings: low priority, few threads; -v names a test cut short
        part "$TESTS_S" "CUDA tests" nice -n 19 env OMP_NUM_THREADS=2 \
          TORCHINDUCTOR_COMPILE_THREADS=2 python -m pytest -p no:cacheprovider -v -rfEs \
          tests/test_static_decoder.py tests/test_static_lm_decoder.py \
          -k "cuda or graph or whole_position or host_sync or captured" ;;
      e2e | e2e-more)
        if [ ! -f "$BASE" ] || [ ! -f "$SAN" ]; then
          echo "== skipped: $name (no $BASE or $SAN: the en-de slice did not train them here)"
          continue
        fi
        if [ ! -d "$DATA" ]; then
          echo "== skipped: $name (no data-bin/multi30k.$PAIR, here or in the bundle: build" \
            "it with --data data-bin/multi30k.$PAIR)"
          continue
        fi
        if [ "$name" = e2e ]; then
          e2e $((60 * MODELS)) "fp32, beam 4, batch 128, every test sentence" fp32-batch128 \
            128 1000 4
          e2e $((55 * MODELS)) "fp32, beam 4, batch 16, 128 sentences" fp32-batch16 16 128 4
        else
          e2e $((75 * MODELS)) "fp16, beams 4 and 20, batch 128, every test sentence" \
            fp16-batch128 128 1000 "4 20" --fp16
          title="fp32 with static eager and fast decoding, beams 4 and 20, batch 16"
          e2e $((75 * MODELS)) "$title" fp32-batch16-more 16 128 "4 20" "${MORE[@]}"
        fi ;;
      steps)
        for dtype in fp32 fp16; do
          for batch in 16 128; do
            part 90 "steps: $dtype model, beam 4, batch $batch" \
              "${STEPS[@]}" --dtype "$dtype" --beam 4 --batch "$batch"
          done
        done
        part 90 "steps: fp32 model, beam 20, batch 16" "${STEPS[@]}" --beam 20 --batch 16 ;;
      profile)
        part 60 "profile: fp32, beam 4, batch 16, captured positions" \
          "${TIMER[@]}" --rounds 1 --decoders static-fp32-graph --beam 4 --batch 16 --profile
        part 90 "profile: fp32, beam 20, batch 128, fairseq, static eager and graph" \
          "${TIMER[@]}" --rounds 1 --decoders fairseq static-fp32-fixed static-fp32-graph \
          --beam 20 --batch 128 --profile ;;
      e2e-compile)
        if [ ! -f "$SAN" ] || [ ! -d "$DATA" ]; then
          echo "== skipped: e2e-compile (no $SAN, or no data-bin/multi30k.$PAIR)"
        else
          e2e_compile
        fi ;;
      compile)  # a second call's only part: it takes what the call has left (150 s at least)
        part "$(rest_or 150)" "compile: fp32, beam 4, batch 16, the compiled step captured" \
          "${TIMER[@]}" --rounds 3 --decoders static-fp32-graph static-fp32-compile-graph \
          --beam 4 --batch 16 --profile ;;
    esac
  done
} 2>&1 | grep --line-buffered -v "^INFO" > "$LOG"
pack
tail -n 60 "$LOG"
[ ! -s "$FAILED" ]
