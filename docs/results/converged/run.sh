#!/usr/bin/env bash
# Converged models (issue 11), trained on a lent GPU in phases; each phase fits one 10-minute
# device call, trains its systems side by side (background jobs, each capped in wall time by the
# preset's rule), tests them, and packs everything worth keeping (logs, policies, js.json,
# heatmaps, scores, benchmark; never checkpoints) into ONE archive: $OUT/converged-PHASE.tar.gz.
#
#   docs/results/converged/run.sh PHASE [--dry-run]     # on the GPU machine, from the repo root
#   docs/results/converged/run.sh collect ARCHIVE...    # back here: unpack, build summary.json
#
# On the GPU machine first `source build/offline-bundle/activate.sh`
# (scripts/build_offline_bundle.py; README, "Air-gapped GPU machines"). Phases, in order
# (results.md here: how to call each):
#   sweep  three batch sizes side by side, 90 s each (updates/s, tokens/s, valid loss: the preset's
#          choice), then three 2-rank multi-GPU smoke runs on the one GPU (issue 11 item 8)
#   A      baselines, the loop's iteration 0: 4 pairs (seed 1) + En->De seeds 2 and 3; JS analysis,
#          policy at the paper's thresholds (0.4 / 0.5), test BLEU; En->De policies at the Table 3
#          and Table 5 thresholds; Figure 5 (JS against training steps) from the En->De baseline
#   B      the loop's iteration 1 from scratch for the 4 pairs (SAN, learned policy); En->De SAN
#          seeds 2 and 3; the warm-start row (baseline then SAN, each half the cap)
#   C      En->De sensitivity, Tables 3-6, with its own baseline and SAN trained in the same call
#   D      the loop's next iteration where iteration 1 learned a new policy; GPU benchmark
#          (baseline, SAN, AAN+SAN trained in the call, then fairseq-san-bench)
# A phase needs only the small files of earlier ones: run dirs found in docs/results/converged
# (committed after `collect`) and not in $RUNS are copied there first. Re-running a phase skips
# finished work (done.PHASE markers; learn_to_share.sh and test_bleu.sh skip finished steps).
# A pair's loop run dir is made in A and extended in B and D: its run.json (learn_to_share.sh)
# refuses any other option, so every phase gives it the same fairseq-train args and cap.
# Environment: OUT (archive folder; runs), RUNS (runs/converged), RESULTS (docs/results/converged),
# DATA_ROOT (data-bin, else build/offline-bundle/data-bin), PRESET
# (examples/presets/gpu-converge.args), CAP_MIN (training cap of each system in A, B, C and of the
# loops in D: 5 minutes), CAP_MIN_D (D's benchmark systems: 3), CAP_MIN_SWEEP (1.5), SWEEP
# ("TOKENS:LR:WARMUP ..."), PHASE_S (seconds the phase may take, 540; every job is stopped at that
# deadline, then the archive is packed),
# JOB_S (seconds one job may take), ONLY ("en-de/loop en-de/warm": only these run dirs), SEEDS
# ("2 3": more En->De seeds), TRAIN_EXTRA (fairseq-train args put last: the tests' --cpu and
# tiny sizes).
set -euo pipefail

PHASE=${1:?usage: run.sh sweep|A|B|C|D [--dry-run] | run.sh collect ARCHIVE...}
shift
DRY_RUN=0
[ "${1:-}" = --dry-run ] && { DRY_RUN=1; shift; }
RESULTS=${RESULTS:-docs/results/converged}
RUNS=${RUNS:-runs/converged} OUT=${OUT:-runs} PHASE_S=${PHASE_S:-540}
PRESET=${PRESET:-examples/presets/gpu-converge.args}
PAIRS="en-de de-en en-fr en-cs" SEEDS=${SEEDS:-2 3} ONLY=${ONLY:-} TRAIN_EXTRA=${TRAIN_EXTRA:-}
SMALL=transformer_san_small AAN=transformer_aan_small
if [ -z "${DATA_ROOT:-}" ]; then
  DATA_ROOT=data-bin
  [ -d "$DATA_ROOT/multi30k.en-de" ] || DATA_ROOT=build/offline-bundle/data-bin
fi
DEADLINE=$((SECONDS + PHASE_S))
mapfile -t PRESET_ARGS < <(sed 's/#.*//' "$PRESET" | xargs -n 1)
read -r -a EXTRA <<< "$TRAIN_EXTRA"
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1

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
left() {  # seconds this job may take: to the phase's deadline, at most JOB_S
  local t=$((DEADLINE - SECONDS))
  [ -n "${JOB_S:-}" ] && [ "$JOB_S" -lt "$t" ] && t=$JOB_S
  echo $((t > 1 ? t : 1))
}
hours() { awk -v m="$1" 'BEGIN { printf "%.4f", m / 60 }'; }
selected() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

