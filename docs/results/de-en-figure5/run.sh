#!/usr/bin/env bash
# Paper Figure 5 on Multi30k De->En: JS between layers of the baseline against training steps.
# The checkpoints every 100 updates of runs/multi30k.de-en/iter0 (docs/results/de-en-loop) were
# kept (hard links into runs/multi30k.de-en/snapshots) while it trained; each is analysed on the
# first 500 validation sentences. Run from the repository root.
set -euo pipefail
export PATH=$PWD/.venv/bin:$PATH
R=runs/multi30k.de-en
for ckpt in $R/snapshots/checkpoint_*_*.pt $R/iter0/checkpoints/checkpoint_last.pt; do
  out=$R/figure5/$(basename "$ckpt" .pt)
  [ -f "$out/js.json" ] || fairseq-validate data-bin/multi30k.de-en --user-dir fairseq_san \
    --task translation_san --path "$ckpt" --valid-subset valid --max-tokens 4096 \
    --san-analysis-dir "$out" --san-analysis-max-sentences 500 > "$out.log" 2>&1
done
fairseq-san-plot-js $R/figure5/*/ --reference-layer 4 --layers 5 6 -o $R/figure5/js_vs_steps.png
# Committed: $R/figure5/js_vs_steps.png and each $R/figure5/CHECKPOINT/js.json as CHECKPOINT.js.json.
