"""The table of docs/results/lm-multi30k/results.md from the runs, the per-sentence losses (nll/)
and the generation speeds (speed/) that run.sh wrote.

    python docs/results/lm-multi30k/table.py RUNS_DIR RESULTS_DIR > table.md
    python docs/results/lm-multi30k/table.py speed RESULTS_DIR     # the speed table alone

Test perplexity per seed, its mean and standard deviation (statistics.stdev, over seeds), and a
paired bootstrap over test sentences of system minus baseline (per-sentence losses averaged over
each system's seeds; 2000 resamples, seed 1): the difference, its 95% interval and a two-sided p
(sentence sampling only: the spread between seeds is not in it); and the mean difference to the
baseline trained with the same seeds.
Speed (a second table): generated tokens per second with fairseq's generator and with the static
decoder (each round's file, speed/NAME-DECODING-bBATCH-rROUND.json, holds the fastest of its
passes), the median over the interleaved rounds; the speed-ups by the project's rule: the median
over rounds of the per-round ratio (round r over round r, timed side by side), the rounds' range
in brackets, to the baseline with the same decoder and to the same system with fairseq's; and how
many of the static decoder's greedy outputs are fairseq's (every round decodes the same tokens).
Cache bytes per token: fp32 keys and values a decoding step keeps, all layers (SAN followers
keep V, KV followers nothing).
"""

import argparse
import glob
import json
import math
import os
import random
import re
import statistics

from fairseq_san.benchmark.timing import median, per_repeat_ratios
from fairseq_san.checkpoints import load_state
from fairseq_san.loop.summary import checkpoint_facts
from fairseq_san.policy import block_leaders, format_blocks, load_policy
from systems import SYSTEMS, run_dir

BASELINE = "baseline"
DECODINGS = ("fairseq", "static")
BATCHES = (1, 16)
RESAMPLES = 2000


def best_checkpoint(directory: str) -> str:
    found = glob.glob(os.path.join(directory, "**", "checkpoint_best.pt"), recursive=True)
    return found[0] if found else ""


def stopped_by(directory: str) -> str:
    with open(os.path.join(directory, "train.log"), encoding="utf-8", errors="replace") as log:
        text = log.read()
    if "early stop since valid performance" in text:
        return "patience"
    if "stop_time_hours" in text and "Stopping training due to cumulative_training_time" in text:
        return "time cap"
    return "max updates"


def cache_bytes(model_cfg) -> int:
    """fp32 bytes of the keys and values kept per generated token, all layers."""
    layers, dim = model_cfg.decoder_layers, model_cfg.decoder_embed_dim
    blocks = load_policy(model_cfg.san_policy or "{}").get("decoder_self")
    leaders = block_leaders(blocks, layers)
    follower = {"weights": 1, "kv": 0}[getattr(model_cfg, "san_self_share", "weights")]
    vectors = sum(2 if index == leader else follower for index, leader in enumerate(leaders))
    return vectors * dim * 4


def perplexity(nll, tokens) -> float:
    return math.exp(sum(nll) / sum(tokens))


def bootstrap(system, baseline, tokens):
    """(difference, low, high, p) of perplexity system - baseline over resampled sentences."""
    rng = random.Random(1)
    n = len(tokens)
    differences = []
    for _ in range(RESAMPLES):
        rows = [rng.randrange(n) for _ in range(n)]
        words = sum(tokens[i] for i in rows)
        differences.append(
            math.exp(sum(system[i] for i in rows) / words)
            - math.exp(sum(baseline[i] for i in rows) / words)
        )
    differences.sort()
    below = sum(d <= 0 for d in differences) / RESAMPLES
    return (
        perplexity(system, tokens) - perplexity(baseline, tokens),
        differences[int(0.025 * RESAMPLES)],
        differences[int(0.975 * RESAMPLES) - 1],
        min(1.0, 2 * min(below, 1 - below)),
    )


