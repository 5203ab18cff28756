"""Sharing policies for SAN (Xiao et al., IJCAI 2019, section 3.3).

A sharing policy {pi_1, ..., pi_N} splits an M-layer stack bottom-up into
N blocks of adjacent layers, with sum(pi_i) == M. The first layer of each
block (its *leader*) computes attention weights; the other layers of the
block reuse the leader's weights instead of computing their own.

Each attention kind (``KINDS``) has its own policy; ``None`` means the kind
is not shared. This module is pure Python so that reading, writing and
learning policies needs neither torch nor fairseq.
"""

import json
import math
import os
import re
from decimal import Decimal
from typing import Callable, NamedTuple, Optional, Sequence, Tuple, Union

from fairseq_san.errors import UsageError, abbreviated
from fairseq_san.files import parsed_json, read_json, write_text


class Kind(NamedTuple):
    """An attention kind: the stack whose layers it governs (its queries come from there), the
    attention module of each layer, the stack its keys come from, and its name in prose."""

    stack: str
    module: str
    keys: str
    title: str

    @property
    def attends_to_fixed_memory(self) -> bool:
        """Whether every layer attends over the same keys and values (another stack's output):
        then a block may share the attention's whole output A (Eq. 5), not only S (Eq. 4)."""
        return self.keys != self.stack


# The attention kinds, each with its own policy: a new kind is one new row.
KIND_TABLE = {
    "decoder_self": Kind("decoder", "self_attn", "decoder", "decoder self-attention"),
    "decoder_encdec": Kind("decoder", "encoder_attn", "encoder", "encoder-decoder attention"),
    "encoder_self": Kind("encoder", "self_attn", "encoder", "encoder self-attention"),
}
KINDS = tuple(KIND_TABLE)
# The stack and the attention module of its layers that each kind of policy governs.
KIND_MODULES = {name: (kind.stack, kind.module) for name, kind in KIND_TABLE.items()}

LN2 = math.log(2.0)  # the largest JS divergence, in nats (the unit of fairseq_san.js)

# Largest JS divergence accepted in a matrix. JS is bounded by ln 2 in nats
# (what we compute) but by 1 in bits, and the paper's Figure 2b holds values
# above ln 2 (0.7986, 0.7295), so it was not computed in nats. Accepting
# [0, 1] admits both units; mu may then be negative, which only makes a
# block less likely to qualify.
JS_MAX = 1.0

TOLERANCE = 1e-6

PLACES = 4  # decimals of a theta shown; more where fewer would say something untrue

POLICY_FILE_LIMIT = 1_000_000  # bytes: a policy file holds a few block sizes per kind

Blocks = list[int]
Policy = dict[str, Blocks]
BlocksValue = Union[str, Sequence[int], None]

_BLOCKS_STRING = re.compile(r"\s*\d+\s*(,\s*\d+\s*)*")
# The paper's notation, as fairseq-san-policy prints a policy: "{1,5}".
_BRACES = re.compile(r"\{(" + _BLOCKS_STRING.pattern + r")\}")
_BRACED_BLOCKS = re.compile(r"\s*" + _BRACES.pattern + r"\s*")
# One kind of fairseq-san-policy's summary line, "decoder_self {1,5}  decoder_encdec none".
_SUMMARY_ENTRY = re.compile(r"(\w+)\s+(" + _BRACES.pattern + r"|none)\s*")


class PolicyError(UsageError):
    """A bad policy, JS matrix or threshold; the message names the problem."""


def _label(kind: str) -> str:
    """How an error message names the policy being parsed."""
    return "policy" if kind == "policy" else f"{kind} policy"


def _check_kind(kind: str) -> None:
    """Reject kinds other than ``KINDS``, listing the valid ones."""
    if kind not in KINDS:
        raise PolicyError(
            f'unknown attention kind "{kind}" (valid kinds: {", ".join(KINDS)})'
        )


