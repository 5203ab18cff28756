#!/usr/bin/env bash
# The policy each theta learns from iteration 0's analysis of docs/results/en-de-loop (paper
# Table 3's first step). Decoder self-attention and encoder self-attention swept together;
# encoder-decoder theta 0.5. Run from the repository root; output: theta-sweep.txt.
# JS is runs/multi30k.en-de/iter0/analysis/js.json, committed as en-de-loop/iter0-analysis/js.json.
set -euo pipefail
export PATH=$PWD/.venv/bin:$PATH
JS=docs/results/en-de-loop/iter0-analysis/js.json
for theta in 0.40 0.42 0.43 0.44 0.46 0.50 0.52 0.55 0.60 0.68; do
  printf '%s\t' "$theta"
  fairseq-san-policy $JS --theta-decoder-self "$theta" \
    --theta-decoder-encdec 0.5 --theta-encoder-self "$theta" | sed -n 1p
done
echo "encoder-decoder theta swept, decoder self-attention theta 0.4:"
for theta in 0.5 0.6926 0.6928 0.6931; do
  printf "%s\t%s\n" "$theta" "$(fairseq-san-policy $JS \
    --theta-decoder-self 0.4 --theta-decoder-encdec "$theta" | sed -n 1p)"
done
