#!/usr/bin/env bash
# Learn to share for a decoder-only language model (transformer_lm_san): train under policy P_k
# (P_0 = no sharing), measure how similar the layers' decoder self-attention is on the validation
# set, learn P_{k+1} at theta (Eq. 6), and repeat until the learned policy is not new (P_k's or an
# earlier iteration's: fairseq-san-loop settled). Each iteration is scored by its validation
# perplexity (fairseq-eval-lm) instead of BLEU. Running the same command again resumes: finished
# steps are skipped, fairseq continues from checkpoint_last.pt. RUN/run.json records the options
# the run was made with: a re-run with other options stops before anything runs
# (fairseq-san-loop start --lm), and one loop runs in RUN at a time. --warm-start, --cpu-ranks,
# --launcher and --dry-run are the translation loop's (examples/learn_to_share_loop.sh).
#
#   examples/learn_to_share_lm.sh --data DATA --run-dir RUN [options] [-- fairseq-train args]
#
# The options, with their defaults: examples/learn_to_share_lm.sh --help (one list, in
# fairseq_san/loop/recipe_options.py). Everything after -- goes to fairseq-train (and wins over the
# training recipe below); its task options (--add-bos-token, ...) to fairseq-eval-lm too. What the
# recipe sets itself (the policy, --save-dir, --arch, --task, --user-dir, --san-self-share) is
# refused there.
set -euo pipefail
source "$(dirname "$0")/commands.sh"
need_commands "$0" fairseq-san-loop

# ARCH, THETA_SELF, SELF_SHARE, ... DRY_RUN (one per option), START_OPTIONS (what RUN_DIR/run.json
# records), ANALYSIS_ARGS (fairseq-validate's limit of --analysis-sentences); "$@" becomes the
# fairseq-train arguments. A bad option stops here, in one line.
OPTIONS=$(fairseq-san-loop options learn_to_share_lm.sh "$@")
eval "$OPTIONS"

LM=(--task language_modeling_san --sample-break-mode eos)
# The measured recipe (docs/results/lm-multi30k: transformer_lm_san_small converges, stopped by
# --patience, in about 2,000 updates, 10 minutes on 2 CPU cores), then the arguments after --.
TRAIN_ARGS=(
  --tokens-per-sample 128 --share-decoder-input-output-embed --dropout 0.0
  --optimizer adam --adam-betas "(0.9,0.98)" --lr 3e-3 --lr-scheduler inverse_sqrt
  --warmup-updates 200 --warmup-init-lr 1e-7 --weight-decay 0.01 --clip-norm 1.0
  --max-tokens 4096 --patience 5
  --validate-interval-updates 100 --save-interval-updates 100 --keep-interval-updates 1
  --no-epoch-checkpoints --num-workers 0 --log-format simple --log-interval 50
)

# fairseq-eval-lm builds its task from its own command line, not from the checkpoint: the task
# options the training is given (--tokens-per-sample, and --add-bos-token ... after --). Refused
# here, before RUN exists, where a sample is shorter than a valid sentence (fairseq-train stops).
SCORE_WORDS=$(fairseq-san-loop lm-task-args --data "$DATA" -- "${TRAIN_ARGS[@]}" "$@")
eval "SCORE_TASK=($SCORE_WORDS)"

# shellcheck source=examples/learn_to_share_loop.sh
source "$(dirname "$0")/learn_to_share_loop.sh"
start_loop "$@"

USER_DIR=$(fairseq-san-loop user-dir)

train() {  # train ITER_DIR ITERATION: --updates at most, then the arguments after --
  train_with "$1" "$2" "$DATA" --user-dir "$USER_DIR" "${LM[@]}" --arch "$ARCH" \
    --san-policy "$1/policy.json" --san-self-share "$SELF_SHARE" \
    --save-dir "$1/checkpoints" "${TRAIN_ARGS[@]}"
}

analyze() {  # analyze ITER_DIR CHECKPOINT: the JS matrices of its self-attention on valid
  run fairseq-validate "$DATA" --user-dir "$USER_DIR" "${LM[@]}" --path "$2" --valid-subset valid \
    --max-tokens 4096 --num-workers 0 --san-analysis-dir "$1/analysis" "${ANALYSIS_ARGS[@]}"
}

run_logged() {  # run_logged LOG COMMAND...: as run, its output to LOG, the last lines if it fails
  { printf '+'; printf ' %q' "${@:2}"; printf ' > %q 2>&1\n' "$1"; } >&2
  [ "$DRY_RUN" = 1 ] || "${@:2}" > "$1" 2>&1 || { fairseq-san-loop log-tail "$1" >&2; exit 1; }
}

score() {  # score ITER_DIR CHECKPOINT: its perplexity on valid
  run_logged "$1/eval-lm-valid.log" fairseq-eval-lm "$DATA" --user-dir "$USER_DIR" "${LM[@]}" \
    "${SCORE_TASK[@]}" --path "$2" --gen-subset valid --max-tokens 4096 --num-workers 0
  run fairseq-san-loop perplexity "$1/eval-lm-valid.log" -o "$1/valid.json"
}

learn() {  # learn JS_JSON POLICY: P_{k+1} at THETA_SELF (Eq. 6)
  run fairseq-san-policy "$1" --theta-decoder-self "$THETA_SELF" -o "$2"
}

learn_to_share_loop
