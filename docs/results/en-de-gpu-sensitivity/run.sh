# What ran on the lent GPU: one call of the device tool on 2026-11-26, 04:33-04:43 UTC, one NVIDIA
# H200 (torch 2.11.0+cu130, Python 3.12), carrying .gpu (see setup-lent-machine.sh) and
# data-bin/multi30k.en-de (made by examples/multi30k/prepare.sh en de on the CPU machine).
source docs/results/multi30k.en-de/gpu/setup-lent-machine.sh
docs/results/multi30k.en-de/gpu/train.sh > runs/gpu-train.out  # 12 trainings at once, 04:34:02-04:39:46 (train.out)
timeout 191 docs/results/multi30k.en-de/gpu/bench.sh  # the time left in the call
# Kept from the run: each system's loop.json, valid.json, policy.json (trained with),
# learned-policy.json and js.json; bench-beam4/ (complete); bench-beams-partial.log (the beam sweep,
# cut by the timeout during beam 4).
# Not obtained: test BLEU. Each system's test_bleu.sh step stopped at its first fairseq-generate,
# which used fairseq's default BLEU scorer, a C extension (libbleu) not built on the lent machine;
# test_bleu.sh now passes --scoring sacrebleu. The table in docs/results.md reports validation
# BLEU; the machine's time (15 minutes per task) allowed only the second call below.
# loop.json "parameters" were corrected afterwards by -3,993,600 (2 x 7800 x 256): the checkpoints
# saved on the GPU held the tied embeddings as three copies, and fairseq-san-loop counted them
# three times (fixed since: fairseq_san/cli/loop.py parameter_count).

# A second call (04:46-04:51 UTC, the same kind of machine, the task's last device minutes):
# baseline and SAN {6}/{6} again with seeds 2 and 3, for the run-to-run variation.
source docs/results/multi30k.en-de/gpu/setup-lent-machine.sh
for s in 2 3; do SEED=$s docs/results/multi30k.en-de/gpu/train.sh baseline san-6-6 > runs/gpu-seed$s.out & done
wait  # the call's limit (225 s) stopped it while test_bleu.sh decoded test1 (test_2017_flickr):
# kept: NAME-seedN/{loop,valid,js}.json and test-score.json (test_2016_flickr, 1,000 sentences).
