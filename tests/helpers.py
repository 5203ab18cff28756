"""Shared helpers for the model, distributed and CLI tests of fairseq-san.

Models are built the way a user builds them: fairseq's training parser, ``parse_args_and_arch``
and ``TransformerSANModel.build_model`` with a small stand-in task that only exposes the two
dictionaries. Sizes are tiny so that every test runs in seconds on a CPU.
"""

import gzip
import importlib.util
import json
import os
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

import fairseq  # noqa: F401  (must come before fairseq_san so that the models register)
import fairseq_san.models  # noqa: F401  (registers transformer_san and its architectures)
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models.transformer import TransformerModel
from fairseq.sequence_generator import SequenceGenerator
from fairseq_san.models.transformer_san import TransformerSANModel
from warm_cli import warm_bin

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


# Tiny sizes of the language-model tests (fairseq flags).
TINY_LM = [
    "--decoder-embed-dim", "16",
    "--decoder-ffn-embed-dim", "32",
    "--decoder-attention-heads", "2",
    "--decoder-layers", "6",
]  # fmt: skip


def build_lm(
    argv: Sequence[str] = (),
    arch: str = "transformer_lm_san",
    dictionary: Optional[Dictionary] = None,
    seed: int = 1,
):
    """(language model in eval mode, args): ``arch`` of transformer_lm or transformer_lm_san,
    built as fairseq-train builds it, tiny sizes (``argv`` comes after them)."""
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.models.transformer_lm import base_lm_architecture

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        ["unused-data-dir", "--task", "language_modeling", "--arch", arch, *TINY_LM, *argv],
    )
    base_lm_architecture(args)  # fairseq-train applies transformer_lm's defaults from its dataclass
    torch.manual_seed(seed)
    task = StandInTask(dictionary or make_dictionary())
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
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


def assert_same_hypotheses(expected, actual, atol: float = 1e-4, rtol: float = 0.0) -> None:
    """Same n-best lists: identical tokens, scores within ``atol``, positional scores within
    ``atol`` + ``rtol`` of their size (float32 holds about 7 digits: a forced EOS at -27 may
    differ by 1.3e-5 between two orders of summation, as on an AVX2 CPU)."""
    assert len(expected) == len(actual)
    for sent, (nbest_a, nbest_b) in enumerate(zip(expected, actual)):
        assert len(nbest_a) == len(nbest_b), f"sentence {sent}: n-best sizes differ"
        for rank, (a, b) in enumerate(zip(nbest_a, nbest_b)):
            where = f"sentence {sent}, hypothesis {rank}"
            assert a["tokens"].tolist() == b["tokens"].tolist(), where
            score_a, score_b = float(a["score"]), float(b["score"])
            assert score_a == score_b or abs(score_a - score_b) <= atol, where  # -inf == -inf
            torch.testing.assert_close(
                a["positional_scores"], b["positional_scores"], atol=atol, rtol=rtol, msg=where
            )


def single_process_base_layers(monkeypatch) -> None:
    """Let fairseq's BaseLayer (--base-layers) be built without a process group: one worker."""
    from fairseq.modules import base_layer

    monkeypatch.setattr(base_layer.distributed_utils, "get_data_parallel_world_size", lambda: 1)
    monkeypatch.setattr(base_layer.distributed_utils, "get_data_parallel_rank", lambda: 0)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --- the SAN model tests: policies, logits, the paper's equations ----------------------------

# Tolerance of the model tests' logits comparisons.
ATOL = 1e-5


def policy_argv(
    decoder_self: Optional[str] = None,
    decoder_encdec: Optional[str] = None,
    encoder_self: Optional[str] = None,
    share: Optional[str] = None,
) -> List[str]:
    argv = []
    if decoder_self:
        argv += ["--san-decoder-self-policy", decoder_self]
    if decoder_encdec:
        argv += ["--san-decoder-encdec-policy", decoder_encdec]
    if encoder_self:
        argv += ["--san-encoder-self-policy", encoder_self, "--encoder-layers", "6"]
    if share:
        argv += ["--san-encdec-share", share]
    return argv


