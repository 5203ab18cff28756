#!/usr/bin/env bash
# torch.compile of the static step against its eager step, on a CPU with AVX2 only: three runs at
# beam 4 (baseline and SAN {6}/{6}), two at beam 20 (SAN), each a process of its own, 2 threads.
#
#   docs/results/static-compile/avx2-2026-11-28/run.sh   (from the repository root, .venv/bin on PATH)
set -euo pipefail
OUT=${OUT:-docs/results/static-compile/avx2-2026-11-28}
COMMON=(--threads 2 --length 14 --rounds 5)
mkdir -p "$OUT/logs"
{ lscpu | grep -E "Model name|Flags"; nproc
  python -c "import torch; print('torch', torch.__version__, torch.backends.cpu.get_cpu_capability())"
} > "$OUT/machine.txt"

run() {  # run NAME COMMAND...: the command and its stdout to logs/NAME.log, the load around it
  local name=$1; shift
  echo "$name start: $(uptime)" >> "$OUT/load.log"
  { printf '$'; printf ' %s' "$@"; printf '\n'; "$@" 2> /dev/null; } > "$OUT/logs/$name.log"
  echo "$name end:   $(uptime)" >> "$OUT/load.log"
}

for repeat in 1 2 3; do
  run "beam4-$repeat" fairseq-san-bench steps "${COMMON[@]}" --beam 4 \
    --decoders fairseq static-fp32 static-fp32-fixed static-fp32-compile static-int8
done
for repeat in 1 2; do
  run "beam20-$repeat" fairseq-san-bench steps "${COMMON[@]}" --beam 20 --policies san-6-6 \
    --decoders fairseq static-fp32 static-fp32-compile static-int8
done
