#!/usr/bin/env bash
# Converged models, trained on a lent GPU in SLICES. A slice runs the whole learn-to-share loop
# for its systems in one or two calls of the device tool (about 9 minutes each); each call packs
# everything worth keeping (logs, policies, js.json, heatmaps, scores, hypotheses, benchmark,
# provenance; never checkpoints) into ONE archive, $OUT/converged-SLICE.tar.gz:
#   stage 1  baselines (the loop's iteration 0) side by side, each trained for UPDATES updates
#            (or to its validation plateau, or to the wall cap CAP_MIN); JS analysis; the policy
#            at the paper's thresholds (0.4 / 0.5)
#   stage 2  SAN from scratch with the learned policy (iteration 1), side by side, the same budget
# (tables and bench learn no policy of their own: theirs come from the en-de slice's loop).
# A system starts only when the call has time left for its cap and its evaluation (CAP_MIN and
# EVAL_S); what does not start runs in the slice's next call, which skips what finished.
# Every system, as soon as it is trained: test BLEU and chrF on test (test_2016_flickr) and test1
# (test_2017_flickr), every sentence, hypotheses kept (sacreBLEU's --paired-bs); En->X systems
# also translate each HELDOUT/*.en into PAIR/SYSTEM/heldout/NAME.hyp (no score), beside the tests.
#
#   docs/results/converged/run.sh SLICE [--dry-run]       # on the GPU machine, from the repo root
#   docs/results/converged/run.sh collect [ARCHIVE...]    # back here: check, unpack, summary, figures
#
# On the GPU machine first `source build/offline-bundle/activate.sh` (results.md: how to call
# each slice, and how its time is budgeted). Slices, in order:
#   en-de   En->De: stage 1 baseline seeds 1-3 and uniform SAN {6}/{6}; stage 2 learned-policy
#           SAN seeds 1-3, all with the policy that seed 1's baseline learns, and baseline seed
#           STAGE2_SEED (4) beside them
#   pairs   De->En, En->Fr, En->Cs: baseline, then SAN, one seed each; beside the three trainings
#           of a stage, the en-de loop's next iteration while its policy still changes, else (stage
#           2) En->De SAN seed 2 with the policy of the mean of the En->De baselines' analyses
#   tables  En->De Tables 3-6 against the en-de slice's baselines and SAN, each policy from the
#           en-de loop's collected analysis (so that every row trains as they did, to the same
#           update budget, four at a time): stage 1 baseline seed 5 (every checkpoint kept, for
#           Figure 5), the headline's SAN seed 4, AAN+SAN (Table 6), own V (Table 4); stage 2 the
#           policies at other thresholds that no system trained yet (Table 3), uniform {6}/{3,3},
#           AAN, the encoder side at 0.4 (Table 5), and in free places the mean policy's SAN
#           seeds 3, 4; beside baseline seed 5's training, Figure 5 from its checkpoints as they
#           are written, then its policy learned from the test sentences
#   bench   fairseq-san-bench --gpu at batch 16 and 128 of an En->De baseline, SAN and AAN+SAN:
#           right after tables' first call, on the same warm machine, its stage 1's converged
#           baseline seed 5, SAN seed 4 and AAN+SAN (nothing trained), then the 2-rank
#           multi-GPU smoke runs where time is left; on another machine, its own three trained
#           side by side for a 2.5-minute cap (the policies from the en-de loop's: the headline
#           SAN's), the smoke runs beside them, then the benchmark (what the call's time does
#           not hold: in a second call on the same warm machine)
# A slice cut short runs again and skips what finished (RUN/done.iter<k>: trained and tested; a
# held-out translation stopped at the deadline leaves what it wrote and is not redone): on the
# same machine from $RUNS, on a fresh one from the run dirs collected here (RESULTS), restored
# without what did not finish (checkpoints never travel).
# `collect` unpacks the archives given and $SHARED/converged/converged-SLICE*.tar.gz, each only
# after checking that it records this run.sh (sha256) running its slice, then writes summary.json,
# summary.md, headline.md and the Figure 2 heatmaps (campaign_figures.py).
# Environment: OUT (archive folder; runs), RUNS (runs/converged/SLICE), RESULTS
# (docs/results/converged), DATA_ROOT (data-bin, else build/offline-bundle/data-bin), SHARED
# (../shared), HELDOUT ($SHARED/heldout, else build/offline-bundle/heldout; none: no held-out
# translation), PRESET (examples/presets/gpu-converge.args), UPDATES (training updates of every
# system: 3000; bench: the cap alone), CAP_MIN (wall-time cap of every system's training, minutes:
# 6.5, bench 2.5), EVAL_S (seconds a system needs besides its training: fairseq's start, the
# analysis, validation BLEU, the test sets with the held-out sources beside them; 130, measured:
# 127 with four systems ending together on an H100), DECODE_BATCH_SIZE
# (sentences per batch of every decoding: 128; fairseq's beam search costs about the same per
# step on a GPU at 16 and 128), SLICE_S (seconds the slice may take, 540: every job is stopped
# at that deadline, then the archive is packed), JOB_S (seconds one job may take), SEEDS ("2 3": the
# en-de slice's other seeds), STAGE2_SEED (4: the baseline seed of en-de's stage 2), BENCH_S
# (100: the seconds below which a batch size of the bench slice's benchmark does not start; each
# takes about 85-115 s on an H100, scaled from gpu-steps' end-to-end runs), TABLES_RUNS
# (runs/converged/tables: where bench looks for the tables slice's models), ONLY
# ("en-de/loop en-de/baseline-s2": only these run dirs),
# TRAIN_EXTRA (fairseq-train args put last: the tests' --cpu and tiny sizes).
set -euo pipefail

