#!/usr/bin/env bash
# Converged models, trained on a lent GPU in SLICES (en-de, pairs, tables, bench): each call of
# the device tool runs the whole learn-to-share loop for a slice's systems and packs ONE archive,
# $OUT/converged-SLICE.tar.gz; collect checks and unpacks archives here (those named and
# ../shared/converged's, in the order their calls started; all checked to unpack whole before
# any is), then writes the summary and the figures. campaign_run.py schedules the slices (its docstring: what each slice trains,
# how a call's time is shared, the environment it reads); results.md: how to call each slice.
#
#   docs/results/converged/run.sh SLICE [--dry-run]       # on the GPU machine, from the repo root
#   docs/results/converged/run.sh collect [ARCHIVE...]    # back here: check, unpack, summary, figures
#
# On the GPU machine first `source build/offline-bundle/activate.sh`.
set -euo pipefail

HERE=$(dirname "${BASH_SOURCE[0]}")
# This checkout's plugin runs, not the bundle's wheel of it: activate.sh installs one that may be
# older than the tree the device tool sent, and fairseq-san-* would import it.
# (CDPATH unset: with it, cd prints the folder it found, and PYTHONPATH would hold that line too)
export PYTHONPATH="$(CDPATH= cd -- "$HERE/../../.." > /dev/null && pwd)${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
exec python "$HERE/campaign_run.py" "${BASH_SOURCE[0]}" "$@"
