#!/usr/bin/env bash
# Run-to-run variation: the En->De baseline and SAN {6}/{6} trained again with seeds 2 and 3 (the
# budget and settings of docs/results/en-de-gpu-sensitivity), on a lent GPU: a second call of the
# device tool, 2026-11-26 04:46-04:51 UTC, one NVIDIA H200, the task's last device minutes. Run from
# the repository root with fairseq-san's console commands on PATH (offline GPU machine:
# scripts/build_offline_bundle.py).
set -uo pipefail
mkdir -p runs
for s in 2 3; do
  SEED=$s docs/results/en-de-gpu-sensitivity/train.sh baseline san-6-6 > runs/gpu-seed$s.out &
done  # seeds.out: their output
wait  # the call's limit (225 s) stopped it while test_bleu.sh decoded test1 (test_2017_flickr)
# Committed, per system: runs/gpu/NAME-seedN/loop.json, iter0/policy.json, iter1/policy.json (as
# learned-policy.json), iter0/analysis/js.json, iter0/valid.json (as score-valid.json) and
# runs/gpu/test-bleu/NAME-seedN/test/score.json (as score-test.json: test_2016_flickr, 1,000 sentences).
