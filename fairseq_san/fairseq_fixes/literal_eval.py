"""fairseq evaluates configuration strings as Python: with the plugin, literals only.

fairseq turns some string options into values with the builtin ``eval()``: its helpers
``utils.eval_str_list`` / ``eval_str_dict`` / ``eval_bool`` (``adaptive_softmax_cutoff``,
``left_pad_source``, ...), the optimizers (``adam_betas``, ``adafactor_eps``, ...) and several
models (``fconv``'s ``decoder_layers``, wav2vec's ``conv_feature_layers``, ...). Those strings also
come from a checkpoint's saved configuration (``cfg.model``, ``cfg.optimizer``), which torch's safe
loader lets through (they are plain strings), so a checkpoint a user receives could run any code
while fairseq builds its model: ``"__import__('os').system(...) or [100]"``.

Two guards, both installed for the process by ``install()``:

* every fairseq module that calls ``eval`` gets a module-level ``eval`` that evaluates literals
  only (``evaluate``): numbers, strings, booleans, None, tuples, lists, sets and dicts of them,
  and ``+``, ``-``, ``*``, ``/`` between them, which fairseq's own defaults use
  (``"[(512, 3)] * 20"``); a name, call, attribute or subscript is refused with
  ``NotALiteral``. Python's ``eval`` itself is left alone.
* ``refuse_code_in(path, state)`` checks a loaded checkpoint before anything is built
  (``fairseq_fixes.safe_loading`` calls it on every load): every field of ``EVALUATED_FIELDS`` must
  be a literal, else one line names the checkpoint, the field and the value's first characters.
"""

import ast
import sys
import types
from collections.abc import Mapping
from typing import Any, Iterator, Tuple

from fairseq_san.errors import UsageError
from fairseq_san.pickled_fields import fields

# Fields whose string values fairseq passes to eval(), directly or through utils.eval_str_list /
# eval_str_dict / eval_bool (fairseq main, 2024). A test reads fairseq's installed source and
# fails when it evaluates a field missing here.
EVALUATED_FIELDS = frozenset(
    {
        # optimizers
        "adam_betas", "adamax_betas", "lamb_betas", "adafactor_eps",
        # translation and language models
        "adaptive_softmax_cutoff", "adaptive_input_cutoff", "character_filters",
        "pipeline_balance", "pipeline_devices", "pipeline_encoder_balance",
        "pipeline_encoder_devices", "pipeline_decoder_balance", "pipeline_decoder_devices",
        "left_pad_source", "left_pad_target",
        "decoder_zero_init", "xformers_att_config",
        # convolutional models
        "encoder_layers", "decoder_layers", "encoder_attention", "decoder_attention",
        "self_attention", "project_input", "gated_attention", "downsample", "pretrained",
        # speech models and criteria
        "conv_feature_layers", "conv_aggregator_layers", "wer_args",
        # evaluation
        "model_overrides",
    }
)
# The most items a literal's repetitions and concatenations may build, counted together: no
# memory exhaustion from a string ("[" + "[0]*99999," * 1000 + "]": 10 KB, 764 MB).
MAX_ITEMS = 100_000
# The deepest nesting a literal may have: fairseq's strings are a tuple or a list deep; the
# interpreter's recursion limit, which a library may raise (torch's inductor does), decided
# before, so that "1+1+...+1" 996 deep was refused in one process and taken in another.
MAX_DEPTH = 100
SHOWN_CHARACTERS = 40  # of a refused value, in the error


class NotALiteral(UsageError):
    """A configuration string that is not a literal, so it is not evaluated."""


class NotAString(NotALiteral, TypeError):
    """A configuration value that is not a string (a code object, say): a TypeError as well, as
    ``eval`` raises for a bool or None, which fairseq's callers catch (``utils.eval_bool``)."""


def shown(text: str) -> str:
    """The first characters of a refused value, quoted, for one line of error."""
    text = " ".join(str(text).split())
    return repr(text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "...")


def evaluate(source: Any, globals: Any = None, locals: Any = None) -> Any:  # noqa: A002
    """The value of a literal expression ``source``; a drop-in for ``eval`` in fairseq's modules.

    ``globals`` and ``locals`` are accepted and ignored: a literal has no names to look up.
    """
    if not isinstance(source, str):
        raise NotAString(f"refusing to evaluate {type(source).__name__} as Python")
    try:
        tree = ast.parse(source.strip(), mode="eval")
        return _value(tree.body, _Budget())
    except (
        SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError,
        MemoryError,  # nested too deeply for the parser ("-" * 100000 + "1")
    ) as error:  # fmt: skip
        raise NotALiteral(
            f"refusing to evaluate {shown(source)} as Python: fairseq evaluates this "
            "configuration string, and fairseq-san accepts only literals (numbers, strings, "
            f"tuples, lists, dicts; + - * / between them): {error}"
        ) from None


