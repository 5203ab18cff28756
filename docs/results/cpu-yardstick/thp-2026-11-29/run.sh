#!/usr/bin/env bash
# A/B/A/B: the yardstick's "all" benchmark without and with torch's THP_MEM_ALLOC_ENABLE=1.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
export PATH=$PWD/.venv/bin:$PATH  # after docs/results/cpu-yardstick/run.sh trained its two models
OUT=docs/results/cpu-yardstick/thp-2026-11-29
B=runs/cpu-yardstick/baseline/checkpoint_last.pt S=runs/cpu-yardstick/san-6-6/checkpoint_last.pt
ST='"san_decoder": "static"'
for round in 1 2; do
  for variant in default thp; do
    env=(); [ $variant = thp ] && env=(THP_MEM_ALLOC_ENABLE=1)
    dir=$OUT/$variant-$round; mkdir -p $dir
    echo "== $variant-$round $(date -u +%H:%M:%S)"
    env "${env[@]}" fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 128 --batch-size 16 --beams 4 20 --modes fixed --cache-beams --repeats 3 \
      --system baseline=$B --baseline baseline --out-dir $dir --system san-6-6=$S \
      --system "baseline-static=$B:{$ST}" --system "san-6-6-static=$S:{$ST}" \
      --system "san-6-6-static-bf16=$S:{$ST, \"san_decoder_precision\": \"bf16\"}" \
      --system "san-6-6-static-bf16-fp32-logits=$S:{$ST, \"san_decoder_precision\": \"bf16-fp32-logits\"}" \
      --system "san-6-6-static-int8=$S:{$ST, \"san_decoder_precision\": \"int8\"}" \
      --system "san-6-6-static-bf16-full=$S:{$ST, \"san_decoder_precision\": \"bf16-full\"}" \
      --system "baseline-static-int8=$B:{$ST, \"san_decoder_precision\": \"int8\"}" > $dir/bench.log 2>&1
  done
done
echo "== done $(date -u +%H:%M:%S)"
