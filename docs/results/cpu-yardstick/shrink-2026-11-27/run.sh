#!/usr/bin/env bash
# The static decoder at natural lengths, before and after done sentences leave the batch
# (drop_done_sentences): fairseq-san-bench on the yardstick's 660-update SAN {6}/{6} checkpoint,
# fairseq's decoder against the static decoder (fp32), each engine in a process of its own,
# Multi30k En->De test, SENTENCES sentences in batches of 16, beams 4 and 20, natural lengths,
# 3 repeats. BEFORE: a checkout of the commit before the change (git worktree add BEFORE REV);
# both code bases run alternately, under fairseq's default output limit (max_len_b 200, what
# fairseq-generate does) and the campaign's (max_len_a 1.2, max_len_b 10), ROUNDS times.
#
#   BEFORE=/tmp/before docs/results/cpu-yardstick/shrink-2026-11-27/run.sh   (from the repo root)
set -euo pipefail
HERE=docs/results/cpu-yardstick/shrink-2026-11-27
CKPT=${CKPT:-runs/cpu-yardstick/quality-san-6-6/checkpoint_660.pt}
SENTENCES=${SENTENCES:-128} ROUNDS=${ROUNDS:-2}
AFTER=$PWD
mkdir -p "$HERE/logs"
lscpu | grep -E "Model name" > "$HERE/machine.txt"
for round in $(seq 1 "$ROUNDS"); do
  for limits in "default:--max-len-b 200" "campaign:--max-len-a 1.2 --max-len-b 10"; do
    for code in before after; do
      root=$([ "$code" = before ] && echo "$BEFORE" || echo "$AFTER")
      out=$HERE/logs/$code-${limits%%:*}-$round
      echo "$(date -u +%T) $out load $(cut -d' ' -f1 /proc/loadavg)"
      # shellcheck disable=SC2086  # the limits are several arguments
      (cd /tmp && PYTHONPATH=$root "$AFTER/.venv/bin/python" -m fairseq_san.cli.bench \
        --cpu --data "$AFTER/data-bin/multi30k.en-de" --subset test --batch-size 16 \
        --max-sentences "$SENTENCES" --beams 4 20 --modes natural --repeats 3 --no-profile \
        --cache-beams --no-ctranslate2 ${limits#*:} --system "san=$AFTER/$CKPT" \
        --system "san-static=$AFTER/$CKPT:{\"san_decoding\": \"static\"}" \
        --out-dir "$AFTER/$out" > "$AFTER/$out.log" 2>&1)
    done
  done
done
python3 - "$HERE/logs" <<'PY'
import json, sys
from pathlib import Path
print("| limits | code | round | beam | fairseq tok/s | static tok/s | static / fairseq | = fairseq |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for path in sorted(Path(sys.argv[1]).glob("*/results.json")):
    code, limits, round_ = path.parent.name.split("-")
    systems = json.loads(path.read_text())["systems"]
    for beam in (4, 20):
        f, s = (systems[n]["settings"][f"beam{beam}_natural"] for n in ("san", "san-static"))
        print(f"| {limits} | {code} | {round_} | {beam} | {f['tokens_per_second']:.0f} | "
              f"{s['tokens_per_second']:.0f} | {s['ratio_to_baseline']:.2f} | "
              f"{100 * s['agreement_with_fairseq'] if 'agreement_with_fairseq' in s else 100 * s['agreement_with_baseline']:.1f}% |")
PY