# Every block list appears for decoder self- and encoder-decoder attention; [2,4] for the encoder;
# two configurations share encoder-decoder weights only (Table 4, "shared V: no").
POLICIES = {
    "self15-encdec33-enc24": policy_argv("1,5", "3,3", "2,4"),
    "self33-encdec15": policy_argv("3,3", "1,5"),
    "self222-encdec6-weights": policy_argv("2,2,2", "6", share="weights"),
    "self6-encdec111111": policy_argv("6", "1,1,1,1,1,1"),
    "self111111-encdec222-weights": policy_argv("1,1,1,1,1,1", "2,2,2", share="weights"),
    "self15-encdec33-weights": policy_argv("1,5", "3,3", share="weights"),
    "self33-encdec15-prenorm": policy_argv("3,3", "1,5", "2,4")
    + ["--encoder-normalize-before", "--decoder-normalize-before"],
}


AAN = ["--decoder-self-attention-type", "aan"]


def decoder_logits(model, src_tokens, src_lengths, prev) -> Tensor:
    with torch.no_grad():
        return model(src_tokens, src_lengths, prev)[0]


def incremental_logits(model, src_tokens, src_lengths, prev, state=None) -> Tensor:
    """Decoder outputs computed one token at a time with an incremental state."""
    state = {} if state is None else state
    with torch.no_grad():
        encoder_out = model.encoder(src_tokens, src_lengths=src_lengths)
        steps = [
            model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0]
            for t in range(prev.size(1))
        ]
    assert all(step.size(1) == 1 for step in steps)
    return torch.cat(steps, dim=1)


