#!/usr/bin/env bash
# AAN + SAN (paper Table 6): AAN decoder self-attention, encoder-decoder attention shared as the
# baseline's analysis learned ({6}), trained from scratch with the baseline's budget (660 updates).
# Run from the repository root, after examples/multi30k/prepare.sh en de.
set -euo pipefail
export PATH=$PWD/.venv/bin:$PATH OMP_NUM_THREADS=1
R=runs/multi30k.en-de-aan-san
mkdir -p $R/iter0
echo '{"decoder_self": null, "decoder_encdec": [6], "encoder_self": null}' > $R/iter0/policy.json
examples/learn_to_share.sh --data data-bin/multi30k.en-de --run-dir $R --arch transformer_aan_small \
  --updates 660 --max-iterations 1 -- --num-workers 0
examples/multi30k/test_bleu.sh data-bin/multi30k.en-de de $R/test-bleu \
  aan-san=$R/iter0/checkpoints/checkpoint_best.pt | tee $R/test-bleu.log
# Committed: $R/{loop.json,loop.md,test-bleu.log}.