# system DIR PAIR ARCH POLICY CAP_MIN [learn_to_share.sh options] [-- fairseq-train args]
# Trains run dir $RUNS/DIR with learn_to_share.sh (one iteration unless --max-iterations says
# more) under the preset, capped at CAP_MIN minutes, then test BLEU of its newest iteration.
# POLICY: "none" (no sharing) or a policy file for iteration 0. A background job (with
# --dry-run: its commands, printed in order); its output goes to $RUNS/DIR/run.log.
system() {
  local name=$1 pair=$2 arch=$3 policy=$4 cap=$5 options=()
  shift 5
  while [ $# -gt 0 ] && [ "$1" != -- ]; do options+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  selected "$name" || return 0
  local dir=$RUNS/$name
  if [ "$DRY_RUN" = 1 ]; then
    job "$name" "$pair" "$arch" "$cap" "${options[@]}" -- "$@"
    return 0
  fi
  [ -f "$dir/done.$PHASE" ] && { echo "== $name: done in an earlier run"; return 0; }
  [ "$policy" = none ] || [ -f "$policy" ] ||
    { echo "== $name: skipped, no policy $policy (run the earlier phase first)"; return 0; }
  mkdir -p "$dir/iter0"
  [ "$policy" = none ] || [ -f "$dir/iter0/policy.json" ] || cp "$policy" "$dir/iter0/policy.json"
  echo "== $name: started at $(date -u +%T)"
  job "$name" "$pair" "$arch" "$cap" "${options[@]}" -- "$@" > "$dir/run.log" 2>&1 &
}

job() {  # job DIR PAIR ARCH CAP_MIN [options] -- [fairseq-train args]: the commands of system
  local name=$1 pair=$2 arch=$3 cap=$4 options=()
  shift 4
  while [ "$1" != -- ]; do options+=("$1"); shift; done
  shift
  local dir=$RUNS/$name data=$DATA_ROOT/multi30k.$pair status=0
  run timeout -k 10 "$(left)" examples/learn_to_share.sh --data "$data" --run-dir "$dir" \
    --arch "$arch" --updates 1000000 --max-iterations 1 "${options[@]}" -- "${PRESET_ARGS[@]}" \
    --stop-time-hours "$(hours "$cap")" "${EXTRA[@]}" "$@" || status=$?
  local last=$dir/$(readlink "$dir/last" 2>/dev/null || echo iter0)
  local best=$last/checkpoints/checkpoint_best.pt
  if [ "${TEST_BLEU:-1}" = 1 ] && { [ "$DRY_RUN" = 1 ] || [ -f "$best" ]; }; then
    run timeout -k 10 "$(left)" examples/multi30k/test_bleu.sh "$data" "${pair#*-}" \
      "$dir/test-bleu" "$(basename "$last")=$best" || status=$?
  fi
  [ "$DRY_RUN" = 1 ] && return 0
  echo "== $name: exit $status at $(date -u +%T)"  # 124: stopped at the phase's deadline
  [ "$status" != 0 ] || touch "$dir/done.$PHASE"
}

restore() {  # copy run dirs of earlier phases (committed artefacts) into $RUNS where missing
  local found
  for found in "$RESULTS"/*-*/*/; do
    [ -d "$found" ] || continue
    found=${found%/}
    local pair_name=${found#"$RESULTS"/}
    [ -e "$RUNS/$pair_name" ] || run mkdir -p "$(dirname "$RUNS/$pair_name")"
    [ -e "$RUNS/$pair_name" ] || run cp -r "$found" "$RUNS/$pair_name"
  done
}

# loop PAIR [learn_to_share.sh options]: the pair's loop run dir, capped at CAP_MIN minutes,
# with the same fairseq-train args in every phase; En->De keeps its checkpoints (every 100
# updates) for Figure 5.
loop() {
  local pair=$1 keep=()
  shift
  [ "$pair" != en-de ] || keep=(--keep-interval-updates 1000)
  system "$pair/loop" "$pair" $SMALL none "$CAP_MIN" "$@" -- "${keep[@]}"
}

pack() {  # one archive of $RUNS without checkpoints, for the device tool's $OUT
  wait
  run tar czf "$OUT/converged-$PHASE.tar.gz" --exclude='*.pt' --exclude=checkpoints \
    --exclude=generate-valid.txt --exclude=generate.log --exclude=last -C "$RUNS" .
}

CAP_MIN=${CAP_MIN:-5}
L=$RUNS/en-de/loop/iter1/policy.json  # En->De policy learned from the baseline at 0.4 / 0.5
P=$RUNS/en-de/policies                # En->De policies at other thresholds (phase A)
[ "$DRY_RUN" = 1 ] || [ "$PHASE" = collect ] || mkdir -p "$RUNS" "$OUT"
case $PHASE in
  sweep)
    for config in ${SWEEP:-8192:0.001:500 16384:0.0014:400 32768:0.002:300}; do
      IFS=: read -r tokens lr warmup <<< "$config"
      TEST_BLEU=0 system "sweep/tokens-$tokens" en-de $SMALL none "${CAP_MIN_SWEEP:-1.5}" -- \
        --max-tokens "$tokens" --lr "$lr" --warmup-updates "$warmup"
    done
    wait
    run fairseq-san-loop train-log "$RUNS"/sweep/*/iter0/train.log -o "$RUNS/sweep/report.md" ||
      true
    # Multi-GPU, 2 ranks on one GPU, one loop iteration each (issue 11 item 8), one at a time:
    # fairseq's own spawning (it asserts world size <= GPUs), then torchrun, which fairseq maps
    # to device rank % GPUs = 0 for both ranks, with gloo and with NCCL (which refuses that).
    export JOB_S=${JOB_S:-120} TEST_BLEU=0
    system smoke/spawn-gloo en-de $SMALL none 1 -- --distributed-world-size 2 \
      --ddp-backend pytorch_ddp --distributed-backend gloo --max-update 100
    wait
    for backend in gloo nccl; do
      system "smoke/torchrun-$backend" en-de $SMALL none 1 \
        --launcher "torchrun --nproc_per_node 2" -- --ddp-backend pytorch_ddp \
        --distributed-backend "$backend" --max-update 100
      wait
    done
    ;;
  A)
    restore  # a phase A cut short in an earlier session: its finished systems are skipped
    for pair in $PAIRS; do
      loop "$pair"
    done
    for seed in $SEEDS; do
      system "en-de/baseline-s$seed" en-de $SMALL none "$CAP_MIN" -- --seed "$seed"
    done
    wait
    js=$RUNS/en-de/loop/iter0/analysis/js.json
    [ "$DRY_RUN" = 1 ] || mkdir -p "$P"
    for thetas in 0.3:0.4 0.3:0.5 0.4:0.4; do  # Table 3 (0.4:0.5 is the loop's own)
      run fairseq-san-policy "$js" --theta-decoder-self "${thetas%:*}" \
        --theta-decoder-encdec "${thetas#*:}" -o "$P/theta-${thetas/:/-}.json" || true
    done
    run fairseq-san-policy "$js" --theta-decoder-self 0.4 --theta-decoder-encdec 0.5 \
      --theta-encoder-self 0.4 -o "$P/enc-0.4.json" || true  # Table 5
    # Figure 5: JS between layers against training steps, each kept checkpoint of the En->De
    # baseline analysed on 500 validation sentences, 6 at a time, until the deadline.
    F=$RUNS/en-de/figure5 n=0
    [ "$DRY_RUN" = 1 ] || mkdir -p "$F"
    for ckpt in "$RUNS"/en-de/loop/iter0/checkpoints/checkpoint_*_*.pt; do
      [ -f "$ckpt" ] || [ "$DRY_RUN" = 1 ] || continue
      step=$(basename "$ckpt" .pt)
      logged "$F/$step.log" timeout -k 10 "$(left)" fairseq-validate "$DATA_ROOT/multi30k.en-de" \
        --task translation_san --user-dir fairseq_san --path "$ckpt" --valid-subset valid \
        --max-tokens 4096 --san-analysis-dir "$F/$step" --san-analysis-max-sentences 500 &
      n=$((n + 1)) && [ $((n % 6)) != 0 ] || wait
    done
    wait
    run fairseq-san-plot-js "$F"/*/ --reference-layer 4 --layers 5 6 -o "$F/js_vs_steps.png" ||
      true
    ;;
  B)
    restore
    for pair in $PAIRS; do  # iteration 1 (iteration 0's artefacts restored: not retrained)
      [ "$DRY_RUN" = 1 ] || [ -f "$RUNS/$pair/loop/iter0/trained" ] ||
        { echo "== $pair/loop: no iteration 0 (run phase A first)"; continue; }
      loop "$pair" --max-iterations 2 --extend
    done
    for seed in $SEEDS; do
      system "en-de/san-s$seed" en-de $SMALL "$L" "$CAP_MIN" -- --seed "$seed"
    done
    # Warm start: a baseline for half the cap, then SAN from it for the other half (equal wall time
    # in all to SAN from scratch); its row reports the updates of both iterations.
    half=$(awk -v m="$CAP_MIN" 'BEGIN { print m / 2 }')
    system en-de/warm en-de $SMALL none "$half" --warm-start --max-iterations 2
    ;;
  C)
    restore
    system en-de/baseline-sens en-de $SMALL none "$CAP_MIN"           # this call's references
    system en-de/san-sens en-de $SMALL "$L" "$CAP_MIN"
    system en-de/uniform en-de $SMALL docs/results/converged/uniform-policy.json "$CAP_MIN"
    for theta in 0.3-0.4 0.3-0.5 0.4-0.4; do  # Table 3, the thetas whose policy is not san's
      [ "$DRY_RUN" = 0 ] && [ -f "$L" ] &&
        fairseq-san-loop same-policy "$L" "$P/theta-$theta.json" &&
        { echo "== en-de/theta-$theta: same policy as san"; continue; }
      system "en-de/theta-$theta" en-de $SMALL "$P/theta-$theta.json" "$CAP_MIN"
    done
    system en-de/own-v en-de $SMALL "$L" "$CAP_MIN" -- --san-encdec-share weights  # Table 4
    system en-de/enc-0.4 en-de $SMALL "$P/enc-0.4.json" "$CAP_MIN"                 # Table 5
    system en-de/aan en-de $AAN none "$CAP_MIN"                                    # Table 6
    if [ "$DRY_RUN" = 0 ] && [ -f "$L" ] && [ ! -f "$P/aan-san.json" ]; then  # AAN: no self policy
      python -c 'import json, sys; p = json.load(open(sys.argv[1])); p["decoder_self"] = None
