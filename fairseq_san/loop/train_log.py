"""What a fairseq-train log says about a training: updates, wall time, speed, why it stopped, the
validation-loss curve; and several logs side by side (``fairseq-san-loop train-log``).

Reads logs written with ``--log-format json`` or ``simple`` (the recipes'; a resumed run appends
to the same log).
"""

import json
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_san.errors import UsageError, abbreviated
from fairseq_san.loop.summary import shown

# fairseq's JSON progress bar: "<time> | INFO | <tag> | {...}"
RECORD = re.compile(r"\| INFO \| (train_inner|train|valid) \| (\{.*\})\s*$")
# Its simple one: "<time> | INFO | train_inner | epoch 001:   25 / 117 loss=9.1, ..., wall=12",
# and at an epoch's end or a validation "... | train | epoch 001 | loss 7.1 | ... | wall 1".
SIMPLE = re.compile(r"\| INFO \| (train_inner|train|valid) \| epoch (\d+)(.*)$")
INNER_STAT = re.compile(r"(\w+)=([^,\s]+)")
STAT = re.compile(r"(\w+) (\S+)")
# The JSON bar names a train or valid record's stats after its tag; the simple bar does not.
STAT_PREFIX = {"train_inner": "", "train": "train_", "valid": "valid_"}
PARAMS = re.compile(r"num\. (?:shared )?model params: ([\d,]+)")
DONE = re.compile(r"done training in ([\d.]+) seconds")
# fairseq-train's word for a process that trains from scratch (no checkpoint to resume from).
FROM_SCRATCH = "No existing checkpoint found"
STOPS = (
    ("early stop since valid performance", "patience"),
    ("Stopping training due to cumulative_training_time", "wall cap"),
    ("Stopping training due to num_updates", "max update"),
)
CUMULATIVE = re.compile(r"cumulative_training_time: ([\d.]+) >")

@dataclass
class TrainLogFacts:
    """What the lines of a fairseq-train log have said so far (``read_train_log``)."""

    params: Optional[int] = None
    updates: Optional[int] = None
    epochs: Optional[int] = None
    stop: str = "unknown"
    # Each fairseq-train process's wall time (its wall meter starts again at 0 when it resumes),
    # and the cumulative training time fairseq said at a wall-cap stop (every process's).
    sessions: List[float] = field(default_factory=list)
    cumulative: Optional[float] = None
    curve: List[Tuple[int, float]] = field(default_factory=list)
    ups: List[float] = field(default_factory=list)
    wps: List[float] = field(default_factory=list)

    def read_line(self, line: str) -> None:
        """The model's size (said as each fairseq-train process starts), a start from scratch, a
        stop or a wall time, where ``line`` says one."""
        found = PARAMS.search(line)
        if found:
            self.params = int(found.group(1).replace(",", ""))
            if self.cumulative is not None:  # a wall-capped process resumed: it counts them all
                self.sessions, self.cumulative = [self.cumulative], None
            self.sessions.append(0.0)
        if FROM_SCRATCH in line:
            self.start_again()
        for marker, reason in STOPS:
            if marker in line:
                self.stop = reason
        found = DONE.search(line)
        if found:
            self.add_wall(float(found.group(1)))
        found = CUMULATIVE.search(line)
        if found:
            self.cumulative = float(found.group(1)) * 3600

    def start_again(self) -> None:
        """Forget what the log said before this process, which trains from scratch: an attempt
        that saved no checkpoint (a recipe reruns one with other arguments, appending to its
        log), whose model size, speed and wall time were reported as the training's."""
        fresh = TrainLogFacts(params=self.params, sessions=[0.0])
        self.__dict__.update(fresh.__dict__)

    def add_wall(self, seconds: float) -> None:
        """A wall time of the current fairseq-train process (its longest is its own)."""
        if not self.sessions:  # a log cut before its first process's start
            self.sessions.append(0.0)
        self.sessions[-1] = max(self.sessions[-1], seconds)

    def read_record(self, tag: str, record: dict) -> None:
        """A ``train_inner``, ``train`` or ``valid`` record (KeyError, ValueError, ... where it
        lacks what such a record has)."""
        self.epochs = record.get("epoch", self.epochs)
        if tag == "valid":
            point = (int(float(record["valid_num_updates"])), float(record["valid_loss"]))
            self.curve.append(point)
            self.updates = max(self.updates or 0, point[0])
            return
        prefix = "" if tag == "train_inner" else "train_"
        self.updates = max(self.updates or 0, int(float(record[f"{prefix}num_updates"])))
        self.add_wall(float(record[f"{prefix}wall"]))
        if tag == "train_inner":
            self.ups.append(float(record["ups"]))
            self.wps.append(float(record["wps"]))

    def summary(self) -> Dict[str, object]:
        # NaN (a diverged evaluation) is never the best: min() kept a NaN that came first
        numbers = [point for point in self.curve if not math.isnan(point[1])]
        best = min(numbers, key=lambda point: point[1]) if numbers else (None, None)
        return {
            "params": self.params,
            "updates": self.updates,
            "epochs": self.epochs,
            "wall_s": self.cumulative if self.cumulative is not None else (
                sum(self.sessions) if self.sessions else None),
            "stop": self.stop,
            "best_valid_loss": best[1],
            "best_updates": best[0],
            "valid_curve": self.curve,
            "updates_per_s": sum(self.ups) / len(self.ups) if self.ups else None,
            "tokens_per_s": sum(self.wps) / len(self.wps) if self.wps else None,
        }