def parse_blocks(value: BlocksValue, kind: str = "policy") -> Optional[Blocks]:
    """Parse block sizes from a flag string ("1,5") or a list of ints.

    None and "none" mean no sharing and give None, so a command-line flag can switch sharing
    off for a kind that a policy file shares. An empty text is refused: it is what an unset
    shell variable gives (``--san-decoder-self-policy "$BLOCKS"``), and it unshared the kind
    unsaid.
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text == "":
            raise PolicyError(
                f'{_label(kind)} "{value}" is empty: give block sizes such as "1,5", or "none" '
                "to share nothing"
            )
        if text.lower() == "none":
            return None
        shown = f'"{abbreviated(value)}"'
        bare = unbraced_blocks(text)
        if bare is not None:
            without = f'write the block sizes without braces: "{bare}"'
            raise PolicyError(f"{_label(kind)} {shown}: {without}")
        valid = _BLOCKS_STRING.fullmatch(text) is not None
        blocks = [int(size) for size in text.split(",")] if valid else []
    elif isinstance(value, (list, tuple)):
        shown = abbreviated(str(list(value)))
        if not value:
            raise PolicyError(f"{_label(kind)} {shown}: needs at least one block")
        # bool is an int subclass, but True is not a block size.
        valid = all(type(size) is int for size in value)
        blocks = list(value)
    else:
        raise PolicyError(
            f'{_label(kind)} {value!r}: expected a list of block sizes or a string like "1,5"'
        )
    if not valid or min(blocks) <= 0:
        raise PolicyError(f"{_label(kind)} {shown}: block sizes must be positive integers")
    return blocks


def validate_blocks(blocks: Blocks, num_layers: int, kind: str) -> Blocks:
    """Check that the blocks cover the kind's layer stack exactly (sum pi_i = M)."""
    _check_kind(kind)
    stack = KIND_TABLE[kind].stack
    if sum(blocks) != num_layers:
        raise PolicyError(
            f"{kind} policy {abbreviated(str(list(blocks)))} sums to "
            f"{abbreviated(str(sum(blocks)))} but the {stack} has {num_layers} layers"
        )
    return list(blocks)


def is_policy_text(spec: str) -> bool:
    """Whether ``spec`` is a policy as JSON text (how a checkpoint stores one), not a file name."""
    return spec.lstrip().startswith("{")


def unbraced_blocks(text: str) -> Optional[str]:
    """The block sizes of the paper's notation ("{1,5}", which fairseq-san-policy prints) without
    their braces ("1,5"), or None: a user who copies that notation is told what to write."""
    found = _BRACED_BLOCKS.fullmatch(text)
    return found.group(1).strip() if found else None


def notation_as_json(spec: str) -> Optional[str]:
    """The JSON policy that ``spec`` writes in the paper's notation, or None: the summary line
    fairseq-san-policy prints (``decoder_self {1,5}  decoder_encdec none``), or JSON with braced
    block sizes (``{"decoder_self": {1,5}}``); they read as no file and as malformed JSON."""
    if re.fullmatch(rf"\s*(?:{_SUMMARY_ENTRY.pattern})+", spec) and not os.path.exists(spec):
        entries = [entry.group(1, 2) for entry in _SUMMARY_ENTRY.finditer(spec)]
        if all(kind in KINDS for kind, _ in entries):
            policy = {kind: parse_blocks(unbraced_blocks(blocks), kind) for kind, blocks in entries}
            return json.dumps(policy)
    if not is_policy_text(spec) or not _BRACES.search(spec) or _parses(spec):
        return None
    bracketed = _BRACES.sub(lambda found: f"[{found.group(1).strip()}]", spec)
    try:
        return json.dumps(json.loads(bracketed))
    except (RecursionError, ValueError):  # malformed beside the braces too
        return None


def _parses(text: str) -> bool:
    """Whether ``text`` is JSON."""
    try:
        json.loads(text)
    except (RecursionError, ValueError):
        return False
    return True


def looks_like_blocks(spec: str) -> bool:
    """Whether ``spec``, given where a policy is read, is block sizes (``[1,5]``, ``1,5``, ``6``)
    rather than a file name: it is no file, and reads as a JSON list or numbers."""
    text = spec.strip()
    numbers = text.replace(",", "").replace(" ", "")
    return not os.path.exists(spec) and (text.startswith("[") or numbers.isdigit())


def holds_js_matrices(data: dict) -> bool:
    """Whether ``data``, read as a policy, is an analysis (js.json): a kind's value is a matrix,
    a list of rows, where a policy has block sizes."""
    return any(
        isinstance(data.get(kind), list) and data[kind]
        and all(isinstance(row, list) for row in data[kind])
        for kind in KINDS
    )  # fmt: skip


