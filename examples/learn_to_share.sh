#!/usr/bin/env bash
# Learn to share (paper Figure 3): train under policy P_k (P_0 = no sharing), measure how similar
# the layers' attention is on the validation set, learn P_{k+1} (Eq. 6), and repeat until the
# learned policy is not new: P_k's (settled) or, trained from scratch, an earlier one's (a cycle;
# fairseq-san-loop settled). Running the same command again resumes: finished steps are skipped and
# fairseq continues from checkpoint_last.pt. RUN/run.json records the options the run was made
# with (these and the fairseq-train args); a re-run with other options stops before anything runs
# (start a new run in another --run-dir). A learned policy is never rewritten. One loop per run
# dir: a second one stops while the first (or a fairseq-train it started) runs.
#
#   examples/learn_to_share.sh --data DATA --run-dir RUN [options] [-- fairseq-train args]
#
# The options, with their defaults: examples/learn_to_share.sh --help (one list, in
# fairseq_san/loop/recipe_options.py). Everything after -- goes to fairseq-train (and wins over the
# defaults below), e.g. fairseq's distributed options: --distributed-world-size 8, or
# --distributed-init-method for several nodes; not what the recipe sets itself (the policy,
# --save-dir, --arch, --task, --user-dir: refused there).
set -euo pipefail
source "$(dirname "$0")/commands.sh"
need_commands "$0" fairseq-san-loop

# ARCH, THETA_SELF, ... DRY_RUN (one per option), START_OPTIONS (what RUN_DIR/run.json records),
# POLICY_THETAS (fairseq-san-policy's thresholds: none for an AAN decoder's self-attention),
# ANALYSIS_ARGS (fairseq-validate's limit of --analysis-sentences); "$@" becomes the
# fairseq-train arguments. A bad option stops here, in one line.
OPTIONS=$(fairseq-san-loop options learn_to_share.sh "$@")
eval "$OPTIONS"

# shellcheck source=examples/learn_to_share_loop.sh
source "$(dirname "$0")/learn_to_share_loop.sh"
start_loop "$@"

# Training defaults for a small corpus (Multi30k); anything after -- overrides them.
TRAIN_ARGS=(
  --task translation_san --arch "$ARCH" --share-all-embeddings
  --optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-9 --lr 1e-3
  --lr-scheduler inverse_sqrt --warmup-updates 500 --warmup-init-lr 1e-7
  --dropout 0.3 --weight-decay 0.0001 --criterion label_smoothed_cross_entropy
  --label-smoothing 0.1 --max-tokens 4096 --log-format simple --log-interval 25
  --no-epoch-checkpoints --save-interval-updates 100 --keep-interval-updates 1 --seed 1
)

train() {  # train ITER_DIR ITERATION
  train_with "$1" "$2" "$DATA" --user-dir "$USER_DIR" "${TRAIN_ARGS[@]}" \
    --san-policy "$1/policy.json" --save-dir "$1/checkpoints"
}

analyze() {  # analyze ITER_DIR CHECKPOINT: the JS matrices of its attention on valid
  run fairseq-validate "$DATA" --user-dir "$USER_DIR" --task translation_san --path "$2" \
    --valid-subset valid --max-tokens 4096 --san-analysis-dir "$1/analysis" "${ANALYSIS_ARGS[@]}"
}

score() {  # score ITER_DIR CHECKPOINT: BLEU and chrF of its translation of valid
  run fairseq-generate "$DATA" --user-dir "$USER_DIR" --path "$2" --gen-subset valid \
    --beam 4 --batch-size "$DECODE_BATCH_SIZE" --max-len-a 1.2 --max-len-b 10 \
    --required-batch-size-multiple 1 \
    --post-process "$POST_PROCESS" \
    --scoring sacrebleu \
    --results-path "$1"
  run fairseq-san-score "$1/generate-valid.txt" --reference "$VALID_REF" -o "$1/valid.json"
}

learn() {  # learn JS_JSON POLICY: P_{k+1} at the thresholds POLICY_THETAS (Eq. 6)
  run fairseq-san-policy "$1" "${POLICY_THETAS[@]}" -o "$2"
}

USER_DIR=$(fairseq-san-loop user-dir)
learn_to_share_loop
