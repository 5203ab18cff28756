#!/usr/bin/env bash
# Does the sliced CPU step (the default) run as fast as before the fixed layout? The step timer of the
# commit before it (ee79187, extracted to $OLD) and of this one, alternated in processes of their
# own, REPEATS times; compare each row's speed-up over fairseq (whose code did not change).
#
#   OLD=/tmp/old docs/results/static-compile/cpu_path.sh     (from the repository root)
set -euo pipefail
OUT=docs/results/static-compile
OLD=${OLD:?a checkout of ee79187: mkdir -p /tmp/old && git archive ee79187 | tar -x -C /tmp/old}
REPEATS=${REPEATS:-3}
ARGS=(steps --threads 1 --length 14 --rounds 5 --beam 4 --decoders fairseq static-fp32 static-bf16-full static-int8)
mkdir -p "$OUT/cpu-path"
for repeat in $(seq 1 "$REPEATS"); do
  for version in before after; do
    root=$PWD; [ "$version" = before ] && root=$OLD
    echo "$version-$repeat start: $(uptime)" >> "$OUT/cpu-path/load.log"
    (cd "$root" && PYTHONPATH=$root python -m fairseq_san.cli.bench "${ARGS[@]}") \
      > "$OUT/cpu-path/$version-$repeat.log" 2>/dev/null
  done
done
python "$OUT/summarize.py" cpu-path > "$OUT/cpu-path/table.md"