def max_diff(a: Tensor, b: Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


# --- an independent implementation of the SAN equations ---------------------------------------


def reference_leaders(blocks: Optional[Sequence[int]], num_layers: int) -> List[int]:
    """Layer whose attention weights each layer uses: the first of its block."""
    if blocks is None:
        return list(range(num_layers))
    leaders = []
    for size in blocks:
        leaders += [len(leaders)] * size
    return leaders


def attention_block(
    leader_class: type, follower_class: type, dropout: float = 0.0, follower_keeps: Tuple = ()
):
    """(fairseq's self-attention, a ``leader_class`` leader of its weights, a last follower of
    ``follower_class`` given its weights whose names start with ``follower_keeps``, the block
    they share), seeded: a leader and a follower checked against fairseq's own attention."""
    from fairseq.modules import MultiheadAttention

    from fairseq_san.modules.shared_attention import BlockShare

    torch.manual_seed(0)
    block = BlockShare()
    shape = dict(embed_dim=16, num_heads=4, self_attention=True, dropout=dropout)
    reference = MultiheadAttention(**shape)
    leader = leader_class(block=block, **shape)
    leader.load_state_dict(reference.state_dict())
    follower = follower_class(block=block, releases_block=True, **shape)
    if follower_keeps:
        kept = reference.state_dict().items()
        follower.load_state_dict({k: v for k, v in kept if k.startswith(follower_keeps)})
    return reference, leader, follower, block


def _heads(mha, x: Tensor) -> Tensor:
    """(len, batch, embed) -> (batch * heads, len, head_dim)."""
    return x.contiguous().view(x.size(0), -1, mha.head_dim).transpose(0, 1)


def _weights(mha, query: Tensor, key: Tensor, mask: Optional[Tensor], key_pad: Optional[Tensor]):
    """Eq. 1: S = softmax(Q K^T / sqrt(d_k)), with an additive mask and key padding."""
    q = _heads(mha, mha.q_proj(query) * mha.head_dim**-0.5)
    k = _heads(mha, mha.k_proj(key))
    logits = torch.bmm(q, k.transpose(1, 2))
    if mask is not None:
        logits = logits + mask
    if key_pad is not None:
        bsz = key_pad.size(0)
        logits = logits.view(bsz, -1, logits.size(1), logits.size(2))
        logits = logits.masked_fill(key_pad[:, None, None, :], float("-inf"))
        logits = logits.view(-1, logits.size(2), logits.size(3))
    return torch.softmax(logits, dim=-1)


def _output(mha, context: Tensor, length: int, bsz: int) -> Tensor:
    merged = context.transpose(0, 1).contiguous().view(length, bsz, mha.embed_dim)
    return mha.out_proj(merged)


def _ffn(layer, x: Tensor) -> Tensor:
    return layer.fc2(torch.relu(layer.fc1(x)))


def reference_forward(model, src_tokens, src_lengths, prev, policy: Dict, share: str = "output"):
    """The model's logits recomputed from its parameters with the equations of section 3.2.

    Post-norm layers (fairseq's default) or pre-norm (``--*-normalize-before``: each sub-layer
    reads its normalized input, each stack ends with its own layer norm). A following layer of a
    self-attention block uses the leader's S with its own V (Eq. 4); a following encoder-decoder
    layer uses the leader's A = S V (Eq. 5), or with ``share="weights"`` the leader's S with its
    own V.
    """
    encoder, decoder = model.encoder, model.decoder
    with torch.no_grad():
        # Encoder.
        pad = src_tokens.eq(encoder.padding_idx)
        x = encoder.embed_scale * encoder.embed_tokens(src_tokens)
        x = x + encoder.embed_positions(src_tokens)
        x = (x * (1 - pad.unsqueeze(-1).type_as(x))).transpose(0, 1)
        leaders = reference_leaders(policy.get("encoder_self"), len(encoder.layers))
        shared = {}
        for index, layer in enumerate(encoder.layers):
            attn, first = layer.self_attn, leaders[index] == index

            def encoder_self(h, attn=attn, index=index, first=first):
                if first:
                    shared[index] = _weights(attn, h, h, None, pad)
                context = torch.bmm(shared[leaders[index]], _heads(attn, attn.v_proj(h)))
                return _output(attn, context, h.size(0), h.size(1))

            x = _residual(layer, x, layer.self_attn_layer_norm, encoder_self)
            x = _residual(layer, x, layer.final_layer_norm, lambda h: _ffn(layer, h))
        enc = x if encoder.layer_norm is None else encoder.layer_norm(x)

        # Decoder.
        length, bsz = prev.size(1), prev.size(0)
        causal = torch.triu(torch.full((length, length), float("-inf")), 1)
        y = decoder.embed_scale * decoder.embed_tokens(prev) + decoder.embed_positions(prev)
        y = y.transpose(0, 1)
        self_leaders = reference_leaders(policy.get("decoder_self"), len(decoder.layers))
        cross_leaders = reference_leaders(policy.get("decoder_encdec"), len(decoder.layers))
        self_s, cross_s, cross_a = {}, {}, {}
        for index, layer in enumerate(decoder.layers):

            def decoder_self(h, attn=layer.self_attn, index=index):
                if self_leaders[index] == index:
                    self_s[index] = _weights(attn, h, h, causal, None)
                context = torch.bmm(self_s[self_leaders[index]], _heads(attn, attn.v_proj(h)))
                return _output(attn, context, length, bsz)

            def encoder_decoder(h, attn=layer.encoder_attn, index=index):
                leader = cross_leaders[index]
                if leader == index:
                    cross_s[index] = _weights(attn, h, enc, None, pad)
                    cross_a[index] = torch.bmm(cross_s[index], _heads(attn, attn.v_proj(enc)))
                    context = cross_a[index]
                elif share == "output":
                    context = cross_a[leader]  # Eq. 5: A^{m+i} = A^m
                else:
                    context = torch.bmm(cross_s[leader], _heads(attn, attn.v_proj(enc)))
                return _output(attn, context, length, bsz)

            y = _residual(layer, y, layer.self_attn_layer_norm, decoder_self)
            y = _residual(layer, y, layer.encoder_attn_layer_norm, encoder_decoder)
            y = _residual(layer, y, layer.final_layer_norm, lambda h: _ffn(layer, h))
        if decoder.layer_norm is not None:
            y = decoder.layer_norm(y)
        return decoder.output_layer(y.transpose(0, 1))


def _residual(layer, x: Tensor, norm, body) -> Tensor:
    """A residual sub-layer: ``x + body(norm(x))`` (pre-norm) or ``norm(x + body(x))``."""
    return x + body(norm(x)) if layer.normalize_before else norm(x + body(x))


# --- beam search ------------------------------------------------------------------------------

BEAM_BATCH = [6, 3, 8, 4, 5]  # source lengths; left-padded batch as fairseq builds it


def favour_eos(model, bonus: float):
    """Add ``bonus`` to the eos logit so that untrained models finish some sentences early;
    returns the hook handle (None for no bonus)."""
    if not bonus:
        return None
    eos = model.decoder.dictionary.eos()

    def hook(module, inputs, logits):
        logits = logits.clone()
        logits[..., eos] += bonus
        return logits

    return model.decoder.output_projection.register_forward_hook(hook)


EOS_BONUSES = (1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0)


def staggering_eos_bonus(model, src_tokens, src_lengths, beam: int, **kwargs) -> float:
    """The first eos bonus with which beam search removes finished sentences from its batch
    while others go on (sentences finishing at different steps); installed on ``model``."""
    for bonus in EOS_BONUSES:
        handle = favour_eos(model, bonus)
        orders = record_reorders(model)
        generate(model, model.decoder.dictionary, src_tokens, src_lengths, beam=beam, **kwargs)
        del model.decoder.reorder_incremental_state_scripting  # back to the class method
        if orders and shrank(orders, src_tokens.size(0) * beam):
            return bonus
        handle.remove()
    raise AssertionError("no eos bonus makes sentences finish at different steps")


def shrank(orders: List[Tensor], full: int) -> bool:
    """Whether beam search removed finished sentences from its batch at some step."""
    return min(order.numel() for order in orders) < full


def record_reorders(model) -> List[Tensor]:
    """Record the new_order of every reorder_incremental_state_scripting call on ``model``."""
    orders: List[Tensor] = []
    original = model.decoder.reorder_incremental_state_scripting

    def recording(incremental_state, new_order):
        orders.append(new_order.clone())
        return original(incremental_state, new_order)

    model.decoder.reorder_incremental_state_scripting = recording
    return orders


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


# fairseq-san-bench's stand-in: reads its command line as the real one does (a bad --system is
# one error line), appends one JSON line to $BENCH_RECORD per call (its argv; the systems'
# overrides, their fairseq twins, --fp16 and --out-dir), and writes an empty results.json where
# the benchmark would; exit 3 where --out-dir's name is $FAIL_OUT. ``returned_before``: the
# results that $OUT/gpu-steps.tar.gz (a lent GPU's call cut short) held when it was called.
BENCH_STAND_IN = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path

argv = sys.argv[1:]
record = {{"argv": argv}}
archive = Path(os.environ.get("OUT", "."), "gpu-steps.tar.gz")
if "OUT" in os.environ and archive.exists():
    import tarfile
    with tarfile.open(archive) as packed:
        record["returned_before"] = sorted(n for n in packed.getnames() if n.endswith(".json"))
if argv[:1] != ["steps"]:
    from fairseq_san.benchmark.config import fairseq_twins
    from fairseq_san.cli.bench import build_parser, config_from_args

    parser = build_parser()
    try:
        config = config_from_args(parser.parse_args(argv), "stand-in")
    except ValueError as err:
        parser.error(str(err))
    record.update(systems={{s.name: s.overrides for s in config.systems}},
                  twins=fairseq_twins(config.systems), fp16=config.fp16, out=config.out_dir)
    if Path(config.out_dir).name == os.environ.get("FAIL_OUT"):
        sys.exit(3)
    Path(config.out_dir).mkdir(parents=True)
    (Path(config.out_dir) / "results.json").write_text("{{}}")
with open(os.environ["BENCH_RECORD"], "a") as handle:
    handle.write(json.dumps(record) + "\\n")
"""


def stand_in(path: Path, script: str) -> Path:
    """``script`` written at ``path``, executable: a command's stand-in, for a PATH that has
    its folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)
    return path


