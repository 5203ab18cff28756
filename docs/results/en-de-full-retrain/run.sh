# Full retraining of iteration 1 (no warm start), for the comparison with the warm-started run.
# Iteration 0 is the baseline of runs/multi30k.en-de, hard-linked so that the loop skips it.
export PATH=/work/main/.venv/bin:$PATH TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 OMP_NUM_THREADS=1
mkdir -p runs/multi30k.en-de-full && cp -al runs/multi30k.en-de/iter0 runs/multi30k.en-de-full/iter0
examples/learn_to_share.sh --data data-bin/multi30k.en-de --run-dir runs/multi30k.en-de-full \
  --updates 660 --max-iterations 2 -- --num-workers 0
examples/multi30k/test_bleu.sh data-bin/multi30k.en-de de runs/multi30k.en-de-full/test-bleu \
  san-P1-full=runs/multi30k.en-de-full/iter1/checkpoints/checkpoint_best.pt
