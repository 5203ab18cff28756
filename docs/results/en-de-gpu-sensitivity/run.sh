#!/usr/bin/env bash
# The En->De sensitivity runs (paper Tables 3-6) on a lent GPU: one call of the device tool on
# 2026-11-26, 04:33-04:43 UTC, one NVIDIA H200 (torch 2.11.0+cu130, Python 3.12), carrying
# data-bin/multi30k.en-de (made by examples/multi30k/prepare.sh en de on the CPU machine). Run from
# the repository root with fairseq-san's console commands on PATH; on a GPU machine without a
# package registry, set them up with the offline bundle of scripts/build_offline_bundle.py.
set -euo pipefail
mkdir -p runs
docs/results/en-de-gpu-sensitivity/train.sh > runs/gpu-train.out  # 12 trainings at once, 04:34:02-04:39:46 (train.out)
# The same call then ran the GPU benchmark: docs/results/en-de-gpu-bench/run.sh.
# Committed, per system: runs/gpu/NAME/loop.json, iter0/policy.json (trained with),
# iter1/policy.json (as learned-policy.json), iter0/analysis/js.json and iter0/valid.json (as
# score-valid.json).
# Not obtained: test BLEU. Each system's test_bleu.sh step stopped at its first fairseq-generate,
# which used fairseq's default BLEU scorer, a C extension (libbleu) not built on the lent machine
# (hence "exit 1" in train.out); test_bleu.sh now passes --scoring sacrebleu. results.md reports
# validation BLEU.
# loop.json "parameters" were corrected afterwards by -3,993,600 (2 x 7800 x 256): the checkpoints
# saved on the GPU held the tied embeddings as three copies, and fairseq-san-loop counted them
# three times (fixed since: fairseq_san/cli/loop.py parameter_count).
