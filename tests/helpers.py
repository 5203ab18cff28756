"""Shared helpers for the model, distributed and CLI tests of fairseq-san.

Models are built the way a user builds them: fairseq's training parser, ``parse_args_and_arch``
and ``TransformerSANModel.build_model`` with a small stand-in task that only exposes the two
dictionaries. Sizes are tiny so that every test runs in seconds on a CPU.
"""

import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

import fairseq  # noqa: F401  (must come before fairseq_san so that the models register)
import fairseq_san.models  # noqa: F401  (registers transformer_san and its architectures)
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models.transformer import TransformerModel
from fairseq.sequence_generator import SequenceGenerator
from fairseq_san.models.transformer_san import TransformerSANModel

# The test models are tiny: one thread is faster than several and avoids oversubscribing the
# CPU cores when test files or other jobs run side by side.
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# Model sizes of the tiny test models (fairseq flags).
TINY = [
    "--encoder-embed-dim", "16",
    "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32",
    "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "2",
    "--decoder-attention-heads", "2",
    "--encoder-layers", "2",
    "--decoder-layers", "6",
]  # fmt: skip


class StandInTask:
    """The part of a fairseq task that ``build_model`` uses: the two dictionaries."""

    def __init__(self, dictionary: Dictionary, target: Optional[Dictionary] = None):
        self.source_dictionary = dictionary
        self.target_dictionary = target if target is not None else dictionary


def make_dictionary(num_symbols: int = 24) -> Dictionary:
    """A fairseq Dictionary of exactly ``num_symbols`` entries (4 specials + words)."""
    dictionary = Dictionary()
    for index in range(num_symbols - len(dictionary)):
        dictionary.add_symbol(f"w{index}")
    assert len(dictionary) == num_symbols
    return dictionary


def parse_args(arch: str, argv: Sequence[str] = ()):
    """fairseq's training arguments for ``arch`` (translation task), as a user gets them."""
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser, ["unused-data-dir", "--task", "translation", "--arch", arch, *argv]
    )


def build(
    argv: Sequence[str] = (),
    arch: str = "transformer_san",
    dictionary: Optional[Dictionary] = None,
    seed: int = 1,
    tiny: bool = True,
):
    """(model in eval mode, args) for ``arch`` built with TransformerSANModel.build_model.

    ``argv`` comes after the tiny sizes so that it can override them.
    """
    args = parse_args(arch, (list(TINY) if tiny else []) + list(argv))
    torch.manual_seed(seed)
    model = TransformerSANModel.build_model(args, StandInTask(dictionary or make_dictionary()))
    return model.eval(), args


def build_fairseq_transformer(
    argv: Sequence[str] = (), dictionary: Optional[Dictionary] = None, seed: int = 1
):
    """fairseq's own ``transformer`` (TransformerModel.build_model), tiny sizes, eval mode."""
    args = parse_args("transformer", list(TINY) + list(argv))
    torch.manual_seed(seed)
    model = TransformerModel.build_model(args, StandInTask(dictionary or make_dictionary()))
    return model.eval(), args


def source_batch(
    dictionary: Dictionary, lengths: Sequence[int], seed: int = 0, left_pad: bool = True
):
    """(src_tokens, src_lengths): random words + eos, padded (on the left, as fairseq does)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths) + 1
    tokens = torch.full((len(lengths), width), dictionary.pad(), dtype=torch.long)
    for row, length in enumerate(lengths):
        words = torch.randint(dictionary.nspecial, len(dictionary), (length,), generator=generator)
        sentence = torch.cat([words, torch.tensor([dictionary.eos()])])
        if left_pad:
            tokens[row, width - length - 1 :] = sentence
        else:
            tokens[row, : length + 1] = sentence
    return tokens, torch.tensor([length + 1 for length in lengths])


def target_prefixes(dictionary: Dictionary, batch: int, length: int, seed: int = 0):
    """prev_output_tokens: eos followed by ``length - 1`` random words, no padding."""
    generator = torch.Generator().manual_seed(seed)
    words = torch.randint(
        dictionary.nspecial, len(dictionary), (batch, length - 1), generator=generator
    )
    return torch.cat([torch.full((batch, 1), dictionary.eos()), words], dim=1)


def generator(model, dictionary: Dictionary, beam: int, **kwargs) -> SequenceGenerator:
    return SequenceGenerator([model], dictionary, beam_size=beam, **kwargs)


def generate(model, dictionary, src_tokens, src_lengths, beam: int, **kwargs):
    """fairseq's SequenceGenerator n-best lists for a batch."""
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    with torch.no_grad():
        return generator(model, dictionary, beam, **kwargs).generate([model], sample)