USAGE="usage: run.sh en-de|pairs|tables|bench [--dry-run] | run.sh collect [ARCHIVE...]"
SLICE=${1:?$USAGE}
shift
case $SLICE in
  en-de | pairs | tables | bench | collect) ;;
  *) echo "run.sh: unknown slice $SLICE ($USAGE)" >&2; exit 2 ;;
esac
DRY_RUN=0
[ "${1:-}" = --dry-run ] && { DRY_RUN=1; shift; }
RUN_SH=${BASH_SOURCE[0]} HERE=$(dirname "${BASH_SOURCE[0]}")
RESULTS=${RESULTS:-docs/results/converged} SHARED=${SHARED:-../shared}
RUNS=${RUNS:-runs/converged/$SLICE} OUT=${OUT:-runs} SLICE_S=${SLICE_S:-540}
PRESET=${PRESET:-examples/presets/gpu-converge.args}
SEEDS=${SEEDS:-2 3} STAGE2_SEED=${STAGE2_SEED:-4} ONLY=${ONLY:-} TRAIN_EXTRA=${TRAIN_EXTRA:-}
CAP_MIN=${CAP_MIN:-$([ "$SLICE" = bench ] && echo 2.5 || echo 6.5)}
UPDATES=${UPDATES:-$([ "$SLICE" = bench ] && echo 1000000 || echo 3000)}
EVAL_S=${EVAL_S:-130} BENCH_S=${BENCH_S:-100} TABLES_RUNS=${TABLES_RUNS:-runs/converged/tables}
export DECODE_BATCH_SIZE=${DECODE_BATCH_SIZE:-128}  # examples/multi30k/test_bleu.sh reads it
SMALL=transformer_san_small AAN=transformer_aan_small
CHECKPOINT=iter0/checkpoints/checkpoint_best.pt  # a run dir's trained model
SLICES=(python "$HERE/campaign_slices.py")
if [ -z "${DATA_ROOT:-}" ]; then
  DATA_ROOT=data-bin
  [ -d "$DATA_ROOT/multi30k.en-de" ] || DATA_ROOT=build/offline-bundle/data-bin
fi
HELDOUT=${HELDOUT:-$SHARED/heldout}
[ -d "$HELDOUT" ] || HELDOUT=build/offline-bundle/heldout
STARTED=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)
DEADLINE=$((SECONDS + SLICE_S))
STAGE_JOBS=0  # systems the current stage started (system)
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
# This checkout's plugin runs, not the bundle's wheel of it: activate.sh installs one that may be
# older than the tree the device tool sent, and fairseq-san-* would import it.
export PYTHONPATH="$(cd "$HERE/../../.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"

