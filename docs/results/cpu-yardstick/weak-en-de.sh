# Sourced (from the repository root) by the run.sh of int8-batch-2026-12-01 and
# static-options-2026-12-01, which decode the same weak En->De checkpoint (update 330 of the
# recipe: BLEU about 4, far from converged, which magnifies differences). Sets DATA and
# CHECKPOINT, preparing the data and training the checkpoint into RUN (default runs/int8-batch)
# where they are missing; defines differing.
RUN=${RUN:-runs/int8-batch}
DATA=data-bin/multi30k.en-de
CHECKPOINT=$RUN/iter0/checkpoints/checkpoint_3_330.pt
examples/multi30k/prepare.sh en de "$DATA"
[ -f "$CHECKPOINT" ] || examples/learn_to_share.sh --data "$DATA" \
  --run-dir "$RUN" --updates 660 --max-iterations 1 -- --warmup-updates 300 \
  --save-interval-updates 330 --num-workers 0

differing() {  # A B: how many hypothesis lines (id and text) of fairseq-generate's output A B lacks
  diff <(grep '^H-' "$1" | cut -f1,3 | sort) <(grep '^H-' "$2" | cut -f1,3 | sort) \
    | grep -c '^<' || true
}
