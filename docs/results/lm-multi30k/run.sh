#!/usr/bin/env bash
# SAN for a decoder-only language model on the English side of Multi30k: every command
# of docs/results/lm-multi30k/results.md, run from the repository root. Each training resumes
# from its checkpoint_last.pt when run again (finished systems are skipped).
#
#   docs/results/lm-multi30k/run.sh [STEP...]   (steps: data loop baselines fixed learned loop_kv
#                                                eval speed table policies same speed_kv_loop;
#                                                all: each in turn but speed_kv_loop)
# loop, loop_kv, fixed and baselines need only the data and may run at once (one thread each),
# learned needs the loop's policy: run.sh data; run.sh loop & run.sh loop_kv & run.sh fixed &
# run.sh baselines & wait; run.sh learned eval speed table policies. speed runs alone: the clock
# is shared with nothing of ours.
set -euo pipefail

HERE=docs/results/lm-multi30k
DATA=data-bin/multi30k.en-lm
RUNS=${RUNS:-runs/lm-multi30k}          # checkpoints and logs (git-ignored)
THETA=${THETA:-0.5}                    # theta of the learned decoder self-attention policy
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
USER_DIR=fairseq_san

# What learn_to_share_lm.sh sets itself (its --arch and --updates defaults): the loops of
# 2026-11-26/27 passed these after -- too (run.json), which the recipe refuses since 2026-12-02/04.
MODEL_ARGS=(--task language_modeling_san --arch transformer_lm_san_small --max-update 20000)
# The training recipe of every system (learn_to_share_lm.sh trains with it by default since
# 2026-11-30; the loops here pass it after --).
RECIPE_ARGS=(
  --sample-break-mode eos
  --tokens-per-sample 128 --share-decoder-input-output-embed --dropout 0.0
  --optimizer adam --adam-betas "(0.9,0.98)" --lr 3e-3 --lr-scheduler inverse_sqrt
  --warmup-updates 200 --warmup-init-lr 1e-7 --weight-decay 0.01 --clip-norm 1.0
  --max-tokens 4096 --patience 5 --stop-time-hours 0.75
  --validate-interval-updates 100 --save-interval-updates 100 --keep-interval-updates 1
  --no-epoch-checkpoints --num-workers 0 --log-format json --log-interval 50 --cpu
)  # converged: stopped by --patience 5 (validation perplexity flat for 5 validations)
TRAIN_ARGS=("${MODEL_ARGS[@]}" "${RECIPE_ARGS[@]}")

train() {  # train NAME SEED [fairseq-train options]: one system into $RUNS/NAME-sSEED
  local name=$1 seed=$2 dir=$RUNS/$1-s$2
  shift 2
  [ -f "$dir/trained" ] && return 0
  mkdir -p "$dir"
  fairseq-train "$DATA" --user-dir "$USER_DIR" "${TRAIN_ARGS[@]}" --seed "$seed" \
    --save-dir "$dir" "$@" >> "$dir/train.log" 2>&1
  touch "$dir/trained"
}

step_data() { examples/lm/prepare.sh "$DATA"; }  # MULTI30K_DIR=DIR reads a local copy; unset, it downloads

step_loop() {  # the learn-to-share loop, seed 1: the baseline (iteration 0), the learned policy
  # (iteration 1), the policy learned from it (iteration 2), and on until the learned policy is
  # not new (first run, 2026-11-26: --max-iterations 3; extended to 5 on 2026-11-27)
  examples/learn_to_share_lm.sh --data "$DATA" --run-dir "$RUNS/loop" --theta-self "$THETA" \
    --max-iterations 5 --extend -- "${RECIPE_ARGS[@]}" --seed 1
}

step_loop_kv() {  # the same loop with KV sharing (CLA: a block's following layers attend with
  # their own queries over the first layer's keys and values), seed 1, until it stops
  examples/learn_to_share_lm.sh --data "$DATA" --run-dir "$RUNS/loop-kv" --theta-self "$THETA" \
    --self-share kv --max-iterations 5 -- "${RECIPE_ARGS[@]}" --seed 1
}

step_same() {  # same-models.txt: the loops' iterations that repeat a system of the tables
  python "$HERE/same_models.py" \
    "$RUNS/loop/iter3/checkpoints/checkpoint_best.pt" "$RUNS/san-uniform6-s1/checkpoint_best.pt" \
    "$RUNS/loop-kv/iter0/checkpoints/checkpoint_best.pt" "$RUNS/loop/iter0/checkpoints/checkpoint_best.pt" \
    "$RUNS/loop-kv/iter1/checkpoints/checkpoint_best.pt" "$RUNS/kv-learned-s1/checkpoint_best.pt" \
    > "$HERE/same-models.txt"
}

analysed_iterations() {  # analysed_iterations LOOP: its iterations whose attention has been
  local k=0                # analysed, in order
  while [ -f "$RUNS/$1/iter$k/analysis/js.json" ]; do echo "$k"; k=$((k + 1)); done
}

learned_policy() {  # the loop's learned policy (iteration 1's) as block sizes, e.g. 3,1,1,1
  python -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['decoder_self'])))" "$RUNS/loop/iter1/policy.json"
}

step_baselines() {  # two more seeds of the baseline
  train baseline 2
  train baseline 3
}

step_fixed() {  # the systems whose policy is fixed in advance
  train kv-cla2 1 --san-decoder-self-policy 2,2,2 --san-self-share kv
  train san-uniform6 1 --san-decoder-self-policy 6
}

step_learned() {  # the systems trained with the loop's learned policy
  local learned
  learned=$(learned_policy)
  train kv-learned 1 --san-decoder-self-policy "$learned" --san-self-share kv
  train san-learned 2 --san-decoder-self-policy "$learned"
  train san-learned 3 --san-decoder-self-policy "$learned"
}

