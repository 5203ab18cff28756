#!/usr/bin/env bash
# Multi30k En->De: data, the learn-to-share loop (warm start), then test BLEU of the baseline, of
# the baseline with the learned policy {6}/{6} applied at decode time (no retraining), and of the
# retrained SAN model. Run from the repository root (2 CPU cores, 2026-11-25/26).
set -euo pipefail
export PATH=$PWD/.venv/bin:$PATH
examples/multi30k/prepare.sh en de  # MULTI30K_DIR=DIR reads a local copy; unset, it downloads
# Iteration 0 was first started by hand with the same fairseq-train options and --max-update 1200,
# and stopped at the end of epoch 5 (update 660); the loop then resumed from it.
R=runs/multi30k.en-de
examples/learn_to_share.sh --data data-bin/multi30k.en-de --run-dir $R \
  --updates 660 --warm-start --warm-updates 330 --max-iterations 2 -- --num-workers 0
P1="{'san_policy': '{\"decoder_self\": [6], \"decoder_encdec\": [6]}'}"
examples/multi30k/test_bleu.sh data-bin/multi30k.en-de de $R/test-bleu \
  baseline=$R/iter0/checkpoints/checkpoint_best.pt \
  "baseline+P1=$R/iter0/checkpoints/checkpoint_best.pt:$P1" \
  san-P1=$R/iter1/checkpoints/checkpoint_best.pt
# Committed: $R/{loop.json,loop.md}, $R/iterK/analysis/ (iterK-analysis/), and each
# $R/test-bleu/NAME/SPLIT/score.json as test-bleu/NAME/score-SPLIT.json. The scores were measured
# with a hand-written copy of test_bleu.sh with the same fairseq-generate options, less
# --scoring sacrebleu (which changes no hypothesis): git show 1f51b51:docs/results/multi30k.en-de/test-bleu.sh
