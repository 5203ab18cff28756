#!/usr/bin/env bash
# Multi30k En->De on the lent GPU: the paper's sensitivity runs (Tables 3-6), every system trained
# from scratch under a fixed policy with the CPU runs' budget and settings (660 updates,
# --max-tokens 4096, fp32, seed 1; learn_to_share.sh with iter0/policy.json given and one
# iteration), all at once on one GPU; then test BLEU of each (test_bleu.sh).
#   docs/results/en-de-gpu-sensitivity/train.sh [NAME...]  # writes runs/gpu/NAME (default: all)
# Run from the repository root with fairseq-san's console commands on PATH (on a GPU machine
# without a package registry: the offline bundle of scripts/build_offline_bundle.py).
# SEED=N trains with --seed N instead of 1, into runs/gpu/NAME-seedN.
set -uo pipefail
D=data-bin/multi30k.en-de R=runs/gpu SEED=${SEED:-1}
export OMP_NUM_THREADS=1
SELECTED=" $* "

train_system() {  # train_system NAME ARCH POLICY_JSON [fairseq-train args]: train, then test BLEU
  local name=$1 arch=$2 policy=$3
  shift 3
  [ "$SELECTED" = "  " ] || [[ $SELECTED == *" $name "* ]] || return 0
  [ "$SEED" = 1 ] || { name=$name-seed$SEED; set -- "$@" --seed "$SEED"; }
  mkdir -p "$R/$name/iter0"
  echo "$policy" > "$R/$name/iter0/policy.json"
  examples/learn_to_share.sh --data "$D" --run-dir "$R/$name" --arch "$arch" \
    --updates 660 --max-iterations 1 -- --num-workers 0 "$@" > "$R/$name.log" 2>&1 &&
  examples/multi30k/test_bleu.sh "$D" de "$R/test-bleu" \
    "$name=$R/$name/iter0/checkpoints/checkpoint_best.pt" >> "$R/$name.log" 2>&1
  echo "$name: exit $? at $(date +%T)"
}

none=null
policy() { echo "{\"decoder_self\": $1, \"decoder_encdec\": $2, \"encoder_self\": ${3:-null}}"; }
mkdir -p "$R"
date +"start %T"
S=transformer_san_small A=transformer_aan_small
train_system baseline          $S "$(policy $none $none)" &
train_system san-6-6           $S "$(policy '[6]' '[6]')" &              # learned, theta 0.4/0.5
train_system san-6-3.3         $S "$(policy '[6]' '[3, 3]')" &           # uniform
train_system san-1.5-3.3       $S "$(policy '[1, 5]' '[3, 3]')" &        # the paper's example
train_system self-0.43         $S "$(policy '[1, 5]' '[6]')" &           # Table 3, theta_self 0.43
train_system self-0.46         $S "$(policy '[1, 1, 1, 3]' '[6]')" &     # Table 3, theta_self 0.46
train_system encdec-0.6928     $S "$(policy '[6]' '[2, 1, 1, 1, 1]')" &  # Table 3, theta_encdec
train_system san-6-6-own-v     $S "$(policy '[6]' '[6]')" --san-encdec-share weights &  # Table 4
train_system enc-6             $S "$(policy '[6]' '[6]' '[6]')" &        # Table 5, theta_enc 0.4
train_system enc-1.5           $S "$(policy '[6]' '[6]' '[1, 5]')" &     # Table 5, theta_enc 0.52
train_system aan               $A "$(policy $none $none)" &              # Table 6
train_system aan-san           $A "$(policy $none '[6]')" &              # Table 6
wait
date +"end %T"
