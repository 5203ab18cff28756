# Multi30k En->Fr and En->Cs: data, the learn-to-share loop (warm start), test BLEU. The two pairs
# ran at the same time on the 2 CPU cores (one torch thread each), 2026-11-26 03:59-05:36 UTC;
# test BLEU of each baseline started once its iteration 0 was scored.
export PATH=/work/main/.venv/bin:$PATH OMP_NUM_THREADS=1
for p in fr cs; do
  MULTI30K_DIR=/work/shared/data/multi30k examples/multi30k/prepare.sh en $p
  examples/learn_to_share.sh --data data-bin/multi30k.en-$p --run-dir runs/multi30k.en-$p \
    --updates 660 --warm-start --warm-updates 330 --max-iterations 2 -- --num-workers 0 &
done
wait
for p in fr cs; do
  examples/multi30k/test_bleu.sh data-bin/multi30k.en-$p $p runs/multi30k.en-$p/test-bleu \
    baseline=runs/multi30k.en-$p/iter0/checkpoints/checkpoint_best.pt \
    san-P1-warm=runs/multi30k.en-$p/iter1/checkpoints/checkpoint_best.pt
done
