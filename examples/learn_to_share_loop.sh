# The iterations of learn to share (paper Figure 3), sourced by learn_to_share.sh (translation) and
# learn_to_share_lm.sh (language model); not run on its own. Each recipe defines what a step is:
#
#   train ITER_DIR K            fairseq-train under ITER_DIR/policy.json (P_k), through train_with
#   analyze ITER_DIR CHECKPOINT the layers' attention on valid: ITER_DIR/analysis/js.json
#   score ITER_DIR CHECKPOINT   the validation score: ITER_DIR/valid.json
#   learn JS_JSON POLICY        P_{k+1} from the JS matrices (Eq. 6)
#
# and has set, from fairseq-san-loop options, RUN_DIR, START_OPTIONS, MAX_ITERATIONS, UPDATES, the
# start options (WARM_START, WARM_UPDATES, CPU_RANKS, LAUNCHER and its LAUNCHER_WORDS) and DRY_RUN
# (1: print the first unfinished iteration's commands, write nothing); start_loop keeps the
# fairseq-train arguments (EXTRA_ARGS). A step whose output exists is skipped (said in a line), so
# running the recipe again resumes; the loop stops when the learned policy is not new
# (fairseq-san-loop settled says why) and writes RUN_DIR/loop.md.

start_loop() {  # start_loop FAIRSEQ_TRAIN_ARGS...: check the inputs, lock RUN_DIR, record the run
  # One loop per run dir: RUN/.lock stays locked on fd 9, which every command after this inherits,
  # until the recipe and the last of them (fairseq-train too) end. A bad value (--updates -5) or
  # a missing input stops before RUN exists. A dry run checks and writes nothing.
  if [ "$DRY_RUN" = 0 ]; then
    fairseq-san-loop start "$RUN_DIR" "${START_OPTIONS[@]}" --check-inputs -- "$@"
    mkdir -p "$RUN_DIR"  # alone: set -e stops nothing whose failure an && follows
    exec 9>>"$RUN_DIR/.lock"
    START_OPTIONS+=(--lock-fd 9)
  fi
  # Checks RUN_DIR/run.json; records the options, creates RUN_DIR/iter0 with P_0.
  fairseq-san-loop start "$RUN_DIR" "${START_OPTIONS[@]}" -- "$@"
  EXTRA_ARGS=("$@")
}

run() {  # run COMMAND...: print it; execute it unless --dry-run
  { printf '+'; printf ' %q' "$@"; printf '\n'; } >&2
  [ "$DRY_RUN" = 1 ] || "$@"
}

train_with() {  # train_with ITER_DIR K ARGS...: fairseq-train ARGS for iteration K
  # In one process, --cpu-ranks N CPU processes or under --launcher; with --warm-start, iteration
  # K > 0 fine-tunes K-1's best model for --warm-updates. The recipe's arguments after -- come
  # last: fairseq takes an option's last value.
  local dir=$1 k=$2 updates=$UPDATES start=() launch=(fairseq-train)
  shift 2
  if [ "$WARM_START" = 1 ] && [ "$k" -gt 0 ]; then
    updates=$WARM_UPDATES
    start=(--finetune-from-model "$RUN_DIR/iter$((k - 1))/checkpoints/checkpoint_best.pt")
  fi
  if [ "$CPU_RANKS" -gt 0 ]; then
    launch=(fairseq-san-cpu-ranks "$CPU_RANKS" --log-dir "$dir" -- fairseq-train)
  elif [ -n "$LAUNCHER" ]; then
    launch=("${LAUNCHER_WORDS[@]}" "$(command -v fairseq-train)")
  fi
  run "${launch[@]}" "$@" --max-update "$updates" "${start[@]}" "${EXTRA_ARGS[@]}"
}

iteration_done() {  # iteration_done ITER_DIR NEXT_DIR: every step of the iteration has its output
  [ -f "$1/trained" ] && [ -f "$1/analysis/js.json" ] && [ -f "$1/valid.json" ] \
    && [ -f "$2/policy.json" ]
}

done_already() {  # done_already K STEP FILE: whether FILE, STEP's output, exists; if so, says so
  [ -f "$3" ] || return 1
  echo "== iteration $1: $2 already ($3)"
}

run_iteration() {  # run_iteration ITER_DIR NEXT_DIR K: the steps of iteration K not yet done
  local dir=$1 next=$2 k=$3 checkpoint=$1/checkpoints/checkpoint_best.pt
  if [ "$DRY_RUN" = 1 ]; then  # writes nothing: not even P_0, the train log or RUN/last
    echo "== iteration $k (dry run)"
    [ -f "$dir/trained" ] || train "$dir" "$k"
  else
    local policy  # assigned apart: set -e stops on a policy file that cannot be read
    policy=$(fairseq-san-loop show "$dir/policy.json" --run-dir "$RUN_DIR")
    echo "== iteration $k: policy $policy"
    if [ ! -f "$dir/trained" ]; then
      echo "== iteration $k: training (its output also goes to $dir/train.log)"
      train "$dir" "$k" 2>&1 | tee -a "$dir/train.log"
      if [ ! -f "$checkpoint" ]; then  # else marked trained, and every re-run skipped training
        echo "learn_to_share: iteration $k: fairseq-train ended without $checkpoint (its output: $dir/train.log)" >&2
        exit 1
      fi
      touch "$dir/trained"
    elif [ ! -f "$checkpoint" ] && ! [[ -f $dir/analysis/js.json && -f $dir/valid.json ]]; then
      # its steps after training need the checkpoint: fairseq-generate printed its whole
      # configuration and stopped on it, at every rerun
      echo "learn_to_share: iteration $k: $dir/trained says it trained, and $checkpoint is gone:" \
        "delete $dir/trained to train it again" >&2
      exit 1
    else
      done_already "$k" trained "$dir/trained"
    fi
    # The last trained iteration: the loop's result at its end.
    ln -sfn "iter$k" "$RUN_DIR/last"
  fi
  done_already "$k" analysed "$dir/analysis/js.json" || analyze "$dir" "$checkpoint"
  done_already "$k" scored "$dir/valid.json" || score "$dir" "$checkpoint"
  [ "$DRY_RUN" = 1 ] || mkdir -p "$next"
  # Learned once: the policy that iteration k+1 is (or will be) trained with is never rewritten.
  done_already "$k" "learned P_$((k + 1))" "$next/policy.json" \
    || learn "$dir/analysis/js.json" "$next/policy.json"
  if [ "$DRY_RUN" = 1 ]; then
    echo "(dry run: iteration $((k + 1)) repeats these commands with $next/policy.json, until" \
      "it equals $dir/policy.json)"
    exit 0
  fi
}

learn_to_share_loop() {
  local k dir next status
  for ((k = 0; k < MAX_ITERATIONS; k++)); do
    dir=$RUN_DIR/iter$k next=$RUN_DIR/iter$((k + 1))
    # A dry run of a resumed run prints the first iteration that has steps left.
    if [ "$DRY_RUN" = 0 ] || ! iteration_done "$dir" "$next"; then
      run_iteration "$dir" "$next" "$k"
    fi
    status=0
    fairseq-san-loop settled "$RUN_DIR" "$k" || status=$?  # exit 0: it says why the loop stops
    [ "$status" -le 1 ] || exit "$status"
    [ "$status" = 1 ] || break
  done
  if [ "$DRY_RUN" = 1 ]; then
    echo "(dry run: the iterations of $RUN_DIR are done; a real run writes its summary)"
  else
    fairseq-san-loop summary "$RUN_DIR"
  fi
}