def bench_calls(record: Path) -> List[Dict]:
    """The calls of ``BENCH_STAND_IN`` that wrote ``record`` (none where it was never called)."""
    lines = record.read_text().splitlines() if record.exists() else []
    return [json.loads(line) for line in lines]


def printed_commands(output: str, program: str) -> List[List[str]]:
    """argv of every command a recipe printed (a ``+ ...`` line) that runs ``program``: its first
    word's file name, or that of the script ``python`` or ``bash`` runs; a ``timeout -k K S``
    before it is dropped."""
    found = []
    for line in output.splitlines():
        if not line.startswith("+ "):
            continue
        argv = shlex.split(line[2:])
        if argv[:1] == ["timeout"]:
            argv = argv[4:]
        names = [os.path.basename(word) for word in argv[:2]]
        if names[:1] == [program] or (names[0] in ("python", "bash") and names[1:] == [program]):
            found.append(argv)
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (not a zombie: dead, its parent gone, and not reaped by an
    init that reaps nothing, as in a container)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def drawn_figures(monkeypatch) -> list:
    """The figures ``fairseq_san.plots`` saves, kept open instead of written."""
    from fairseq_san import plots

    drawn = []
    monkeypatch.setattr(plots, "save", lambda fig, path: drawn.append(fig))
    monkeypatch.setattr(plots._pyplot(), "close", lambda fig: None)
    return drawn


