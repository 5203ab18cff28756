# Multi30k En->Cs: data, the learn-to-share loop (warm start), test BLEU; 2 CPU cores shared
# with the other pair's run (two jobs at once, one thread each), 2026-11-26.
export PATH=/work/main/.venv/bin:$PATH OMP_NUM_THREADS=1
MULTI30K_DIR=/work/shared/data/multi30k examples/multi30k/prepare.sh en cs
examples/learn_to_share.sh --data data-bin/multi30k.en-cs --run-dir runs/multi30k.en-cs \
  --updates 660 --warm-start --warm-updates 330 --max-iterations 2 -- --num-workers 0
examples/multi30k/test_bleu.sh data-bin/multi30k.en-cs cs runs/multi30k.en-cs/test-bleu \
  baseline=runs/multi30k.en-cs/iter0/checkpoints/checkpoint_best.pt \
  san-P1-warm=runs/multi30k.en-cs/iter1/checkpoints/checkpoint_best.pt
