#!/usr/bin/env bash
# The static decoder's step on the CPU: eager sliced (shipped), eager fixed layout, torch.compile
# of the fixed layout (inductor), at fp32, bf16-full and int8; and torchao's int8 against the
# shipped torch.ao int8. Each run is a process of its own; runs interleaved, REPEATS times.
#
#   docs/results/static-compile/run.sh        (from the repository root; REPEATS=3 THREADS=1)
set -euo pipefail
OUT=docs/results/static-compile
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-1}
COMMON=(--threads "$THREADS" --length 14 --rounds 5)
mkdir -p "$OUT/logs"
{ lscpu | grep -E "Model name|Flags"; nproc; python -c "import torch, torchao; print('torch', torch.__version__, 'torchao', torchao.__version__)" 2>/dev/null; } > "$OUT/machine.txt"

run() {  # run NAME COMMAND...: stdout to logs/NAME.log, the load average before and after
  local name=$1; shift
  echo "$name start: $(uptime)" >> "$OUT/load.log"
  "$@" > "$OUT/logs/$name.log" 2> "/tmp/static-compile-$name.err" \
    || { tail -20 "/tmp/static-compile-$name.err"; exit 1; }
  echo "$name end:   $(uptime)" >> "$OUT/load.log"
}

for repeat in $(seq 1 "$REPEATS"); do
  run "fp32-beam4-$repeat" fairseq-san-bench steps "${COMMON[@]}" --beam 4 \
    --decoders fairseq static-fp32 static-fp32-fixed static-fp32-compile
  run "reduced-beam4-$repeat" fairseq-san-bench steps "${COMMON[@]}" --beam 4 --policies san-6-6 \
    --decoders fairseq static-bf16-full static-bf16-full-compile static-int8
  run "fp32-beam20-$repeat" fairseq-san-bench steps "${COMMON[@]}" --beam 20 --policies san-6-6 \
    --decoders fairseq static-fp32 static-fp32-compile
  run "torchao-$repeat" python "$OUT/torchao_int8.py" --threads "$THREADS"
done
python "$OUT/summarize.py" > "$OUT/table.md"
