#!/usr/bin/env bash
# Learn to share for a decoder-only language model (transformer_lm_san): train under policy P_k
# (P_0 = no sharing), measure how similar the layers' decoder self-attention is on the validation
# set, learn P_{k+1} at theta (Eq. 6), and repeat until the learned policy is not new (P_k's or an
# earlier iteration's: fairseq-san-loop settled). Each iteration is scored by its validation
# perplexity (fairseq-eval-lm) instead of BLEU. Running the same command again resumes: finished
# steps are skipped, fairseq continues from checkpoint_last.pt. RUN/run.json records the options
# the run was made with: a re-run with other options stops before anything runs
# (fairseq-san-loop start --lm), and one loop runs in RUN at a time.
#
#   examples/learn_to_share_lm.sh --data DATA --run-dir RUN [options] [-- fairseq-train args]
#
# The options, with their defaults: examples/learn_to_share_lm.sh --help (one list, in
# fairseq_san/loop/recipe_options.py). Everything after -- goes to fairseq-train (and wins over the
# defaults below).
set -euo pipefail

# ARCH, THETA_SELF, SELF_SHARE, ... (one per option), START_OPTIONS (what RUN_DIR/run.json
# records); "$@" becomes the fairseq-train arguments. A bad option stops here, in one line.
OPTIONS=$(fairseq-san-loop options learn_to_share_lm.sh "$@")
eval "$OPTIONS"

# One loop per run dir: RUN/.lock stays locked on fd 9, which every command below inherits, until
# this script and the last of them (fairseq-train too) end. Missing data stops before RUN exists.
fairseq-san-loop start "$RUN_DIR" --lm --data="$DATA" --check-inputs
mkdir -p "$RUN_DIR" && exec 9>>"$RUN_DIR/.lock"
# Locks RUN_DIR; checks RUN_DIR/run.json; records the options, creates RUN_DIR/iter0 with P_0.
fairseq-san-loop start "$RUN_DIR" "${START_OPTIONS[@]}" --lock-fd 9 -- "$@"

USER_DIR=$(python -c 'import fairseq_san, os; print(os.path.dirname(fairseq_san.__file__))')
LM=(--task language_modeling_san --sample-break-mode eos)

for ((k = 0; k < MAX_ITERATIONS; k++)); do
  dir=$RUN_DIR/iter$k next=$RUN_DIR/iter$((k + 1))
  ckpt=$dir/checkpoints/checkpoint_best.pt
  echo "== iteration $k: policy $(fairseq-san-loop show "$dir/policy.json")"
  ln -sfn "iter$k" "$RUN_DIR/last"
  if [ ! -f "$dir/trained" ]; then
    fairseq-train "$DATA" --user-dir "$USER_DIR" "${LM[@]}" --arch "$ARCH" \
      --san-policy "$dir/policy.json" --san-self-share "$SELF_SHARE" \
      --save-dir "$dir/checkpoints" "$@" 2>&1 | tee -a "$dir/train.log"
    touch "$dir/trained"
  fi
  [ -f "$dir/analysis/js.json" ] || fairseq-validate "$DATA" --user-dir "$USER_DIR" "${LM[@]}" \
    --path "$ckpt" --valid-subset valid --max-tokens 4096 --num-workers 0 \
    --san-analysis-dir "$dir/analysis"
  if [ ! -f "$dir/valid.json" ]; then
    fairseq-eval-lm "$DATA" --user-dir "$USER_DIR" "${LM[@]}" --path "$ckpt" \
      --gen-subset valid --max-tokens 4096 --num-workers 0 > "$dir/eval-lm-valid.log" 2>&1 \
      || { tail -5 "$dir/eval-lm-valid.log" >&2; exit 1; }
    fairseq-san-loop perplexity "$dir/eval-lm-valid.log" -o "$dir/valid.json"
  fi
  mkdir -p "$next"
  [ -f "$next/policy.json" ] || fairseq-san-policy "$dir/analysis/js.json" \
    --theta-decoder-self "$THETA_SELF" -o "$next/policy.json"
  status=0
  fairseq-san-loop settled "$RUN_DIR" "$k" || status=$?  # exit 0: it says why the loop stops
  [ "$status" -le 1 ] || exit "$status"
  [ "$status" = 1 ] || break
done
fairseq-san-loop summary "$RUN_DIR"