def load_policy(spec: Union[str, dict]) -> Policy:
    """Read a policy from a JSON file, from JSON text (``spec`` starting with "{") or a dict.

    Kinds that are absent or null are not shared. JSON text is how a model stores its resolved
    policy in its checkpoint arguments; a dict is how Python code (the hub's ``san_policy``
    keyword, ``--model-overrides``) naturally writes one.
    """
    source, data = _policy_data(spec)
    if holds_js_matrices(data):
        raise PolicyError(
            f"{source} holds JS matrices (an analysis, what fairseq-validate --san-analysis-dir "
            "writes), not block sizes: learn a policy from it with fairseq-san-policy"
        )
    unknown = [key for key in data if key not in KINDS]
    if unknown:
        raise PolicyError(
            f'{source}: unknown key "{unknown[0]}" (valid keys: {", ".join(KINDS)})'
        )
    policy = {}
    for kind in KINDS:
        try:
            blocks = parse_blocks(data.get(kind), kind)
        except PolicyError as err:
            raise PolicyError(f"{source}: {err}") from None
        if blocks is not None:
            policy[kind] = blocks
    return policy


def _policy_data(spec: Union[str, dict]) -> Tuple[str, dict]:
    """How errors name ``spec`` (``load_policy``'s), and the object it gives: the dict itself,
    its JSON text parsed or its file read; the paper's notation, bare block sizes and "none"
    are refused, naming what to write."""
    if isinstance(spec, dict):
        return "policy", spec
    if not isinstance(spec, str):
        raise PolicyError(
            f"policy {spec!r}: expected a JSON file, JSON text or a dict like "
            '{"decoder_self": [1, 5]}'
        )
    if (bare := unbraced_blocks(spec)) is not None:
        raise PolicyError(
            f"policy {spec!r}: the paper's notation; a policy is a JSON object of block sizes per "
            f'kind, e.g. \'{{"decoder_self": [{bare}]}}\', or a file holding one'
        )
    if (written := notation_as_json(spec)) is not None:
        raise PolicyError(
            f"policy {abbreviated(repr(spec))}: the paper's notation; as JSON: "
            f"'{abbreviated(written, 200)}'"
        )
    if is_policy_text(spec):
        shown = f"policy {spec!r}" if len(spec) <= 80 else f"policy {spec[:40]!r}..."
        data = parsed_json(spec, shown, PolicyError)
        return "policy", data
    if looks_like_blocks(spec):
        raise PolicyError(
            f"policy {spec!r}: a policy is a JSON object of block sizes per kind, e.g. "
            '\'{"decoder_self": [1, 5]}\', or a file holding one; the per-kind flags '
            "(--san-decoder-self-policy 1,5) take block sizes alone"
        )
    if spec.strip().lower() in ("null", "none") and not os.path.exists(spec):
        raise PolicyError(  # read as a file name: 'policy file "null" not found'
            f"policy {spec!r}: to share nothing, leave the policy out (or give '{{}}')"
        )
    return f'policy file "{spec}"', read_json(spec, "policy file", PolicyError,
                                              limit=POLICY_FILE_LIMIT)


def resolve_policy(
    policy_spec: Union[str, dict, None], flags: dict[str, BlocksValue]
) -> Policy:
    """Merge a policy (file, JSON text or dict: ``load_policy``) with per-kind flags; flags win.

    A flag of None means "not given" and keeps the file's value; a flag of
    "none" switches sharing off for that kind. An empty policy text is refused: it is what an
    unset shell variable gives (``--san-policy "$POLICY"``), and it trained unshared unsaid.
    """
    if isinstance(policy_spec, str) and not policy_spec.strip():
        raise PolicyError(
            f"policy {policy_spec!r} is empty: leave --san-policy out to share nothing, or "
            "give a policy file or JSON text such as '{\"decoder_self\": [6]}'"
        )
    policy = {} if policy_spec is None else load_policy(policy_spec)
    for kind, value in flags.items():
        _check_kind(kind)
        if value is None:
            continue
        blocks = parse_blocks(value, kind)
        if blocks is None:
            policy.pop(kind, None)
        else:
            policy[kind] = blocks
    return {kind: policy[kind] for kind in KINDS if kind in policy}


def _normalized(policy: dict) -> dict[str, Optional[Blocks]]:
    """Check a policy dict and give every kind its blocks, or None if unshared."""
    for kind in policy:
        _check_kind(kind)
    return {kind: parse_blocks(policy.get(kind), kind) for kind in KINDS}


def shared_blocks(policy: dict) -> dict[str, Blocks]:
    """The kinds of ``policy`` where some layers share, with their blocks: a kind whose every
    block is one layer (``{1,1,1,1,1,1}``, what a theta near ln 2 learns) shares nothing, as a
    kind left out does, so two policies that share the same layers compare equal."""
    return {
        kind: blocks
        for kind, blocks in _normalized(policy).items()
        if blocks is not None and any(size > 1 for size in blocks)
    }


