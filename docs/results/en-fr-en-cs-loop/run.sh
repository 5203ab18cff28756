#!/usr/bin/env bash
# Multi30k En->Fr and En->Cs: data, the learn-to-share loop (warm start), test BLEU. The two pairs
# ran at the same time on the 2 CPU cores (one torch thread each), 2026-11-26 03:59-05:36 UTC;
# test BLEU of each baseline started once its iteration 0 was scored. Run from the repository root.
set -euo pipefail
export PATH=$PWD/.venv/bin:$PATH OMP_NUM_THREADS=1
for p in fr cs; do
  examples/multi30k/prepare.sh en $p  # MULTI30K_DIR=DIR reads a local copy; unset, it downloads
  examples/learn_to_share.sh --data data-bin/multi30k.en-$p --run-dir runs/multi30k.en-$p \
    --updates 660 --warm-start --warm-updates 330 --max-iterations 2 -- --num-workers 0 &
done
wait
for p in fr cs; do
  examples/multi30k/test_bleu.sh data-bin/multi30k.en-$p $p runs/multi30k.en-$p/test-bleu \
    baseline=runs/multi30k.en-$p/iter0/checkpoints/checkpoint_best.pt \
    san-P1-warm=runs/multi30k.en-$p/iter1/checkpoints/checkpoint_best.pt | tee -a runs/multi30k.en-$p/test-bleu.log
done
# Committed: runs/multi30k.en-PAIR/{loop.json,loop.md,test-bleu.log} and iterK/analysis/
# (iterK-analysis/) as en-PAIR/. test-bleu.log lists the baseline twice: it was scored once early,
# then again with the SAN model (a split already decoded is only rescored).
# The README's parameter counts (model.parameters(), as fairseq-san-bench counts them):
for p in fr cs; do for k in 0 1; do
  python -c 'import sys
from fairseq import checkpoint_utils
import fairseq_san  # registers translation_san and transformer_san
models, _ = checkpoint_utils.load_model_ensemble([sys.argv[1]], arg_overrides={"data": sys.argv[2]})
print(sys.argv[1], sum(x.numel() for x in models[0].parameters()))' \
    runs/multi30k.en-$p/iter$k/checkpoints/checkpoint_best.pt data-bin/multi30k.en-$p
done; done  # en-fr 13037568, 11392768; en-cs 13066240, 11421440