def is_literal(text: str) -> bool:
    try:
        evaluate(text)
    except NotALiteral:
        return False
    return True


_SEQUENCES = {ast.Tuple: tuple, ast.List: list, ast.Set: set}
_ARITHMETIC = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


class _Budget:
    """The items one literal's repetitions and concatenations may still build (MAX_ITEMS)."""

    def __init__(self) -> None:
        self.left = MAX_ITEMS

    def spend(self, items: int) -> None:
        self.left -= items
        if self.left < 0:
            raise ValueError(f"repetitions or concatenations of more than {MAX_ITEMS} items")


def _value(node: ast.AST, budget: _Budget, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} deep")
    deeper = depth + 1
    if isinstance(node, ast.Constant):
        return node.value
    if type(node) in _SEQUENCES:
        return _SEQUENCES[type(node)](_value(item, budget, deeper) for item in node.elts)
    if isinstance(node, ast.Dict) and None not in node.keys:  # None: a ``**`` unpacking
        return {
            _value(key, budget, deeper): _value(value, budget, deeper)
            for key, value in zip(node.keys, node.values)
        }
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        operand = _number(_value(node.operand, budget, deeper))
        return operand if isinstance(node.op, ast.UAdd) else -operand
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _value(node.left, budget, deeper), _value(node.right, budget, deeper)
        budget.spend(_items_built(node.op, left, right))
        return _ARITHMETIC[type(node.op)](left, right)
    raise ValueError(f"{type(node).__name__} is not a literal")


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, complex)):
        raise ValueError(f"a sign before {type(value).__name__}")
    return value


def _items_built(op: ast.operator, left: Any, right: Any) -> int:
    """The items ``left op right`` builds, before it builds them: a repetition's (sequence *
    int) or a concatenation's (sequence + sequence); 0 for arithmetic on numbers."""
    sized = (str, bytes, tuple, list)
    if isinstance(op, ast.Mult):
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, sized) and isinstance(count, int):
                return max(count, 0) * len(sequence)
    if isinstance(op, ast.Add) and isinstance(left, sized) and isinstance(right, sized):
        return len(left) + len(right)
    return 0


def evaluated_fields(config: Any, prefix: str) -> Iterator[Tuple[str, str]]:
    """(dotted name, value) of every string field of ``config`` that fairseq evaluates, each of
    its objects read once (``pickled_fields``: a received file may refer to one many times)."""
    for name, key, value in fields(config, prefix):
        if isinstance(value, str) and isinstance(key, str) and key in EVALUATED_FIELDS:
            yield name, value


def refuse_code_in(path: str, state: Mapping) -> None:
    """Raise NotALiteral, naming ``path`` and the field, for a checkpoint whose configuration holds
    a string that fairseq would evaluate and that is not a literal."""
    for section in ("cfg", "args"):
        for name, value in evaluated_fields(state.get(section), section):
            if not is_literal(value):
                raise NotALiteral(
                    f"checkpoint {path}: {name} = {shown(value)} is not a literal; fairseq "
                    "evaluates this field as Python, so the checkpoint could run code: refused"
                )


def calls_eval(module: types.ModuleType) -> bool:
    """Whether ``module``'s code looks up the name ``eval`` (as a builtin or an attribute)."""
    spec = getattr(module, "__spec__", None)
    try:
        code = spec.loader.get_code(spec.name)
    except Exception:  # not a source or bytecode module (an alias, a C extension)
        return False
    return code is not None and _names_eval(code)


def _names_eval(code: types.CodeType) -> bool:
    return "eval" in code.co_names or any(
        _names_eval(const) for const in code.co_consts if isinstance(const, types.CodeType)
    )


def fairseq_modules() -> Iterator[types.ModuleType]:
    """fairseq's imported modules, a command run as ``python -m fairseq_cli.NAME`` included (it
    is ``__main__``, named by its spec)."""
    for name, module in list(sys.modules.items()):
        name = getattr(getattr(module, "__spec__", None), "name", None) or name
        if name.split(".")[0] in ("fairseq", "fairseq_cli") and module is not None:
            yield module


def install() -> None:
    """Give every imported fairseq module that calls ``eval`` the literal-only ``evaluate``."""
    for module in fairseq_modules():
        if getattr(module, "eval", None) is not evaluate and calls_eval(module):
            module.eval = evaluate