def dump_policy(policy: dict) -> str:
    """Policy as JSON text that ``load_policy`` reads back.

    Every kind is written, null when it is not shared, so the file says
    explicitly what is not shared.
    """
    lines = [f'  "{kind}": {json.dumps(blocks)}' for kind, blocks in _normalized(policy).items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_policy(policy: dict, path: str) -> None:
    """Write ``dump_policy(policy)`` to ``path`` through a temporary file: the learn-to-share
    loop takes an existing policy file as learned, so a stopped write must leave none."""
    try:
        write_text(path, dump_policy(policy))
    except OSError as err:
        raise PolicyError(f'cannot write policy file "{path}": {err.strerror or err}') from None


def format_blocks(blocks: Optional[Sequence[int]]) -> str:
    """Block sizes in the paper's notation, ``{1,5}``; ``none`` for no sharing."""
    return "none" if blocks is None else "{" + ",".join(map(str, blocks)) + "}"


def format_policy(policy: dict, kinds: Sequence[str] = KINDS) -> str:
    """One-line summary in the paper's notation, e.g. ``decoder_self {1,5}``, of ``kinds`` (a
    language model has ``decoder_self`` only)."""
    blocks = _normalized(policy)
    return "  ".join(f"{kind} {format_blocks(blocks[kind])}" for kind in kinds)


def block_starts(blocks: Optional[Blocks], num_layers: int) -> list[int]:
    """First-layer index of every block (0-based); every layer when unshared."""
    if blocks is None:
        return list(range(num_layers))
    if sum(blocks) != num_layers:
        raise PolicyError(
            f"policy {list(blocks)} sums to {sum(blocks)} but there are {num_layers} layers"
        )
    starts, start = [], 0
    for size in blocks:
        starts.append(start)
        start += size
    return starts


def blocks_from_starts(starts: Sequence[int], num_layers: int) -> Blocks:
    """The block sizes whose first layers are ``starts`` (0-based, ascending, from 0)."""
    ends = list(starts[1:]) + [num_layers]
    return [end - start for start, end in zip(starts, ends)]


def block_leaders(blocks: Optional[Blocks], num_layers: int) -> list[int]:
    """For each layer, the index of the layer whose attention weights it uses.

    That is the first layer of its block (paper Eqs. 4-5: layer m+i reuses
    S^m, or A^m for encoder-decoder attention), e.g.
    [1, 5] -> [0, 1, 1, 1, 1, 1].
    """
    starts = block_starts(blocks, num_layers)
    leaders = []
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else num_layers
        leaders.extend([start] * (end - start))
    return leaders


def is_number(value: object) -> bool:
    """True for int and float values, but not bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """A number (``is_number``) that is no NaN or infinity; an int of any size is one
    (``math.isfinite`` raised OverflowError on an int beyond a float's range)."""
    return is_number(value) and (isinstance(value, int) or math.isfinite(value))


def check_js(js: object) -> list[list[float]]:
    """Check a pairwise JS divergence matrix between layers (square, symmetric, zero diagonal,
    values in [0, JS_MAX]); return it as floats."""
    if not isinstance(js, (list, tuple)) or not js:
        raise PolicyError("JS matrix must be a non-empty list of rows")
    size = len(js)
    for i, row in enumerate(js):
        if not isinstance(row, (list, tuple)):
            raise PolicyError(
                f"JS matrix must be a list of rows, lists of numbers: row {i} is {row!r} (block "
                "sizes are a policy, not an attention analysis)"
            )
        if len(row) != size:
            raise PolicyError(
                f"JS matrix is not square: row {i} has {len(row)} values but there are {size} rows"
            )
        for j, value in enumerate(row):
            if not is_finite_number(value):
                raise PolicyError(
                    f"JS matrix value [{i}][{j}] = {abbreviated(repr(value))} is not a finite "
                    "number"
                )
            if not -TOLERANCE <= value <= JS_MAX + TOLERANCE:
                raise PolicyError(
                    f"JS matrix value [{i}][{j}] = {abbreviated(str(value))} is outside "
                    f"[0, {JS_MAX}]"
                )
    for i in range(size):
        if abs(js[i][i]) > TOLERANCE:
            raise PolicyError(
                f"JS matrix diagonal [{i}][{i}] = {js[i][i]} should be 0 "
                "(a layer does not diverge from itself)"
            )
        for j in range(i + 1, size):
            if abs(js[i][j] - js[j][i]) > TOLERANCE:
                raise PolicyError(
                    f"JS matrix is not symmetric: [{i}][{j}] = {js[i][j]} "
                    f"but [{j}][{i}] = {js[j][i]}"
                )
    return [[float(value) for value in row] for row in js]


def bits_note(js: list[list[float]], what: str, consequence: str) -> Optional[str]:
    """The note for a checked JS matrix (``what``: its kind, or its file and kind) holding a
    value above ln 2, the largest JS in nats (what the analysis writes): values in bits (up to
    1), and their ``consequence``; None where it holds none."""
    if not any(value > LN2 for row in js for value in row):
        return None
    return (
        f"{what} holds JS values above ln 2 = {LN2:.4f}, the largest in nats (what "
        f"fairseq-validate --san-analysis-dir writes): {consequence}"
    )


# What an analysis records of the attention it measured (older analyses record none of them): the
# subset it was measured on, how many of its sentences (--san-analysis-max-sentences: its first
# N), and the sharing policy of the model measured.
SOURCE_FIELDS = (
    ("subset", "subsets"),
    ("sentences", "numbers of sentences"),
    ("policy", "sharing policies"),
)


def check_one_source(analyses: Sequence[dict], names: Sequence[str]) -> None:
    """PolicyError naming two analyses of different subsets, of different numbers of its
    sentences or of models of different sharing policies, where they record them: a mean of
    theirs is one model's attention on one text no more (a policy learned partly on the test set;
    one point of a curve measured on other sentences; a shared model's zeros in a baseline's)."""
    for field, what in SOURCE_FIELDS:
        differing = recorded_difference(analyses, names, field)
        if differing is not None:
            (first, value), (name, other_value) = differing
            raise PolicyError(
                f"{first} ({field} {shown(value)}) and {name} ({field} {shown(other_value)}) are "
                f"analyses of different {what}: take the analyses of the same sentences of one "
                "subset (one --san-analysis-max-sentences) and of models of one policy"
            )


def unrecorded_note(analyses: Sequence[dict], names: Sequence[str]) -> Optional[str]:
    """Where some analyses record a ``SOURCE_FIELDS`` field (their sharing policy, recorded
    since 8b5d510) and others do not (written before), which and what: ``check_one_source``
    cannot tell a shared model's analysis taken beside an unshared one's; else None."""
    for field, _ in SOURCE_FIELDS:
        recording = [name for name, analysis in zip(names, analyses) if field in analysis]
        silent = [name for name, analysis in zip(names, analyses) if field not in analysis]
        if recording and silent:
            return (
                f"{silent[0]} records no {field} (an analysis written by an older version) but "
                f"{recording[0]} does: they are taken as if of one {field}, unchecked; to "
                f"check, analyse {silent[0]}'s checkpoint again"
            )
    return None


def recorded_difference(
    analyses: Sequence[dict], names: Sequence[str], field: str
) -> Optional[Tuple[Tuple[str, object], Tuple[str, object]]]:
    """((name, value), (name, other value)) of the first analysis that records ``field`` and the
    first after it that records another value of it; None where those that record it agree
    (``same_recorded``: a NaN agrees with itself)."""
    recorded = [(name, analysis[field]) for name, analysis in zip(names, analyses)
                if analysis.get(field) is not None]  # fmt: skip
    first = recorded[0][1] if recorded else None
    other = next(((name, value) for name, value in recorded
                  if not same_recorded(value, first)), None)  # fmt: skip
    return None if other is None else (recorded[0], other)


def same_recorded(value: object, other: object) -> bool:
    """Whether two values an analysis records agree, as values or as JSON: a NaN is not equal to
    itself, and one analysis recording one was named as of another training than itself."""
    return value == other or json.dumps(value) == json.dumps(other)


def checkpoint_folder(analysis: dict) -> Optional[str]:
    """The folder of the checkpoint an analysis records, normalised ("./run/ckpt" is "run/ckpt"):
    a save dir holds one training's checkpoints; None where it records none or a bare name."""
    checkpoint = analysis.get("checkpoint")
    if not isinstance(checkpoint, str) or not os.path.dirname(checkpoint):
        return None
    return os.path.normpath(os.path.dirname(checkpoint))


def shown(value: object) -> str:
    """A recorded value as a message shows it: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def mean_js(analyses: Sequence[dict], names: Sequence[str]) -> dict[str, Optional[list]]:
    """The element-wise mean of several analyses' JS matrices, per kind (e.g. of several seeds'
    models, whose policies learned one by one may differ; each analysis weighs the same).

    ``names`` name the analyses in errors. A kind is left out where every analysis lacks it (as
    in each of them: a threshold for it is then refused), null where every analysis has it null
    or lacks it; null in some and a matrix in others (an AAN beside a Transformer), or matrices of
    different sizes, is an error: they are not analyses of one architecture; so are analyses of
    different subsets or policies (``check_one_source``).
    """
    check_one_source(analyses, names)
    averaged: dict[str, Optional[list]] = {}
    for kind in KINDS:
        if not any(kind in analysis for analysis in analyses):
            continue
        found = [(name, analysis.get(kind)) for name, analysis in zip(names, analyses)]
        present = [(name, js) for name, js in found if js is not None]  # a list: a file given
        if not present:  # twice counts twice
            averaged[kind] = None
            continue
        if len(present) < len(found):
            missing = next(name for name, js in found if js is None)
            raise PolicyError(f"{kind}: {missing} has no JS matrix but {present[0][0]} has one; "
                              "average analyses of one architecture only")  # fmt: skip
        matrices = []
        for name, js in present:
            try:
                matrices.append(check_js(js))
            except PolicyError as err:
                raise PolicyError(f"{kind} of {name}: {err}") from None
        sizes = {name: len(matrix) for (name, _), matrix in zip(present, matrices)}
        if len(set(sizes.values())) > 1:
            raise PolicyError(f"{kind}: matrices of different sizes ({sizes}); average analyses "
                              "of one architecture only")  # fmt: skip
        averaged[kind] = [
            [sum(values) / len(matrices) for values in zip(*rows)] for rows in zip(*matrices)
        ]
    return averaged


def _check_theta(theta: object) -> float:
    """Check a sharing threshold; sim values of interest lie in [0, ln 2]."""
    if not is_number(theta) or not 0.0 <= theta <= LN2:
        raise PolicyError(f"theta {theta!r} must be a number in [0, ln 2 = {LN2:.4f}]")
    return float(theta)


class BlockSims:
    """sim(m, n) of Eq. 6 for every block of a checked JS matrix, each in constant time: the
    search meets O(layers^2) blocks, and summing each one's pairs anew took O(layers^4).

    The JS values are held as integers, multiples of the smallest power of two among them, in
    2-D prefix sums (diagonal left out): a block's sum is then exact, and rounding it once gives
    math.fsum's correctly rounded sum bit for bit. A sim is ln 2 less the block's mean JS: the mean
    of mu = ln 2 - JS, which summing the mus in floats put an ulp below ln 2 for layers of JS 0
    (not one block at theta = ln 2).
    """

    def __init__(self, js: list[list[float]]) -> None:
        ratios = [[value.as_integer_ratio() for value in row] for row in js]
        self.scale = max(den for row in ratios for _, den in row)
        size = len(js)
        self.prefix = [[0] * (size + 1) for _ in range(size + 1)]
        for i, row in enumerate(ratios):
            running = 0
            for j, (num, den) in enumerate(row):
                running += 0 if i == j else num * (self.scale // den)
                self.prefix[i + 1][j + 1] = self.prefix[i][j + 1] + running

    def __call__(self, m: int, n: int) -> float:
        """sim(m, n) for layers m..n (0-based, inclusive); ln 2 for a one-layer block."""
        if m == n:
            return LN2
        prefix, size = self.prefix, n - m + 1
        total = prefix[n + 1][n + 1] - prefix[m][n + 1] - prefix[n + 1][m] + prefix[m][m]
        return LN2 - (total / self.scale) / (size * (size - 1))


def block_similarity(js: list[list[float]], m: int, n: int) -> float:
    """sim(m, n) of paper Eq. 6 for the block of layers m..n (0-based, inclusive).

    The mean of mu(i, j) over ordered pairs i != j in the block. A one-layer
    block has no pairs; it gets ln 2, the similarity of a layer to itself
    (JS = 0), so it qualifies for every theta in [0, ln 2].
    """
    js = check_js(js)
    if not 0 <= m <= n < len(js):
        raise PolicyError(f"block {m}..{n} is not within layers 0..{len(js) - 1}")
    return BlockSims(js)(m, n)


def learn_blocks(js: list[list[float]], theta: float) -> Blocks:
    """Learn a sharing policy from pairwise JS divergences (section 3.3).

    From the bottom layer up, take the biggest block whose sim (Eq. 6) is at
    least theta, then continue above it. A larger theta asks more of a block: the first block
    never grows, but the search is greedy, so the blocks above it may merge into fewer.
    """
    return _learn_blocks(BlockSims(check_js(js)), len(js), _check_theta(theta))


def _learn_blocks(sims: BlockSims, num_layers: int, theta: float) -> Blocks:
    """``learn_blocks`` on the block sims of a checked matrix of ``num_layers`` layers."""
    blocks, m = [], 0
    while m < num_layers:
        n = max(end for end in range(m, num_layers) if sims(m, end) >= theta)
        blocks.append(n - m + 1)
        m = n + 1
    return blocks


def stack_kinds(stack: str) -> tuple[str, ...]:
    """The attention kinds whose layers are in ``stack`` ("encoder" or "decoder")."""
    return tuple(name for name, kind in KIND_TABLE.items() if kind.stack == stack)


def _check_stack_sizes(js_by_kind: dict) -> None:
    """Matrices of one stack (decoder self and encoder-decoder attention) must have one size.

    Both describe the decoder's layers; differing sizes mean a file edited by hand or assembled
    from two models, whose policies would not fit one model.
    """
    sizes = {
        kind: len(js_by_kind[kind]) for kind in KINDS if isinstance(js_by_kind.get(kind), list)
    }
    for stack in dict.fromkeys(kind.stack for kind in KIND_TABLE.values()):
        kinds = [kind for kind in stack_kinds(stack) if kind in sizes]
        if len({sizes[kind] for kind in kinds}) > 1:
            first, second = kinds[0], kinds[1]
            raise PolicyError(
                f"JS matrices of different {stack}s: {first} is {sizes[first]}x{sizes[first]} "
                f"but {second} is {sizes[second]}x{sizes[second]}; both must be the {stack}'s "
                "layers of one model (fairseq-validate --san-analysis-dir writes such a js.json)"
            )


def _for_kind(kind: str, function: Callable, *args) -> object:
    """``function(*args)``, a PolicyError of it naming ``kind``."""
    try:
        return function(*args)
    except PolicyError as err:
        raise PolicyError(f"{kind}: {err}") from None


def _per_kind(js_by_kind: dict, thetas: dict[str, Optional[float]], learn: Callable) -> dict:
    """``learn(js, theta)`` for each kind that has a theta and a JS matrix, in KINDS order."""
    for kind in KINDS:  # a matrix's own fault (not square) before a mismatch of two
        if isinstance(js_by_kind.get(kind), list):
            _for_kind(kind, check_js, js_by_kind[kind])
    _check_stack_sizes(js_by_kind)
    learned = {}
    for kind, theta in thetas.items():
        _check_kind(kind)
        if theta is None:
            continue
        if kind not in js_by_kind:
            raise PolicyError(f"no JS matrix for {kind}, but a theta is given for it")
        if js_by_kind[kind] is None:
            continue
        learned[kind] = _for_kind(kind, learn, js_by_kind[kind], theta)
    return {kind: learned[kind] for kind in KINDS if kind in learned}


def learn_policy(
    js_by_kind: dict[str, list[list[float]]], thetas: dict[str, Optional[float]]
) -> Policy:
    """Learn a policy for each kind that has a theta; theta None means no sharing.

    Keys of ``js_by_kind`` that are not kinds are ignored, so a JS dump with
    extra fields (e.g. a sentence count) can be passed as is. A kind whose JS is
    null has no attention weights (AAN's decoder self-attention): it is not shared.
    """
    return _per_kind(js_by_kind, thetas, learn_blocks)


class ThetaRange(NamedTuple):
    """The thetas that learn the same blocks: (low, high], or [0, high] where ``low`` is None;
    and the blocks of layers (first, last; 0-based) whose Eq. 6 sim sets each end."""

    low: Optional[float]
    high: float
    low_block: Optional[Tuple[int, int]] = None
    high_block: Optional[Tuple[int, int]] = None

    def __str__(self) -> str:
        return str(range_shown(self.low, self.high))


def rounded_theta(theta: float, places: int, up: bool) -> str:
    """``theta`` with ``places`` decimals, rounded up or down: the number shown, read back, lies on
    the side of ``theta`` asked for (0.49668 rounded to 0.4967 would be past a range's high end)."""
    shown = Decimal(f"{theta:.{places}f}")
    step = Decimal(1).scaleb(-places)
    if up and float(shown) < theta:
        shown += step
    elif not up and float(shown) > theta:
        shown -= step
    return f"{shown:.{places}f}"


class ShownRange(NamedTuple):
    """A range of theta as shown: its ends' text (``low`` None: from 0), and whether ``low`` is
    in it."""

    low: Optional[str]
    high: str
    closed: bool = True

    def __str__(self) -> str:
        if self.low is None:
            return f"[0, {self.high}]"
        return f"{'[' if self.closed else '('}{self.low}, {self.high}]"


def range_shown(low: Optional[float], high: float, low_closed: bool = False) -> ShownRange:
    """``(low, high]`` (``[low, high]`` where ``low_closed``, ``[0, high]`` where ``low`` is None)
    with its ends rounded inwards, so that every theta within what is shown lies within the range:
    closed at a low end rounded up past ``low``. At the fewest decimals (``PLACES`` at least) that
    leave the range shown non-empty."""
    for places in range(PLACES, 18):  # at 17 decimals a float in [0, 1] is shown exactly
        high_shown = rounded_theta(high, places, up=False)
        if low is None:
            return ShownRange(None, high_shown)
        low_shown = rounded_theta(low, places, up=True)
        closed = low_closed or float(low_shown) > low
        if float(low_shown) < float(high_shown) or (closed and low_shown == high_shown):
            break
    return ShownRange(low_shown, high_shown, closed)


def shown_where_learned(js: list[list[float]], theta: float, blocks: Blocks, up: bool) -> str:
    """``theta`` rounded up or down at the fewest decimals (``PLACES`` at least) at which it still
    learns ``blocks``: a theta just outside a range, shown as a number that learns what is said."""
    for places in range(PLACES, 18):
        shown = rounded_theta(theta, places, up)
        if float(shown) <= LN2 and learn_blocks(js, float(shown)) == blocks:
            return shown
    return repr(theta)


def theta_range(js: list[list[float]], theta: float) -> ThetaRange:
    """The thetas for which ``learn_blocks`` learns what it learns at ``theta``.

    The search takes the block m..n because sim(m, n) >= theta (Eq. 6) and passes over each
    larger block m..e, e > n, because sim(m, e) < theta. Every theta that keeps all of these
    comparisons takes the same path, and no other does: the same blocks exactly for theta above
    the largest sim passed over and at most the smallest sim taken. How near theta lies to either
    end says how near the learned policy is to another one.
    """
    return _theta_range(BlockSims(check_js(js)), len(js), _check_theta(theta))


def _theta_range(sims: BlockSims, num_layers: int, theta: float) -> ThetaRange:
    """``theta_range`` on the block sims of a checked matrix of ``num_layers`` layers."""
    taken, passed_over, m = [], [], 0
    for size in _learn_blocks(sims, num_layers, theta):
        n = m + size - 1
        taken.append((sims(m, n), (m, n)))
        passed_over.extend((sims(m, end), (m, end)) for end in range(n + 1, num_layers))
        m = n + 1
    high, high_block = min(taken)  # ties: the search meets the lowest start first
    # Ties: at theta = low the search takes, at the lowest start, the largest block.
    low, low_block = max(
        passed_over, key=lambda sim_block: (sim_block[0], -sim_block[1][0], sim_block[1][1]),
        default=(None, None),
    )  # fmt: skip
    if low is not None and low < 0:  # no theta in [0, ln 2] takes that block
        low, low_block = None, None
    return ThetaRange(low, high, low_block, high_block)


def blocks_beyond(
    js: list[list[float]], same: ThetaRange
) -> tuple[Optional[Blocks], Optional[Blocks]]:
    """The blocks learned just outside ``same`` (a ``theta_range`` of ``js``): at its low end, and
    at the next float above its high end; None where theta cannot go (below 0, above ln 2)."""
    below = None if same.low is None else learn_blocks(js, same.low)
    above = None if same.high >= LN2 else learn_blocks(js, math.nextafter(same.high, LN2))
    return below, above


class PolicySegment(NamedTuple):
    """The blocks learned for every theta in (low, high] (from ``low`` itself on the first
    segment of a ``policy_segments`` call)."""

    low: float
    high: float
    blocks: Blocks


def policy_segments(js: list[list[float]], low: float, high: float) -> list[PolicySegment]:
    """The policies ``learn_blocks`` learns as theta runs from ``low`` to ``high``, each with its
    range of theta clipped to [low, high], in order: a map of how near each policy is to the next.
    """
    low, high = _check_theta(low), _check_theta(high)
    if low > high:
        raise PolicyError(f"theta range is empty: {low} > {high}")
    sims, num_layers = BlockSims(check_js(js)), len(js)
    segments, start, theta = [], low, low
    while True:
        end = min(_theta_range(sims, num_layers, theta).high, high)
        segments.append(PolicySegment(start, end, _learn_blocks(sims, num_layers, theta)))
        if end >= high:
            return segments
        start, theta = end, math.nextafter(end, LN2)


def theta_ranges(
    js_by_kind: dict[str, list[list[float]]], thetas: dict[str, Optional[float]]
) -> dict[str, ThetaRange]:
    """``theta_range`` of each kind that ``learn_policy`` learns with these thetas."""
    return _per_kind(js_by_kind, thetas, theta_range)
