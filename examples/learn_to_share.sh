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
#   --arch A             model architecture (transformer_san_small)
#   --theta-self T       theta for decoder self-attention (0.4)
#   --theta-encdec T     theta for encoder-decoder attention (0.5)
#   --theta-encoder T    theta for encoder self-attention (unset: the encoder is not shared)
#   --updates N          training updates per iteration (3000)
#   --max-iterations K   stop after K trained iterations even if the policy still changes (3)
#   --warm-start         iteration k+1 starts from iteration k's model, unused projections dropped
#   --warm-updates N     updates of a warm-started iteration (updates / 2)
#   --cpu-ranks N        train with N CPU processes, one per rank (gloo, legacy_ddp)
#   --launcher CMD       prefix for fairseq-train, e.g. "torchrun --nproc_per_node 8"
#   --valid-ref FILE     raw validation references (DATA/text/valid.raw.TGT)
#   --post-process P     how fairseq-generate detokenizes, e.g. subword_nmt (sentencepiece)
#   --decode-batch-size N  sentences per batch of the validation BLEU's decoding (16; on a GPU,
#                        128 takes about an eighth of the time)
#   --extend             allow a re-run to change --max-iterations (the only option it may change)
#   --dry-run            print the commands of the first iteration instead of running them; writes
#                        nothing
# Everything after -- goes to fairseq-train (and wins over the defaults below), e.g. fairseq's
# distributed options: --distributed-world-size 8, or --distributed-init-method for several nodes.
set -euo pipefail

ARCH=transformer_san_small THETA_SELF=0.4 THETA_ENCDEC=0.5 THETA_ENCODER=""
UPDATES=3000 MAX_ITERATIONS=3 WARM_START=0 WARM_UPDATES="" CPU_RANKS=0 LAUNCHER=""
DECODE_BATCH_SIZE=16
DATA="" RUN="" VALID_REF="" DRY_RUN=0 POST_PROCESS=sentencepiece FLAGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --data) DATA=$2; shift 2 ;;
    --run-dir) RUN=$2; shift 2 ;;
    --arch) ARCH=$2; shift 2 ;;
    --theta-self) THETA_SELF=$2; shift 2 ;;
    --theta-encdec) THETA_ENCDEC=$2; shift 2 ;;
    --theta-encoder) THETA_ENCODER=$2; shift 2 ;;
    --updates) UPDATES=$2; shift 2 ;;
    --max-iterations) MAX_ITERATIONS=$2; shift 2 ;;
    --warm-start) WARM_START=1; FLAGS+=(--warm-start); shift ;;
    --extend) FLAGS+=(--extend); shift ;;
    --warm-updates) WARM_UPDATES=$2; shift 2 ;;
    --cpu-ranks) CPU_RANKS=$2; shift 2 ;;
    --launcher) LAUNCHER=$2; shift 2 ;;
    --valid-ref) VALID_REF=$2; shift 2 ;;
    --post-process) POST_PROCESS=$2; shift 2 ;;
    --decode-batch-size) DECODE_BATCH_SIZE=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; FLAGS+=(--dry-run); shift ;;
    --) shift; break ;;
    *) echo "learn_to_share.sh: unknown option $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
[ -n "$DATA" ] && [ -n "$RUN" ] || { echo "learn_to_share.sh: --data and --run-dir are required" >&2; exit 2; }
WARM_UPDATES=${WARM_UPDATES:-$((UPDATES / 2))}
[[ $DECODE_BATCH_SIZE =~ ^[1-9][0-9]*$ ]] ||
  { echo "learn_to_share.sh: --decode-batch-size takes a positive integer," \
    "not '$DECODE_BATCH_SIZE'" >&2; exit 2; }