SYSTEMS=$(python "$HERE/systems.py" names)

checkpoint() {  # checkpoint NAME SEED: its best checkpoint (seed 1 of some: a loop's iteration)
  python "$HERE/systems.py" checkpoint "$RUNS" "$1" "$2"
}

step_eval() {  # the loss of every test sentence, per trained system and seed
  mkdir -p "$HERE/nll"
  for name in $SYSTEMS; do
    for seed in 1 2 3; do
      local ckpt out=$HERE/nll/$name-s$seed.json
      ckpt=$(checkpoint "$name" "$seed")
      [ -f "$ckpt" ] && [ ! -f "$out" ] || continue
      [ -f "$(dirname "$ckpt")/trained" ] || [ -f "$(dirname "$ckpt")/../trained" ] || continue
      python "$HERE/lm_eval.py" nll "$ckpt" "$DATA" -o "$out"
    done
  done
}

# time_speed OUT NAME=CHECKPOINT...: greedy generation with fairseq's generator and the static
# decoder, each system and decoder in its own process; 3 rounds interleaved (the machine is
# shared): table.py gives the median over rounds of the per-round ratios.
time_speed() {
  local out=$1 round batch pair decoding
  shift
  mkdir -p "$out"
  for round in 1 2 3; do
    for batch in 1 16; do
      for pair in "$@"; do
        for decoding in fairseq static; do
          local name=${pair%%=*} ckpt=${pair#*=}
          local file=$out/$name-$decoding-b$batch-r$round.json
          [ -f "$ckpt" ] && [ ! -f "$file" ] || continue
          python "$HERE/lm_eval.py" speed "$ckpt" "$DATA" --batch "$batch" --decoding "$decoding" -o "$file"
        done
      done
    done
  done
}

step_speed() {  # seed 1 of each system
  local pairs=() name
  for name in $SYSTEMS; do pairs+=("$name=$(checkpoint "$name" 1)"); done
  time_speed "$HERE/speed" "${pairs[@]}"
}

# The KV loop's three iterations side by side: iteration 0 is the baseline and iteration 1
# kv-learned, bit for bit; iteration 2 was trained after the speed runs above.
step_speed_kv_loop() {
  local loop=$RUNS/loop-kv out=$HERE/kv-loop-speed
  time_speed "$out/speed" "baseline=$loop/iter0/checkpoints/checkpoint_best.pt" \
    "kv-learned=$loop/iter1/checkpoints/checkpoint_best.pt" \
    "kv-iteration2=$loop/iter2/checkpoints/checkpoint_best.pt"
  python "$HERE/table.py" speed "$out" > "$out/table.md"
}

step_table() {  # the tables, the training logs, and the loop's record, matrices and heatmaps
  local k
  for k in $(analysed_iterations loop); do
    mkdir -p "$HERE/iter$k-analysis"
    cp "$RUNS/loop/iter$k/analysis/js.json" "$RUNS/loop/iter$k/analysis/js-decoder_self.png" \
      "$RUNS/loop/iter$k/policy.json" "$RUNS/loop/iter$k/valid.json" "$HERE/iter$k-analysis/"
    cp "$RUNS/loop/iter$((k + 1))/policy.json" "$HERE/iter$k-analysis/learned-policy.json"
  done
  cp "$RUNS/loop/loop.md" "$RUNS/loop/loop.json" "$RUNS/loop/run.json" "$HERE/"
  [ ! -f "$RUNS/loop-kv/loop.md" ] || cp "$RUNS/loop-kv/loop.md" "$HERE/loop-kv.md"
  python "$HERE/table.py" "$RUNS" "$HERE" > "$HERE/table.md"
  fairseq-san-loop train-log "$RUNS"/loop/iter*/train.log "$RUNS"/loop-kv/iter*/train.log \
    "$RUNS"/*-s[123]/train.log -o "$HERE/train-log.md"
}

step_policies() {  # theta-ranges.txt: the range of theta of each policy learned (the loop's
  # iterations), and what each baseline seed's own analysis learns, seed 1's on test too
  local loop k seed split ckpt out=$RUNS/policies
  mkdir -p "$out"
  {
    echo "# fairseq-san-policy --explain at theta $THETA (docs/results/lm-multi30k/run.sh policies)"
    for loop in loop loop-kv; do
      for k in $(analysed_iterations "$loop"); do
        echo "== the $loop's iteration $k, valid"
        fairseq-san-policy "$RUNS/$loop/iter$k/analysis/js.json" --theta-decoder-self "$THETA" --explain | sed -n 2p
      done
    done
    for seed in 1 2 3; do
      for split in valid test; do
        [ "$seed" = 1 ] || [ "$split" = valid ] || continue
        ckpt=$(checkpoint baseline "$seed")
        [ -f "$out/baseline-s$seed-$split/js.json" ] ||
          fairseq-validate "$DATA" --user-dir "$USER_DIR" --task language_modeling_san \
            --sample-break-mode eos --path "$ckpt" --valid-subset "$split" --max-tokens 4096 \
            --num-workers 0 --san-analysis-dir "$out/baseline-s$seed-$split" > "$out/baseline-s$seed-$split.log" 2>&1
        echo "== baseline seed $seed, $split"
        fairseq-san-policy "$out/baseline-s$seed-$split/js.json" --theta-decoder-self "$THETA" --explain | sed -n 2p
      done
    done
  } > "$HERE/theta-ranges.txt"
}

step_all() {
  step_data; step_loop; step_fixed; step_baselines; step_learned; step_loop_kv; step_eval
  step_speed; step_table; step_policies; step_same
}

for step in "${@:-all}"; do "step_$step"; done
