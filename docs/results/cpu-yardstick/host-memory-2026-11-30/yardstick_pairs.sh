#!/usr/bin/env bash
# The yardstick's speed runs (docs/results/cpu-yardstick/run.sh, all its systems) at beam 20
# only (BEAMS: others, e.g. "4 20"), from the code before the change (BEFORE: a worktree of
# 53503cb) and with it (AFTER: a worktree of 5901ee1), each put first on PYTHONPATH,
# alternating, ROUNDS rounds; reports in OUT/before-N and OUT/after-N. (The runs here were made
# with the change checked out instead of AFTER.)
#
#   docs/results/cpu-yardstick/host-memory-2026-11-30/yardstick_pairs.sh BEFORE AFTER OUT [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../../../.."
BEFORE=$1 AFTER=$2 OUT=$3 ROUNDS=${4:-2}
export PATH=$PWD/.venv/bin:$PATH MULTI30K_DIR=${MULTI30K_DIR:-../shared/data/multi30k}
export BEAMS=${BEAMS:-20}
for round in $(seq "$ROUNDS"); do
  PYTHONPATH=$BEFORE OUT=$OUT/before-$round docs/results/cpu-yardstick/run.sh > /dev/null 2>&1
  PYTHONPATH=$AFTER OUT=$OUT/after-$round docs/results/cpu-yardstick/run.sh > /dev/null 2>&1
done
