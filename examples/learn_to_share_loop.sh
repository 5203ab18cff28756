# The iterations of learn to share (paper Figure 3), sourced by learn_to_share.sh (translation) and
# learn_to_share_lm.sh (language model); not run on its own. Each recipe defines what a step is:
#
#   train ITER_DIR K            fairseq-train under ITER_DIR/policy.json (P_k)
#   analyze ITER_DIR CHECKPOINT the layers' attention on valid: ITER_DIR/analysis/js.json
#   score ITER_DIR CHECKPOINT   the validation score: ITER_DIR/valid.json
#   learn JS_JSON POLICY        P_{k+1} from the JS matrices (Eq. 6)
#
# and sets RUN_DIR, MAX_ITERATIONS and, for a dry run that prints iteration 0's commands, DRY_RUN=1.
# A step whose output exists is skipped, so running the recipe again resumes; the loop stops when
# the learned policy is not new (fairseq-san-loop settled says why) and writes RUN_DIR/loop.md.

learn_to_share_loop() {
  local k dir next checkpoint status dry_run=${DRY_RUN:-0}
  for ((k = 0; k < MAX_ITERATIONS; k++)); do
    dir=$RUN_DIR/iter$k next=$RUN_DIR/iter$((k + 1))
    checkpoint=$dir/checkpoints/checkpoint_best.pt
    if [ "$dry_run" = 1 ]; then  # writes nothing: not even P_0, the train log or RUN/last
      echo "== iteration $k (dry run)"
      [ -f "$dir/trained" ] || train "$dir" "$k"
    else
      echo "== iteration $k: policy $(fairseq-san-loop show "$dir/policy.json")"
      # This iteration (trained below): the loop's result at its end.
      ln -sfn "iter$k" "$RUN_DIR/last"
      if [ ! -f "$dir/trained" ]; then
        train "$dir" "$k" 2>&1 | tee -a "$dir/train.log"
        touch "$dir/trained"
      fi
    fi
    [ -f "$dir/analysis/js.json" ] || analyze "$dir" "$checkpoint"
    [ -f "$dir/valid.json" ] || score "$dir" "$checkpoint"
    [ "$dry_run" = 1 ] || mkdir -p "$next"
    # Learned once: the policy that iteration k+1 is (or will be) trained with is never rewritten.
    [ -f "$next/policy.json" ] || learn "$dir/analysis/js.json" "$next/policy.json"
    if [ "$dry_run" = 1 ]; then
      echo "(dry run: iteration $((k + 1)) repeats these commands with $next/policy.json, until it equals $dir/policy.json)"
      exit 0
    fi
    status=0
    fairseq-san-loop settled "$RUN_DIR" "$k" || status=$?  # exit 0: it says why the loop stops
    [ "$status" -le 1 ] || exit "$status"
    [ "$status" = 1 ] || break
  done
  fairseq-san-loop summary "$RUN_DIR"
}