if [ -z "$VALID_REF" ]; then  # fairseq names the binarized files train.SRC-TGT.LANG.idx
  name=$(basename "$(ls "$DATA"/train.*-*.*.idx 2>/dev/null | head -n 1)")
  pair=${name#train.} && pair=${pair%%.*}
  VALID_REF=$DATA/text/valid.raw.${pair#*-}
fi
# One loop per run dir: RUN/.lock stays locked on fd 9, which every command below inherits, until
# this script and the last of them (fairseq-train too) end. Missing inputs stop before RUN exists.
if [ "$DRY_RUN" = 0 ]; then
  fairseq-san-loop start "$RUN" --data="$DATA" --valid-ref="$VALID_REF" --check-inputs
  mkdir -p "$RUN" && exec 9>>"$RUN/.lock"
  FLAGS+=(--lock-fd 9)
fi
# Locks RUN; checks RUN/run.json; records the options, creates RUN/iter0 with P_0.
fairseq-san-loop start "$RUN" --data="$DATA" --valid-ref="$VALID_REF" --arch="$ARCH" \
  --theta-self="$THETA_SELF" --theta-encdec="$THETA_ENCDEC" --theta-encoder="$THETA_ENCODER" \
  --updates="$UPDATES" --max-iterations="$MAX_ITERATIONS" --warm-updates="$WARM_UPDATES" \
  --cpu-ranks="$CPU_RANKS" --launcher="$LAUNCHER" --post-process="$POST_PROCESS" "${FLAGS[@]}" \
  -- "$@"

# Training defaults for a small corpus (Multi30k); anything after -- overrides them.
TRAIN_ARGS=(
  --task translation_san --arch "$ARCH" --share-all-embeddings
  --optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-9 --lr 1e-3
  --lr-scheduler inverse_sqrt --warmup-updates 500 --warmup-init-lr 1e-7
  --dropout 0.3 --weight-decay 0.0001 --criterion label_smoothed_cross_entropy
  --label-smoothing 0.1 --max-tokens 4096 --log-format simple --log-interval 25
  --no-epoch-checkpoints --save-interval-updates 100 --keep-interval-updates 1 --seed 1
)
THETAS=(--theta-decoder-self "$THETA_SELF" --theta-decoder-encdec "$THETA_ENCDEC")
[ -n "$THETA_ENCODER" ] && THETAS+=(--theta-encoder-self "$THETA_ENCODER")

run() {  # run COMMAND...: print it; execute it unless --dry-run
  { printf '+'; printf ' %q' "$@"; printf '\n'; } >&2
  [ "$DRY_RUN" = 1 ] || "$@"
}

train() {  # train ITER_DIR ITERATION
  local dir=$1 k=$2 updates=$UPDATES start=()
  if [ "$WARM_START" = 1 ] && [ "$k" -gt 0 ]; then
    updates=$WARM_UPDATES
    start=(--finetune-from-model "$RUN/iter$((k - 1))/checkpoints/checkpoint_best.pt")
  fi
  local launch=(fairseq-train)
  if [ "$CPU_RANKS" -gt 0 ]; then
    launch=(fairseq-san-cpu-ranks "$CPU_RANKS" --log-dir "$dir" -- fairseq-train)
  elif [ -n "$LAUNCHER" ]; then
    read -r -a launch <<< "$LAUNCHER"
    launch+=("$(command -v fairseq-train)")
  fi
  run "${launch[@]}" "$DATA" --user-dir "$USER_DIR" "${TRAIN_ARGS[@]}" \
    --san-policy "$dir/policy.json" --max-update "$updates" --save-dir "$dir/checkpoints" \
    "${start[@]}" "${EXTRA_ARGS[@]}"
}

USER_DIR=$(python -c 'import fairseq_san, os; print(os.path.dirname(fairseq_san.__file__))')
EXTRA_ARGS=("$@")

for ((k = 0; k < MAX_ITERATIONS; k++)); do
  dir=$RUN/iter$k next=$RUN/iter$((k + 1))
  ckpt=$dir/checkpoints/checkpoint_best.pt
  if [ "$DRY_RUN" = 1 ]; then  # writes nothing: not even P_0, the train log or RUN/last
    echo "== iteration $k (dry run)"
    [ -f "$dir/trained" ] || train "$dir" "$k"
  else
    echo "== iteration $k: policy $(fairseq-san-loop show "$dir/policy.json")"
    ln -sfn "iter$k" "$RUN/last"  # the newest trained iteration: the loop's result when it stops
    if [ ! -f "$dir/trained" ]; then
      train "$dir" "$k" 2>&1 | tee -a "$dir/train.log"
      touch "$dir/trained"
    fi
  fi
  [ -f "$dir/analysis/js.json" ] || run fairseq-validate "$DATA" --user-dir "$USER_DIR" \
    --task translation_san --path "$ckpt" --valid-subset valid --max-tokens 4096 \
    --san-analysis-dir "$dir/analysis"
  if [ ! -f "$dir/valid.json" ]; then
    run fairseq-generate "$DATA" --user-dir "$USER_DIR" --path "$ckpt" --gen-subset valid \
      --beam 4 --batch-size "$DECODE_BATCH_SIZE" --max-len-a 1.2 --max-len-b 10 \
      --required-batch-size-multiple 1 \
      --post-process "$POST_PROCESS" \
      --scoring sacrebleu \
      --results-path "$dir"
    run fairseq-san-score "$dir/generate-valid.txt" --reference "$VALID_REF" -o "$dir/valid.json"
  fi
  [ "$DRY_RUN" = 1 ] || mkdir -p "$next"
  # Learned once: the policy that iteration k+1 is (or will be) trained with is never rewritten.
  [ -f "$next/policy.json" ] || run fairseq-san-policy "$dir/analysis/js.json" "${THETAS[@]}" \
    -o "$next/policy.json"
  if [ "$DRY_RUN" = 1 ]; then
    echo "(dry run: iteration $((k + 1)) repeats these commands with $next/policy.json, until it equals $dir/policy.json)"
    exit 0
  fi
  status=0
  fairseq-san-loop settled "$RUN" "$k" || status=$?  # exit 0: it says why the loop stops
  [ "$status" -le 1 ] || exit "$status"
  [ "$status" = 1 ] || break
done
fairseq-san-loop summary "$RUN"