def simple_record(tag: str, epoch: str, stats: str) -> dict:
    """A line of fairseq's simple progress bar as the JSON bar's record of the same stats."""
    if tag == "train_inner":
        pairs = INNER_STAT.findall(stats)
    else:
        pairs = [found.groups() for found in map(STAT.fullmatch, stats.split(" | ")) if found]
    return {"epoch": int(epoch), **{STAT_PREFIX[tag] + key: value for key, value in pairs}}


def find_record(line: str) -> Optional[Tuple[str, Callable[[], dict]]]:
    """(tag, a reader of its record) where ``line`` is a progress bar's train or valid line."""
    found = RECORD.search(line)
    if found:
        return found.group(1), lambda: json.loads(found.group(2))
    found = SIMPLE.search(line)
    if found:
        return found.group(1), lambda: simple_record(*found.groups())
    return None


def read_train_log(path: str) -> Dict[str, object]:
    """Facts of one fairseq-train log (``--log-format json`` or ``simple``; resumed runs append).

    ``wall_s`` is fairseq's own clock: the cumulative training time it said at a wall-cap stop
    (every process's, up to its last checkpoint), else each process's longest wall meter or
    "done training in", added up (a resumed process starts its meter again at 0: the longest
    alone left the others out); ``stop`` says what ended the training
    ("patience", "wall cap", "max update", or "unknown" for a run that was killed).
    """
    facts = TrainLogFacts()
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            facts.read_line(line)
            found = find_record(line)
            if not found:
                continue
            tag, record = found
            try:
                facts.read_record(tag, record())
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError,
                    RecursionError) as err:  # a number past a float's range, JSON nested deep
                raise UsageError(
                    f"{path} line {number}: not a fairseq-train {tag} record "
                    f"(--log-format json or simple): {type(err).__name__}: "
                    f"{abbreviated(str(err))}"
                ) from None
    return facts.summary()


def train_log_table(paths: Sequence[str]) -> str:
    """A markdown table of training logs side by side."""
    lines = [
        "| log | params | updates | wall | updates/s | tokens/s | stop | best valid loss | "
        "last valid loss |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for path in paths:
        log = read_train_log(path)
        if log["updates"] is None and log["params"] is None:
            raise UsageError(
                f"{path}: no fairseq-train record in it: not the log of fairseq-train "
                "--log-format json or simple (or a training stopped before its first update)"
            )
        last = log["valid_curve"][-1][1] if log["valid_curve"] else None
        lines.append(
            f"| {path} | {shown(log['params'], '{:,}')} | {shown(log['updates'])} | "
            f"{shown(log['wall_s'], '{:.0f} s')} | {shown(log['updates_per_s'], '{:.2f}')} | "
            f"{shown(log['tokens_per_s'], '{:.0f}')} | {log['stop']} | "
            f"{shown(log['best_valid_loss'], '{:.3f}')} | {shown(last, '{:.3f}')} |"
        )
    return "\n".join(lines) + "\n"