run() {  # run COMMAND...: print it; execute it unless --dry-run
  { printf '+'; printf ' %q' "$@"; printf '\n'; }
  [ "$DRY_RUN" = 1 ] || "$@"
}
logged() {  # logged LOG COMMAND...: like run, with the command's output into LOG
  local log=$1
  shift
  { printf '+'; printf ' %q' "$@"; printf ' > %q\n' "$log"; }
  [ "$DRY_RUN" = 1 ] || "$@" > "$log" 2>&1
}

figure5_plot() {  # figure5_plot FOLDER: Figure 5 from the analyses of FOLDER/checkpoint_*/
  run fairseq-san-plot-js "$1"/*/ --reference-layer 4 --layers 5 6 -o "$1/js_vs_steps.png"
}

if [ "$SLICE" = collect ]; then
  archives=("$@")
  for found in "$SHARED"/converged/converged-*.tar.gz; do
    [ -f "$found" ] && archives+=("$found")
  done
  [ ${#archives[@]} -gt 0 ] ||
    { echo "run.sh collect: no archive given and none in $SHARED/converged" >&2; exit 2; }
  run "${SLICES[@]}" collect "$RESULTS" --run-sh "$RUN_SH" "${archives[@]}"
  run python "$HERE/campaign_summary.py" "$RESULTS" --data-root "$DATA_ROOT" -o "$RESULTS/summary.json"
  run python "$HERE/campaign_figures.py" "$RESULTS"
  for folder in "$RESULTS"/*/*/figure5; do
    if [ -d "$folder" ]; then figure5_plot "$folder"; fi
  done
  exit 0
fi

mapfile -t PRESET_ARGS < <(sed 's/#.*//' "$PRESET" | xargs -n 1)
read -r -a EXTRA <<< "$TRAIN_EXTRA"
left() {  # seconds this job may take: to the slice's deadline, at most JOB_S
  local t=$((DEADLINE - SECONDS))
  [ -n "${JOB_S:-}" ] && [ "$JOB_S" -lt "$t" ] && t=$JOB_S
  echo $((t > 1 ? t : 1))
}
hours() { awk -v m="$1" 'BEGIN { printf "%.4f", m / 60 }'; }
needs() { awk -v m="$CAP_MIN" -v e="$EVAL_S" 'BEGIN { printf "%d", m * 60 + e }'; }
selected() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

# system NAME PAIR ARCH POLICY ITER [learn_to_share.sh options] [-- fairseq-train args]
# Brings run dir $RUNS/NAME up to iteration ITER (0: the baseline, or a system trained with
# POLICY; 1: the loop's SAN, from the policy its iteration 0 learned) with learn_to_share.sh under
# the preset, capped at CAP_MIN minutes, then tests and translates that iteration. POLICY: "none"
# (no sharing) or a policy file for iteration 0. A background job (with --dry-run: its commands,
# printed in order); its output goes to $RUNS/NAME/run.log.
system() {
  local name=$1 pair=$2 arch=$3 policy=$4 iter=$5 options=()
  shift 5
  while [ $# -gt 0 ] && [ "$1" != -- ]; do options+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  selected "$name" || return 0
  [ "$iter" = 0 ] || options+=(--extend)
  local dir=$RUNS/$name
  if [ "$DRY_RUN" = 1 ]; then
    job "$name" "$pair" "$arch" "$iter" "${options[@]}" -- "$@"
    STAGE_JOBS=$((STAGE_JOBS + 1))
    return 0
  fi
  [ -e "$dir" ] || [ ! -d "$RESULTS/$name" ] || [ "$SLICE" = bench ] ||
    "${SLICES[@]}" restore "$RESULTS/$name" "$dir"  # bench: its benchmark needs the checkpoints
  [ -f "$dir/done.iter$iter" ] && { echo "== $name: iteration $iter done in an earlier run"; return 0; }
  [ "$iter" = 0 ] || [ -f "$dir/done.iter$((iter - 1))" ] ||
    { echo "== $name: skipped, iteration $((iter - 1)) did not finish"; return 0; }
  [ "$policy" = none ] || [ -f "$policy" ] || { echo "== $name: skipped, no policy $policy"; return 0; }
  [ $((DEADLINE - SECONDS)) -ge "$(needs)" ] || {
    echo "== $name: not started: $((DEADLINE - SECONDS)) s left, it needs $(needs)" \
      "(CAP_MIN, EVAL_S); the slice's next call runs it"
    return 0
  }
  mkdir -p "$dir/iter0"
  [ "$policy" = none ] || [ -f "$dir/iter0/policy.json" ] || cp "$policy" "$dir/iter0/policy.json"
  echo "== $name: iteration $iter started at $(date -u +%T)"
  job "$name" "$pair" "$arch" "$iter" "${options[@]}" -- "$@" >> "$dir/run.log" 2>&1 &
  STAGE_JOBS=$((STAGE_JOBS + 1))
}

job() {  # job NAME PAIR ARCH ITER [options] -- [fairseq-train args]: the commands of system
  local name=$1 pair=$2 arch=$3 iter=$4 options=()
  shift 4
  while [ "$1" != -- ]; do options+=("$1"); shift; done
  shift
  local dir=$RUNS/$name data=$DATA_ROOT/multi30k.$pair status=0
  run timeout -k 10 "$(left)" examples/learn_to_share.sh --data "$data" --run-dir "$dir" \
    --arch "$arch" --updates "$UPDATES" --max-iterations $((iter + 1)) \
    --decode-batch-size "$DECODE_BATCH_SIZE" "${options[@]}" -- \
    "${PRESET_ARGS[@]}" --stop-time-hours "$(hours "$CAP_MIN")" "${EXTRA[@]}" "$@" || status=$?
  if [ "${EVALUATE:-1}" = 1 ] && [ "$status" = 0 ]; then
    local translating=
    if [ -d "$HELDOUT" ] && [[ $pair == en-* ]]; then  # beside the test sets: no score waits
      beside run timeout -k 10 "$(left)" "${SLICES[@]}" heldout "$dir" "$iter" --data "$data" \
        --sources "$HELDOUT" --batch-size "$DECODE_BATCH_SIZE"
      [ "$DRY_RUN" = 1 ] || translating=$!
    fi
    run timeout -k 10 "$(left)" examples/multi30k/test_bleu.sh "$data" "${pair#*-}" \
      "$dir/test-bleu" "iter$iter=$dir/iter$iter/checkpoints/checkpoint_best.pt" || status=$?
    if [ -n "$translating" ]; then
      local heldout_status=0
      wait "$translating" || heldout_status=$?
      [ "$heldout_status" = 0 ] || echo "== $name: held-out translation stopped (exit" \
        "$heldout_status): what it wrote is kept; not redone elsewhere (checkpoints never travel)"
    fi
  fi
  [ "$DRY_RUN" = 1 ] && return 0
  echo "== $name: exit $status at $(date -u +%T)"  # 124: stopped at the slice's deadline
  [ "$status" != 0 ] || touch "$dir/done.iter$iter"
}

# loop PAIR ITER [NAME [fairseq-train args]]: the pair's learn-to-share run dir (PAIR/NAME, loop),
# iteration ITER, with the same fairseq-train args in both stages (run.json refuses others).
loop() {
  local pair=$1 iter=$2 name=${3:-loop}
  shift $(($# < 3 ? $# : 3))
  system "$pair/$name" "$pair" $SMALL none "$iter" -- "$@"
}

# again PAIR: beside the trainings this stage started (none: nothing), the next iteration of the
# pair's loop while its policy still changes (campaign_slices.py unsettled: not once another run
# dir of the pair trained that policy with the loop's recipe and learned it back): the paper's
# loop runs until the learned policy is not new, and a stage of three trainings has a fourth
# place on the GPU. Fails when it starts nothing, so that the place goes to another system.
again() {
  [ "$STAGE_JOBS" -gt 0 ] || return 1
  local dir=$RUNS/$1/loop iter
  [ -d "$dir" ] || dir=$RESULTS/$1/loop
  iter=$("${SLICES[@]}" unsettled "$dir" --others "$RUNS/$1" "$RESULTS/$1")
  [ -n "$iter" ] && loop "$1" "$iter"
}

# mean_san SEED: En->De SAN trained with the policy that the mean of the en-de slice's baseline
# seeds' analyses (1, SEEDS, STAGE2_SEED: the same four for every SEED) learns at the loop's
# thresholds (fairseq-san-policy averages the JS matrices), seed SEED (run dir
# en-de/san-mean-sSEED). The en-de slice's SAN seeds all trained with seed 1's policy; the seeds'
# analyses and their mean learn another (results.md, "Figure 2 at convergence").
mean_san() {
  local policy=$RUNS/en-de/policies/mean.json analyses=() run seed js
  for run in loop $(for seed in $SEEDS $STAGE2_SEED; do echo "baseline-s$seed"; done); do
    js=$RESULTS/en-de/$run/iter0/analysis/js.json
    if [ -f "$js" ] || [ "$DRY_RUN" = 1 ]; then analyses+=("$js"); fi
  done
  if [ ${#analyses[@]} -gt 0 ] && [ ! -f "$policy" ]; then  # once a call: the same analyses
    [ "$DRY_RUN" = 1 ] || mkdir -p "$(dirname "$policy")"
    run fairseq-san-policy "${analyses[@]}" --theta-decoder-self 0.4 --theta-decoder-encdec 0.5 \
      -o "$policy" || true
  fi
  system "en-de/san-mean-s$1" en-de $SMALL "$policy" 0 -- --seed "$1"
}

beside() {  # beside COMMAND...: in the background (with --dry-run: in order, printed)
  if [ "$DRY_RUN" = 1 ]; then "$@"; else "$@" & fi
}

aan_policy() {  # aan_policy LEARNED OUT: policy LEARNED less decoder self-attention (AAN has none)
  [ "$DRY_RUN" = 1 ] || [ -f "$1" ] || return 0
  [ "$DRY_RUN" = 1 ] || mkdir -p "$(dirname "$2")"
  run "${SLICES[@]}" aan-policy "$1" -o "$2"
}

policies() {  # policies LOOP_DIR OUT: Tables 3, 5 and 6's policies from LOOP_DIR's iteration 0
  local js=$1/iter0/analysis/js.json out=$2 thetas
  [ "$DRY_RUN" = 1 ] || [ -f "$js" ] || { echo "== $1: no JS analysis, no policies"; return 0; }
  [ "$DRY_RUN" = 1 ] || mkdir -p "$out"
  for thetas in 0.3:0.4 0.3:0.5 0.4:0.4; do  # Table 3 (0.4:0.5 is the loop's own)
    run fairseq-san-policy "$js" --theta-decoder-self "${thetas%:*}" \
      --theta-decoder-encdec "${thetas#*:}" -o "$out/theta-${thetas/:/-}.json" || true
  done
  run fairseq-san-policy "$js" --theta-decoder-self 0.4 --theta-decoder-encdec 0.5 \
    --theta-encoder-self 0.4 -o "$out/enc-0.4.json" || true  # Table 5
  aan_policy "$1/iter1/policy.json" "$out/aan-san.json"  # Table 6
}

# The analyses of a baseline's checkpoints run on the machine that trains it, beside its training
# (its checkpoints never travel, and the slice's next call runs on a fresh machine):
training_here() {  # training_here RUN_DIR: its iteration 0 started training in this call
  [ "$DRY_RUN" = 1 ] || { [ -d "$1/iter0" ] && [ ! -f "$1/done.iter0" ]; }
}
trained() {  # trained RUN_DIR: its iteration 0 has trained (iter0/trained), or the deadline passed
  [ "$DRY_RUN" = 1 ] || [ -f "$1/iter0/trained" ] || [ $((DEADLINE - SECONDS)) -le 0 ]
}

# The policy on other sentences: RUN_DIR's baseline (iteration 0), once trained, analysed on test
# (test_2016_flickr, 1,000 sentences) as well as valid, and the policy learned from that: does
# what the loop learns depend on the sentences analysed? (It learns from valid; nothing is tuned
# on test.)
other_sentences() {
  local A=$1/iter0/analysis-test
  until trained "$1"; do sleep 10; done
  [ "$DRY_RUN" = 1 ] || [ ! -f "$A/js.json" ] || return 0
  [ "$DRY_RUN" = 1 ] || mkdir -p "$1/policies"
  logged "$A.log" timeout -k 10 "$(left)" fairseq-validate "$DATA_ROOT/multi30k.en-de" \
    --task translation_san --user-dir fairseq_san --path "$1/$CHECKPOINT" \
    --valid-subset test --max-tokens 4096 --san-analysis-dir "$A" || return 0
  run fairseq-san-policy "$A/js.json" --theta-decoder-self 0.4 --theta-decoder-encdec 0.5 \
    --explain -o "$1/policies/test-sentences.json" || true
}

# Figure 5: JS between layers against training steps: each checkpoint of RUN_DIR's baseline
# (iteration 0) analysed on 500 validation sentences as soon as its training writes it, 2 at a
# time, until it has trained and every checkpoint is analysed (or the deadline).
figure5() {
  local F=$1/figure5 last=0
  [ "$DRY_RUN" = 1 ] || mkdir -p "$F"
  until [ "$last" = 1 ]; do
    if trained "$1"; then last=1; fi  # then one more pass: the checkpoints written last
    new_checkpoints "$1" "$F"
    [ "$last" = 1 ] || sleep 10
  done
  figure5_plot "$F" || true  # matplotlib is not in the offline bundle: collect draws it again
}

new_checkpoints() {  # new_checkpoints RUN_DIR FOLDER: analyse those not analysed yet, 2 at a time
  local n=0 ckpt step
  for ckpt in "$1"/iter0/checkpoints/checkpoint_*_*.pt; do
    [ -f "$ckpt" ] || [ "$DRY_RUN" = 1 ] || continue
    step=$(basename "$ckpt" .pt)
    [ -f "$2/$step/js.json" ] && continue
    logged "$2/$step.log" timeout -k 10 "$(left)" fairseq-validate "$DATA_ROOT/multi30k.en-de" \
      --task translation_san --user-dir fairseq_san --path "$ckpt" --valid-subset valid \
      --max-tokens 4096 --san-analysis-dir "$2/$step" --san-analysis-max-sentences 500 &
    n=$((n + 1)) && [ $((n % 2)) != 0 ] || wait
  done
  wait
}

# Multi-GPU, 2 ranks on one GPU, one loop iteration each, one at a time:
# fairseq's own spawning (it asserts world size <= GPUs), then torchrun, which fairseq maps to
# device rank % GPUs = 0 for both ranks, with gloo and with NCCL (which refuses that).
smoke() {
  local JOB_S=${JOB_S:-120} EVALUATE=0 EVAL_S=0 backend
  system smoke/spawn-gloo en-de $SMALL none 0 -- --distributed-world-size 2 \
    --ddp-backend pytorch_ddp --distributed-backend gloo --max-update 100
  wait
  for backend in gloo nccl; do
    system "smoke/torchrun-$backend" en-de $SMALL none 0 \
      --launcher "torchrun --nproc_per_node 2" -- --ddp-backend pytorch_ddp \
      --distributed-backend "$backend" --max-update 100
    wait
  done
}

# The models the bench slice benchmarks on a machine where the tables slice ran (the session's
# next call after tables' first, on the warm machine: a GPU is lent too rarely for a session of
# its own): baseline seed 5, the headline's SAN seed 4 and AAN+SAN, each trained to the update
# budget. Only on a machine where tables never ran does the bench slice train its own, for its
# shorter cap.
BENCH_MODELS=("$TABLES_RUNS"/en-de/{baseline-s5,san-s4,aan-san})
checkpoints_here() {  # checkpoints_here RUN_DIR...: each has trained, its best checkpoint here
  local dir
  for dir in "$@"; do [ -f "$dir/iter0/trained" ] && [ -f "$dir/$CHECKPOINT" ] || return 1; done
}

# The bench slice's decoding benchmark of BASELINE, SAN and AAN_SAN (run dirs): fairseq,
# --san-decoding fast and the static decoder as CUDA graphs; beams 4, 20; batch 16, 128. Each
# batch size starts only with BENCH_S seconds left; else the slice's next call on this machine
# (its checkpoints still there) runs it. Checkpoints never travel: without them, no benchmark.
benchmark() {  # benchmark BASELINE SAN AAN_SAN
  local B=$RUNS/en-de/bench batch
  local base=$1/$CHECKPOINT san=$2/$CHECKPOINT aan=$3/$CHECKPOINT
  [ "$DRY_RUN" = 1 ] || checkpoints_here "$@" ||
    { echo "== bench: not run: a model without its trained checkpoint here among $*"; return 0; }
  local fast='{"san_decoding": "fast"}'
  local graph='{"san_decoding": "static", "san_decoder_execution": "graph"}'
  local systems=(--system "baseline=$base" --system "baseline-graph=$base:$graph"
    --system "san=$san" --system "san-fast=$san:$fast" --system "san-graph=$san:$graph"
    --system "aan-san=$aan" --system "aan-san-fast=$aan:$fast" --system "aan-san-graph=$aan:$graph")
  for batch in 16:64 128:256; do  # batch size : sentences
    [ -f "$B/batch${batch%:*}/results.json" ] && continue
    if [ "$DRY_RUN" = 0 ] && [ $((DEADLINE - SECONDS)) -lt "$BENCH_S" ]; then
      echo "== bench batch ${batch%:*}: not started: $((DEADLINE - SECONDS)) s left, it needs" \
        "$BENCH_S (BENCH_S); the slice's next call on this machine runs it"
      continue
    fi
    run timeout -k 10 "$(left)" fairseq-san-bench --gpu --data "$DATA_ROOT/multi30k.en-de" \
      --subset test --batch-size "${batch%:*}" --max-sentences "${batch#*:}" --beams 4 20 \
      --modes natural fixed --cache-beams 4 20 --repeats 3 --max-len-a 1.2 --max-len-b 10 \
      --no-ctranslate2 "${systems[@]}" --out-dir "$B/batch${batch%:*}" || true
  done
}

pack() {  # the provenance, then one archive of $RUNS for $OUT: no checkpoints, nor the attention
  # that Figure 5's analyses dump (about 240 kB per checkpoint; their JS matrices, js.json, go)
  wait
  run "${SLICES[@]}" record "$RUNS" --slice "$SLICE" --run-sh "$RUN_SH" --started "$STARTED" \
    --setting "CAP_MIN=$CAP_MIN" --setting "UPDATES=$UPDATES" --setting "EVAL_S=$EVAL_S" \
    --setting "DECODE_BATCH_SIZE=$DECODE_BATCH_SIZE" --setting "SLICE_S=$SLICE_S" --setting "PRESET=$PRESET" \
    --setting "SEEDS=$SEEDS" --setting "STAGE2_SEED=$STAGE2_SEED" --setting "ONLY=$ONLY" \
    --setting "TRAIN_EXTRA=$TRAIN_EXTRA" \
    -- "$RUN_SH" "$SLICE"
  run tar czf "$OUT/converged-$SLICE.tar.gz" --exclude='*.pt' --exclude=checkpoints \
    --exclude=generate-valid.txt --exclude=generate.log --exclude=last --exclude='*.partial' \
    --exclude='figure5/*.npz' -C "$RUNS" .
}

[ "$DRY_RUN" = 1 ] || mkdir -p "$RUNS" "$OUT"
case $SLICE in
  en-de)
    loop en-de 0
    for seed in $SEEDS; do
      system "en-de/baseline-s$seed" en-de $SMALL none 0 -- --seed "$seed"
    done
    system en-de/uniform-6-6 en-de $SMALL "$HERE/policy-uniform-6-6.json" 0
    wait
    loop en-de 1
    for seed in $SEEDS; do
      system "en-de/san-s$seed" en-de $SMALL "$RUNS/en-de/loop/iter1/policy.json" 0 -- \
        --seed "$seed"
    done
    # Beside them, one more baseline seed: four trainings share the GPU as in stage 1 (the same
    # pace at the same wall cap), and the machine holds a baseline for gpu-steps' decoding.
    system "en-de/baseline-s$STAGE2_SEED" en-de $SMALL none 0 -- --seed "$STAGE2_SEED"
    ;;
  pairs)
    for pair in de-en en-fr en-cs; do loop "$pair" 0; done
    again en-de || true
    wait
    STAGE_JOBS=0
    for pair in de-en en-fr en-cs; do loop "$pair" 1; done
    again en-de || mean_san 2  # the fourth place: the loop while it runs, else the mean's SAN
    ;;
  tables)
    L=$RESULTS/en-de/loop P=$RUNS/en-de/policies F=$RUNS/en-de/baseline-s5
    policies "$L" "$P"
    KEEP=(--keep-interval-updates 1000)  # every checkpoint (each 100 updates), for Figure 5
    # Stage 1 holds what the bench slice benchmarks on this machine in the session's next call
    # (BENCH_MODELS): a baseline, the headline's SAN (seed 4: paired with the en-de slice's
    # baseline seed 4) and AAN+SAN, converged.
    system en-de/baseline-s5 en-de $SMALL none 0 -- --seed 5 "${KEEP[@]}"
    if training_here "$F"; then beside figure5 "$F"; beside other_sentences "$F"; fi
    system en-de/san-s4 en-de $SMALL "$L/iter1/policy.json" 0 -- --seed 4  # the headline's SAN
    system en-de/aan-san en-de $AAN "$P/aan-san.json" 0                                    # 6
    system en-de/own-v en-de $SMALL "$L/iter1/policy.json" 0 -- --san-encdec-share weights  # 4
    wait
    STAGE_JOBS=0
    thetas=("$P"/theta-{0.3-0.4,0.3-0.5,0.4-0.4}.json)  # Table 3: what no system trained yet
    [ "$DRY_RUN" = 1 ] || mapfile -t thetas < <("${SLICES[@]}" untrained "${thetas[@]}" \
      --like "$L" --others "$RESULTS/en-de" "$RUNS/en-de")
    for policy in "${thetas[@]}"; do
      system "en-de/$(basename "$policy" .json)" en-de $SMALL "$policy" 0
    done
    system en-de/uniform-6-3-3 en-de $SMALL "$HERE/policy-uniform-6-3-3.json" 0  # Table 3
    system en-de/aan en-de $AAN none 0                                           # 6
    system en-de/enc-0.4 en-de $SMALL "$P/enc-0.4.json" 0                        # 5
    for seed in 3 4; do  # free places: more seeds of the mean policy (2 trains in pairs)
      [ "$STAGE_JOBS" -ge 4 ] || mean_san "$seed"
    done
    ;;
  bench)
    if [ -d "$TABLES_RUNS/en-de" ]; then  # tables ran here: its stage 1's models, none trained
      echo "== bench: the tables slice's models on this machine: ${BENCH_MODELS[*]}"
      benchmark "${BENCH_MODELS[@]}"
      smoke  # after the benchmark, never beside it, where time is left
    else
      L=$RESULTS/en-de/loop P=$RUNS/en-de/policies
      aan_policy "$L/iter1/policy.json" "$P/aan-san.json"
      beside smoke
      system en-de/baseline-bench en-de $SMALL none 0
      system en-de/san-bench en-de $SMALL "$L/iter1/policy.json" 0  # the headline SAN's policy
      system en-de/aan-san-bench en-de $AAN "$P/aan-san.json" 0
      wait
      benchmark "$RUNS"/en-de/{baseline,san,aan-san}-bench
    fi
    ;;
esac
pack