def mean_losses(runs):
    """Per-sentence losses averaged over seeds."""
    return [statistics.fmean(values) for values in zip(*(run["nll"] for run in runs))]


def round_speeds(results: str) -> dict:
    """{(system, decoding, batch): {round: its speed JSON}} from RESULTS/speed/."""
    speeds: dict = {}
    for path in glob.glob(os.path.join(results, "speed", "*.json")):
        match = re.match(r"(.+)-(fairseq|static)-b(\d+)-r(\d+)\.json$", os.path.basename(path))
        name, decoding, batch, round_ = match.groups()
        with open(path, encoding="utf-8") as handle:
            speeds.setdefault((name, decoding, int(batch)), {})[int(round_)] = json.load(handle)
    return speeds


def any_timing(speeds: dict) -> dict:
    """One timing's JSON (they all name the same processor and threads); {} where none."""
    return next((timing for rounds in speeds.values() for timing in rounds.values()), {})


def tokens_per_second(rounds: dict) -> list:
    return [rounds[r]["tokens_per_second"] for r in sorted(rounds)]


def speed_up(rounds: dict, reference: dict) -> str:
    """The median over rounds of the per-round ratio, with the rounds' range: "1.30 (1.14-1.33)"."""
    ratios = per_repeat_ratios(tokens_per_second(rounds), tokens_per_second(reference))
    if len(ratios) == 1 or len(set(ratios)) == 1:
        return f"{median(ratios):.2f}"
    return f"{median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def decoder_self_policy(model_cfg):
    """The block sizes of a checkpoint's decoder self-attention policy (None: no sharing)."""
    return load_policy(model_cfg.san_policy or "{}").get("decoder_self")


def system_rows(runs: str, results: str):
    """(rows of the perplexity table, per-sentence losses per system, perplexity per seed)."""
    rows, losses, by_seed, tokens = [], {}, {}, []
    for name in SYSTEMS:
        seeds = []
        for seed in (1, 2, 3):
            nll = os.path.join(results, "nll", f"{name}-s{seed}.json")
            if os.path.exists(nll):
                with open(nll, encoding="utf-8") as handle:
                    seeds.append((seed, json.load(handle)))
        if not seeds:
            continue
        tokens = seeds[0][1]["tokens"]
        losses[name] = mean_losses([run for _, run in seeds])
        ckpt = best_checkpoint(run_dir(runs, name, seeds[0][0]))
        model_cfg = load_state(ckpt)["cfg"]["model"]
        ppls = [perplexity(run["nll"], tokens) for _, run in seeds]
        by_seed[name] = dict(zip((seed for seed, _ in seeds), ppls))
        rows.append({
            "name": name,
            "policy": decoder_self_policy(model_cfg),
            "share": model_cfg.san_self_share,
            "seeds": [seed for seed, _ in seeds],
            "ppls": ppls,
            "params": checkpoint_facts(ckpt)["parameters"],
            "cache": cache_bytes(model_cfg),
            "updates": [checkpoint_facts(best_checkpoint(run_dir(runs, name, s)))["num_updates"]
                        for s, _ in seeds],
            "stopped": [stopped_by(run_dir(runs, name, s)) for s, _ in seeds],
        })  # fmt: skip
    return rows, losses, by_seed, tokens


