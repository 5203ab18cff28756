# Paper Figure 5 on Multi30k De->En: JS between layers of the baseline against training steps.
# The checkpoints every 100 updates of runs/multi30k.de-en/iter0 were kept (hard links) while it
# trained; each is analysed on the first 500 validation sentences.
export PATH=/work/main/.venv/bin:$PATH TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
R=runs/multi30k.de-en
for ckpt in $R/snapshots/checkpoint_*_*.pt $R/iter0/checkpoints/checkpoint_last.pt; do
  out=$R/figure5/$(basename "$ckpt" .pt)
  [ -f "$out/js.json" ] || fairseq-validate data-bin/multi30k.de-en --user-dir fairseq_san \
    --task translation_san --path "$ckpt" --valid-subset valid --max-tokens 4096 \
    --san-analysis-dir "$out" --san-analysis-max-sentences 500 > "$out.log" 2>&1
done
fairseq-san-plot-js $R/figure5/*/ --reference-layer 4 --layers 5 6 -o $R/figure5/js_vs_steps.png
