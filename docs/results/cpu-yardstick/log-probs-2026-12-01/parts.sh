#!/usr/bin/env bash
# The parts of a beam-20 step (../profile-2026-11-30/parts.py: timers around the calls inside
# whole decodes), code trees alternating, ROUNDS rounds (3), each a process of its own:
# NAME=TREE each, put first on PYTHONPATH.
#
#   docs/results/cpu-yardstick/log-probs-2026-12-01/parts.sh NAME=TREE [NAME=TREE ...] > parts.txt
cd "$(dirname "$0")/../../../.."
for round in $(seq "${ROUNDS:-3}"); do
  for tree in "$@"; do
    for decoder in static-int8 static-bf16-full; do
      echo "== round $round ${tree%%=*} $(date -u +%H:%M:%S)"
      PYTHONPATH=${tree#*=} .venv/bin/python docs/results/cpu-yardstick/profile-2026-11-30/parts.py \
        "$decoder" 20 2>&1 | grep -E "ms a step|ms$"
    done
  done
done