def assert_same_hypotheses(expected, actual, atol: float = 1e-4) -> None:
    """Same n-best lists: identical tokens, scores and positional scores within ``atol``."""
    assert len(expected) == len(actual)
    for sent, (nbest_a, nbest_b) in enumerate(zip(expected, actual)):
        assert len(nbest_a) == len(nbest_b), f"sentence {sent}: n-best sizes differ"
        for rank, (a, b) in enumerate(zip(nbest_a, nbest_b)):
            where = f"sentence {sent}, hypothesis {rank}"
            assert a["tokens"].tolist() == b["tokens"].tolist(), where
            assert abs(float(a["score"]) - float(b["score"])) <= atol, where
            torch.testing.assert_close(
                a["positional_scores"], b["positional_scores"], atol=atol, rtol=0, msg=where
            )


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --- corpus and command-line helpers ---------------------------------------------------------

CLI_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}

WORDS = [f"tok{i}" for i in range(20)]


def write_corpus(directory: Path, seed: int = 0) -> Path:
    """A tiny parallel corpus, target = source reversed; files {train,valid,test}.{src,tgt}."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for split, size in (("train", 300), ("valid", 30), ("test", 20)):
        sources = [
            [rng.choice(WORDS) for _ in range(rng.randint(3, 8))] for _ in range(size)
        ]
        (directory / f"{split}.src").write_text("".join(" ".join(s) + "\n" for s in sources))
        (directory / f"{split}.tgt").write_text(
            "".join(" ".join(reversed(s)) + "\n" for s in sources)
        )
    return directory


def cli_env() -> Dict[str, str]:
    env = dict(os.environ)
    env.update(CLI_ENV)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_cli(
    command: str, *args: str, timeout: int = 240, input: Optional[str] = None
) -> subprocess.CompletedProcess:
    """Run ``.venv/bin/<command> args`` from the repository root; text output captured."""
    return subprocess.run(
        [str(BIN / command), *args],
        cwd=REPO,
        env=cli_env(),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_parallel(commands: Dict[str, Sequence[str]], timeout: int = 300) -> Dict[str, str]:
    """Run ``.venv/bin`` commands side by side from the repository root; name -> output.

    Each command is ``[program, *args]``; its stdout and stderr go to one temporary file. Every
    command must exit 0: the first to fail (or the timeout) stops the others.
    """
    logs = {name: tempfile.TemporaryFile("w+") for name in commands}
    processes = {
        name: subprocess.Popen(
            [str(BIN / argv[0]), *argv[1:]],
            cwd=REPO,
            env=cli_env(),
            stdout=logs[name],
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, argv in commands.items()
    }
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in processes.values()) and time.monotonic() < deadline:
            if any(p.returncode not in (None, 0) for p in processes.values()):
                break
            time.sleep(0.2)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    outputs = {}
    for name, log in logs.items():
        log.seek(0)
        outputs[name] = log.read()
        log.close()
    for name, process in processes.items():
        code = process.returncode
        assert code == 0, f"{name} exited {code}:\n{outputs[name][-4000:]}"
    return outputs


def fairseq_generate(data: Path, checkpoint: Path, *extra: str) -> subprocess.CompletedProcess:
    """fairseq-generate on the test subset with beam 4, sacrebleu, every sentence kept.

    Outputs are kept short (``--max-len-a 1 --max-len-b 5``) since a barely trained model does not
    stop by itself; ``--required-batch-size-multiple 1`` because fairseq drops a last batch that
    is not a multiple of it (default 8; facebookresearch/fairseq#5036).
    """
    return run_cli(
        "fairseq-generate", str(data),
        "--user-dir", "fairseq_san",
        "--path", str(checkpoint),
        "--gen-subset", "test",
        "--beam", "4", "--batch-size", "32",
        "--required-batch-size-multiple", "1",
        "--max-len-a", "1", "--max-len-b", "5",
        "--scoring", "sacrebleu",
        "--cpu",
        *extra,
    )  # fmt: skip


def preprocess(raw: Path, destdir: Path) -> Path:
    result = run_cli(
        "fairseq-preprocess",
        "--source-lang", "src", "--target-lang", "tgt",
        "--trainpref", str(raw / "train"),
        "--validpref", str(raw / "valid"),
        "--testpref", str(raw / "test"),
        "--destdir", str(destdir),
        "--joined-dictionary",
        "--workers", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return destdir


def train_argv(data: Path, save_dir: Path, max_update: int = 40, extra: Sequence[str] = ()):
    """fairseq-train arguments for a tiny transformer_san on the synthetic corpus."""
    return [
        str(data),
        "--user-dir", "fairseq_san",
        "--task", "translation",
        "--arch", "transformer_san",
        "--encoder-layers", "2", "--decoder-layers", "6",
        "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
        "--share-all-embeddings",
        "--optimizer", "adam", "--lr", "0.005",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10",
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--dropout", "0.1",
        "--max-tokens", "1000",
        "--max-update", str(max_update),
        "--cpu",
        "--seed", "1",
        "--num-workers", "0",
        "--save-dir", str(save_dir),
        "--no-epoch-checkpoints",
        "--disable-validation",
        "--log-format", "simple", "--log-interval", "10",
        *extra,
    ]  # fmt: skip