print(json.dumps(p))' "$L" > "$P/aan-san.json"
    fi
    system en-de/aan-san en-de $AAN "$P/aan-san.json" "$CAP_MIN"
    ;;
  D)
    restore
    for pair in $PAIRS; do  # learn_to_share.sh trains iteration 2 only if the policy changed
      loop "$pair" --max-iterations 3 --extend
    done
    CAP_MIN=${CAP_MIN_D:-3}
    system en-de/baseline-bench en-de $SMALL none "$CAP_MIN"
    system en-de/san-bench en-de $SMALL "$L" "$CAP_MIN"
    system en-de/aan-san-bench en-de $AAN "$P/aan-san.json" "$CAP_MIN"
    wait
    ckpt() { echo "$RUNS/en-de/$1/iter0/checkpoints/checkpoint_best.pt"; }
    FAST='{"san_fast_decoding": true}'
    B=$RUNS/en-de/bench
    [ "$DRY_RUN" = 1 ] || mkdir -p "$B"
    run timeout -k 10 "$(left)" fairseq-san-bench --gpu --data "$DATA_ROOT/multi30k.en-de" \
      --subset test --max-sentences 256 --beams 4 --cache-beams 4 20 --repeats 3 \
      --max-len-a 1.2 --max-len-b 10 --system "baseline=$(ckpt baseline-bench)" \
      --system "baseline+fast=$(ckpt baseline-bench):$FAST" --system "san=$(ckpt san-bench)" \
      --system "san+fast=$(ckpt san-bench):$FAST" \
      --system "aan-san+fast=$(ckpt aan-san-bench):$FAST" \
      --system "baseline-nocache=$(ckpt baseline-bench):{\"san_no_cache\": true}" \
      --out-dir "$B/beam4" || true
    run timeout -k 10 "$(left)" fairseq-san-bench --gpu --data "$DATA_ROOT/multi30k.en-de" \
      --subset test --max-sentences 64 --beams 1 4 8 12 16 20 --modes natural fixed \
      --cache-beams --no-profile --repeats 3 --system "baseline=$(ckpt baseline-bench)" \
      --system "san+fast=$(ckpt san-bench):$FAST" --out-dir "$B/beams" || true
    ;;
  collect)
    [ $# -gt 0 ] || { echo "usage: run.sh collect ARCHIVE..." >&2; exit 2; }
    for archive in "$@"; do run tar xzf "$archive" -C "$RESULTS"; done
    run fairseq-san-loop converged "$RESULTS" --data-root "$DATA_ROOT" -o "$RESULTS/summary.json"
    exit 0
    ;;
  *) echo "run.sh: unknown phase $PHASE (sweep, A, B, C, D or collect)" >&2; exit 2 ;;
esac
pack