def print_perplexity_table(rows, losses, by_seed, tokens) -> None:
    print("| system | policy | share | seeds | test ppl (mean ± sd) | Δ ppl vs baseline [95% CI], p "
          "| Δ ppl, same seeds | params | cache B/token | best at update | stopped by |")
    print("| --- | --- | --- | --- | ---: | --- | ---: | ---: | ---: | --- | --- |")
    for row in rows:
        ppls = row["ppls"]
        sd = f" ± {statistics.stdev(ppls):.2f}" if len(ppls) > 1 else ""
        base = losses.get(BASELINE)
        if row["name"] == BASELINE or base is None:
            delta = same_seeds = "-"
        else:
            diff, low, high, p = bootstrap(losses[row["name"]], base, tokens)
            delta = f"{diff:+.2f} [{low:+.2f}, {high:+.2f}], p={p:.3f}"
            pairs = [ppl - by_seed[BASELINE][seed]
                     for seed, ppl in by_seed[row["name"]].items() if seed in by_seed[BASELINE]]
            same_seeds = f"{statistics.fmean(pairs):+.2f}" if pairs else "-"
        print(f"| {row['name']} | {format_blocks(row['policy'])} | {share_text(row)} | "
              f"{','.join(map(str, row['seeds']))} | {statistics.fmean(ppls):.2f}{sd} | {delta} | "
              f"{same_seeds} | {row['params']:,} | {row['cache']} | "
              f"{','.join(map(str, row['updates']))} | {','.join(row['stopped'])} |")  # fmt: skip


def share_text(row) -> str:
    return "-" if row["policy"] is None else row["share"]


def print_speed_table(speeds) -> None:
    print("| system | decoder | tok/s b1 | x baseline | x fairseq's | tok/s b16 | x baseline | "
          "x fairseq's | greedy output = fairseq's |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in SYSTEMS:
        if not any(key[0] == name for key in speeds):
            continue  # not timed (the loop's KV iteration 2: trained after the speed runs)
        for decoding in DECODINGS:
            cells = []
            for batch in BATCHES:
                rounds = speeds.get((name, decoding, batch))
                if rounds is None:
                    cells += ["-", "-", "-"]
                    continue
                cells.append(f"{median(tokens_per_second(rounds)):.0f}")
                for other in ((BASELINE, decoding, batch), (name, "fairseq", batch)):
                    reference = speeds.get(other)
                    cells.append(speed_up(rounds, reference) if reference else "-")
            print(f"| {name} | {decoding} | {' | '.join(cells)} | "
                  f"{same_outputs(speeds, name, decoding)} |")


def same_outputs(speeds, name: str, decoding: str) -> str:
    """How many greedy outputs of ``decoding`` equal fairseq's generator's (both batches)."""
    if decoding == "fairseq":
        return "-"
    same = total = 0
    for batch in BATCHES:
        ours, theirs = speeds.get((name, decoding, batch)), speeds.get((name, "fairseq", batch))
        if ours and theirs:
            ours, theirs = ours[min(ours)], theirs[min(theirs)]
            same += sum(a == b for a, b in zip(ours["outputs"], theirs["outputs"]))
            total += len(theirs["outputs"])
    return f"{same}/{total}" if total else "-"


def print_speed_header(speeds) -> None:
    timing = any_timing(speeds)
    processor, threads = timing.get("processor", "-"), timing.get("threads", "-")
    print(f"Processor: {processor}, {threads} thread(s). Greedy generation (prompts of 16 tokens, "
          "64 generated), each system and decoder in its own process:\n")  # fmt: skip


def main(runs: str, results: str) -> None:
    rows, losses, by_seed, tokens = system_rows(runs, results)
    speeds = round_speeds(results)
    processor = any_timing(speeds).get("processor", "-")
    print(f"Processor: {processor}; test: test_2016_flickr, {len(tokens)} sentences, "
          f"{sum(tokens)} tokens.\n")  # fmt: skip
    print_perplexity_table(rows, losses, by_seed, tokens)
    print("\nGreedy generation (prompts of 16 tokens, 64 generated), each system and decoder in "
          "its own process:\n")
    print_speed_table(speeds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", metavar="RUNS_DIR|speed", help="'speed': the speed table alone")
    parser.add_argument("results", metavar="RESULTS_DIR")
    args = parser.parse_args()
    if args.runs == "speed":
        timings = round_speeds(args.results)
        print_speed_header(timings)
        print_speed_table(timings)
    else:
        main(args.runs, args.results)
