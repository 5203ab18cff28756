#!/usr/bin/env bash
# `make demo` (examples/demo.sh): the learn-to-share loop on Multi30k En->De at demo scale (100
# updates per iteration), then the baseline and the learned SAN model decoded side by side.
# Run from the repository root. MULTI30K_DIR=DIR reads a local copy of Multi30k; unset, the data
# is downloaded. Committed here: runs/demo/loop.md (loop.md) and runs/demo/bench/results.{md,json}
# (bench/) of the run of 2026-11-26 (2 CPU cores).
set -euo pipefail
make demo MULTI30K_DIR="${MULTI30K_DIR:-}"
