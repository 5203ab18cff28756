# Multi30k En->Fr: data, the learn-to-share loop (warm start), test BLEU; 2 CPU cores shared
# with the other pair's run (two jobs at once, one thread each), 2026-11-26.
export PATH=/work/main/.venv/bin:$PATH OMP_NUM_THREADS=1
MULTI30K_DIR=/work/shared/data/multi30k examples/multi30k/prepare.sh en fr
examples/learn_to_share.sh --data data-bin/multi30k.en-fr --run-dir runs/multi30k.en-fr \
  --updates 660 --warm-start --warm-updates 330 --max-iterations 2 -- --num-workers 0
examples/multi30k/test_bleu.sh data-bin/multi30k.en-fr fr runs/multi30k.en-fr/test-bleu \
  baseline=runs/multi30k.en-fr/iter0/checkpoints/checkpoint_best.pt \
  san-P1-warm=runs/multi30k.en-fr/iter1/checkpoints/checkpoint_best.pt
