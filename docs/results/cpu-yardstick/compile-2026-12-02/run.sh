#!/usr/bin/env bash
# The compiled static step (fixed layout, inductor) at bf16-full against the eager step at its
# best precisions, interleaved in one process per beam (fairseq-san-bench steps), twice at beam 4.
# Usage, from the repository root on an otherwise idle machine:
#   PATH=$PWD/.venv/bin:$PATH docs/results/cpu-yardstick/compile-2026-12-02/run.sh
set -euo pipefail
out=docs/results/cpu-yardstick/compile-2026-12-02
for run in beam4-1:4 beam4-2:4 beam20:20; do
    fairseq-san-bench steps --beam "${run#*:}" --length 14 --rounds 5 --policies san-6-6 \
        --decoders static-int8 static-bf16-full static-bf16-full-compile static-fp32 \
        > "$out/${run%%:*}.txt" 2> "$out/${run%%:*}.log"
done