def cli_env() -> Dict[str, str]:
    """The commands' environment: one thread, ``.venv/bin`` on PATH, and before it the warm
    stand-ins of fairseq's commands (``warm_cli``; not with FAIRSEQ_SAN_TEST_COLD=1)."""
    env = dict(os.environ)
    env.update(CLI_ENV)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    warm = warm_bin(env)
    if warm is not None:
        env["PATH"] = f"{warm}{os.pathsep}{env['PATH']}"
    return env


def command_path(command: str) -> Path:
    """``.venv/bin/COMMAND``, or its warm stand-in where it has one."""
    warm = warm_bin(cli_env())
    if warm is not None and (warm / command).exists():
        return warm / command
    return BIN / command


# What a light command's start-up should not pay for (seconds on a 2-core VM).
HEAVY_MODULES = ("fairseq", "numpy", "torch")


def heavy_modules_imported(program: str) -> List[str]:
    """The ``HEAVY_MODULES`` a fresh Python has imported once ``program`` (which must succeed)
    has run."""
    report = f"import sys\nprint(*[m for m in {HEAVY_MODULES!r} if m in sys.modules])\n"
    result = subprocess.run([sys.executable, "-c", program + "\n" + report], cwd=REPO,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def run_cli(
    command: str,
    *args: str,
    timeout: int = 240,
    input: Optional[str] = None,
    cwd: Optional[Path] = None,
) -> subprocess.CompletedProcess:
    """Run ``.venv/bin/<command> args`` from ``cwd`` (the repository root); text output captured."""
    return subprocess.run(
        [str(command_path(command)), *args],
        cwd=cwd or REPO,
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
            [str(command_path(argv[0])), *argv[1:]],
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


class Hypothesis(NamedTuple):
    """A hypothesis of fairseq-generate's output: its H- line and its P- line."""

    text: str
    score: float
    positional_scores: List[float]


def best_hypotheses(stdout: str) -> Dict[int, Hypothesis]:
    """{sentence id: its best (first) hypothesis} of fairseq-generate's output."""
    heads: Dict[int, Tuple[str, float]] = {}
    positional: Dict[int, List[float]] = {}
    for line in stdout.splitlines():
        fields = line.split("\t")
        if line.startswith("H-"):
            heads.setdefault(int(fields[0][2:]), (fields[2], float(fields[1])))
        elif line.startswith("P-"):
            positional.setdefault(int(fields[0][2:]), [float(x) for x in fields[1].split()])
    return {i: Hypothesis(text, score, positional.get(i, [])) for i, (text, score) in heads.items()}


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


def lm_train_argv(data: Path, save_dir: Path, *extra: str, max_update: int = 30) -> List[str]:
    """fairseq-train arguments for a tiny transformer_lm_san on one side of the corpus."""
    return [
        str(data),
        "--user-dir", "fairseq_san",
        "--task", "language_modeling_san", "--sample-break-mode", "eos",
        "--tokens-per-sample", "16",
        "--arch", "transformer_lm_san", *TINY_LM,
        "--optimizer", "adam", "--lr", "0.005",
        "--max-tokens", "500", "--max-update", str(max_update),
        "--cpu", "--seed", "1", "--num-workers", "0",
        "--save-dir", str(save_dir), "--no-epoch-checkpoints",
        "--log-format", "simple", "--log-interval", "10",
        *extra,
    ]  # fmt: skip


def preprocess_lm(text: Path, destdir: Path) -> Path:
    """fairseq-preprocess --only-source of ``text``.{train,valid,test} files (one prefix)."""
    result = run_cli(
        "fairseq-preprocess", "--only-source",
        "--trainpref", f"{text}/train.src", "--validpref", f"{text}/valid.src",
        "--testpref", f"{text}/test.src", "--destdir", str(destdir), "--workers", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return destdir


# --- the recipes (examples/): scripts, a toy Multi30k ---------------------------------------

PREPARE = REPO / "examples" / "multi30k" / "prepare.sh"


LM_PREPARE = REPO / "examples" / "lm" / "prepare.sh"


LOOP = REPO / "examples" / "learn_to_share.sh"
LM_LOOP = REPO / "examples" / "learn_to_share_lm.sh"


TEST_BLEU = REPO / "examples" / "multi30k" / "test_bleu.sh"


# A toy "Multi30k": sentences of 3-8 words out of 30, German = word-by-word translation.
EN_WORDS = (
    "a man woman dog cat boy girl child people group red blue green small big old young "
    "street park water ball grass tree walks runs sits plays holds looks stands"
).split()


DE_WORDS = (
    "ein mann frau hund katze junge maedchen kind leute gruppe rot blau gruen klein gross alt "
    "jung strasse park wasser ball gras baum geht rennt sitzt spielt haelt schaut steht"
).split()


# 21 validation sentences: not a multiple of fairseq's default --required-batch-size-multiple (8).
# Few sentences to decode: an untrained model decodes each to the length limit.
SPLITS = {"train": 400, "val": 21, "test_2016_flickr": 20, "test_2017_flickr": 20}


VOCAB_SIZE = 100


# fairseq-train flags after -- for the loop: a tiny transformer_san, 2+6 layers.
TINY_LOOP_TRAIN = [
    "--encoder-layers", "2", "--decoder-layers", "6",
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--max-tokens", "2000", "--warmup-updates", "5", "--save-interval-updates", "10",
    "--cpu",
]  # fmt: skip


def run_script(script: Path, *args: str, env: Optional[Dict[str, str]] = None, timeout: int = 400):
    """Run a recipe with bash from the repository root; stdout and stderr captured."""
    return subprocess.run(
        ["bash", str(script), *args],
        cwd=REPO,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def output_of(result: subprocess.CompletedProcess) -> str:
    return result.stdout + result.stderr


def loop_args(data: Path, run_dir: Path, *options: str, updates: int = 20) -> List[str]:
    return [
        "--data", str(data), "--run-dir", str(run_dir),
        "--updates", str(updates), "--arch", "transformer_san",
        "--theta-self", "0", "--theta-encdec", "0",
        *options,
        "--", *TINY_LOOP_TRAIN,
    ]  # fmt: skip


def snapshot(directory: Path) -> Dict[str, Tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of every file below ``directory`` (links not followed)."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            found[str(path.relative_to(directory))] = (stat.st_size, stat.st_mtime_ns)
    return found


def write_fake_multi30k(directory: Path, seed: int = 0) -> Path:
    """{train,val,test_2016_flickr,test_2017_flickr}.{en,de}.gz like the multi30k repository."""
    assert len(EN_WORDS) == len(DE_WORDS) == 30
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for split, size in SPLITS.items():
        sides = {"en": [], "de": []}
        for _ in range(size):
            words = [rng.randrange(30) for _ in range(rng.randint(3, 8))]
            for lang, vocab in (("en", EN_WORDS), ("de", DE_WORDS)):
                sides[lang].append(" ".join(vocab[w] for w in words).capitalize() + " .")
        for lang, lines in sides.items():
            with gzip.open(directory / f"{split}.{lang}.gz", "wt", encoding="utf-8") as out:
                out.write("".join(line + "\n" for line in lines))
    return directory


def prepare_env(raw: Path) -> Dict[str, str]:
    env = cli_env()
    env.update(MULTI30K_DIR=str(raw), VOCAB_SIZE=str(VOCAB_SIZE))
    return env


ONE_BLOCK = {"decoder_self": [6], "decoder_encdec": [6], "encoder_self": None}


def run_loop(data: Path, run_dir: Path, *options: str, updates: int = 20):
    return run_script(LOOP, *loop_args(data, run_dir, *options, updates=updates))


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (a test's rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stand_in_fairseq_train(folder: Path, code: str, name: str = "fairseq-train") -> Path:
    """An executable named fairseq-train (or ``name``) in ``folder`` that runs the Python
    ``code`` (what fairseq-san-cpu-ranks starts, fast): its path."""
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / name
    program.write_text(f"#!{sys.executable}\n{code}")
    program.chmod(0o755)
    return program


def load_script(relative: str):
    """A script of the repository (``scripts/...py``, not a package module) as a module."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_builder():
    """scripts/build_offline_bundle.py as a module."""
    return load_script("scripts/build_offline_bundle.py")


def calls_of(monkeypatch, owner, method: str) -> list:
    """The arguments of every call of ``owner.method`` from now on (it still runs)."""
    calls = []
    original = getattr(owner, method)

    def spy(self, *args):
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(owner, method, spy)
    return calls


# --- CUDA graph capture, on the CPU ----------------------------------------------------------


def counting_backend(graphs: list):
    """A torch.compile backend standing in for inductor (whose compilation takes minutes on the
    CPU): records each graph dynamo hands it in ``graphs`` and runs it as traced."""

    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    return backend


class NoHostSync(torch.utils._python_dispatch.TorchDispatchMode):
    """Fails on every operation that reads a device value back to the host (``item``, ``bool``,
    ``nonzero``, boolean-mask indexing, ``tolist``): what a CUDA graph cannot capture, checked
    on the CPU."""

    SYNCING = ("aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name in self.SYNCING or (name == "aten::index" and self.masks(args[1])):
            raise AssertionError(f"{name} in a captured body")
        return func(*args, **(kwargs or {}))

    @staticmethod
    def masks(indices) -> bool:
        boolean = (torch.bool, torch.uint8)
        return any(index is not None and index.dtype in boolean for index in indices)

    def __enter__(self):
        def refuse(tensor):
            raise AssertionError("tolist in a captured body")

        self.tolist, torch.Tensor.tolist = torch.Tensor.tolist, refuse
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self.tolist
        return super().__exit__(*exc)


class RecordedGraph(NoHostSync):
    """What a CUDA graph keeps of a captured body, on the CPU: every operator the body ran, with
    the tensors it ran on (no host sync among them: NoHostSync). ``replay`` runs those operators
    again on the same tensors without the Python around them, so what the body decided on the
    host at capture (a Python number, a tensor an attribute held then) stays as it was, as in a
    graph; an operator's new output is copied into the tensor it returned at capture (a graph's
    outputs live at fixed addresses)."""

    def __init__(self) -> None:
        super().__init__()
        self.operators: List[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = super().__torch_dispatch__(func, types, args, kwargs)
        self.operators.append((func, args, kwargs or {}, output))
        return output

    def replay(self) -> None:
        for func, args, kwargs, recorded in self.operators:
            output = func(*args, **kwargs)
            for new, old in zip(tree_leaves(output), tree_leaves(recorded)):
                if isinstance(old, Tensor) and not same_memory(new, old):
                    old.copy_(new)


def same_memory(first: Tensor, second: Tensor) -> bool:
    """Whether two tensors are the same view of the same memory."""
    return (first.data_ptr(), first.shape, first.stride()) == (
        second.data_ptr(), second.shape, second.stride()
    )  # fmt: skip


def recording_capture(captures: list, fail: bool = False, record: bool = True):
    """A stand-in for ``graphs.capture_cuda_graph`` on the CPU: warms ``body`` up as the GPU one
    does, records one run of it (``RecordedGraph``, appended to ``captures``) and returns its
    replay; ``fail``: capture raises, as CUDA can. ``record`` False: replays by calling ``body``
    again (torch.compile runs no compiled code under a dispatch mode such as the recording)."""

    def capture(body, warmup, restore):
        for _ in range(warmup):
            body()
            restore()
        if record:
            graph = RecordedGraph()
            with graph:
                body()
            replay = graph.replay
        else:
            replay = body
        captures.append(replay)
        if fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        return replay

    return capture


def graphed_generator(
    generator_class, dictionary, model, capture, execution: str = "graph",
    compile_backend="inductor", **settings,
):  # fmt: skip
    """A static generator (``generator_class``) of ``execution`` (``graph`` or ``compile-graph``:
    CUDA only) on the CPU, with a stand-in capture: its bookkeeping (static buffers, caches and
    searches kept per shape, keys) runs as on a GPU."""
    from fairseq_san.static_decoding.execution import EXECUTIONS

    row = EXECUTIONS[execution]
    built = "compile" if row.compiles else "fixed"  # the same step, packed or not, on the CPU
    generator = generator_class([model], dictionary, execution=built, **settings)
    generator.execution = row
    runners = generator.runners(compile_backend, capture)
    generator.run_first_step, generator.run_step, generator.run_search_step = runners
    return generator
