#!/usr/bin/env bash
# The step timer, A/B, as roles-2026-11-29/run.sh: the code before (BEFORE, a worktree on
# PYTHONPATH: git worktree add /tmp/old 133e94c) and this checkout's, alternating, three rounds,
# each a process of its own, beams 4 and 20.
exec "$(dirname "$0")/../roles-2026-11-29/run.sh"
