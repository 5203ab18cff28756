"""Meters of a decode: the size of the decoding cache, where the time of a step goes, FLOPs.

* ``CacheMeter``: during a pass the decoder's cache is walked: fairseq's incremental state after
  every step; the static decoder's ``DecoderCache`` (allocated once per batch for the longest
  output, fairseq_san/static_decoding/caches.py) once it is filled, after ``step.prepare``, its
  spare reorder buffers included. The size is the sum of the bytes of the distinct storages its
  tensors live in (memory actually held); the peak over the subset is reported.
  ``cache_tensor_bytes`` counts ``numel * element_size`` per distinct storage instead (the live
  extent only).
* ``StepProfiler``: forward hooks timing (``time.perf_counter``, synchronized on a GPU) the
  self-attention, encoder-decoder attention and FFN (fc1 .. fc2) of every decoder layer, the
  output projection, the whole decoder step, the encoder, the cache reorder of beam search, and
  the ``generate`` call. The static decoder's step has modules of the same names (its
  ``LayerStep``), so the same hooks time it. Module hooks cost a few microseconds each, which
  lands in "rest".
  ``removable`` is the attention time of decoder layers 2..N as a share of the whole decode: no
  sharing policy can remove more, since the first layer of each stack always attends.
* ``matmul_flops``: the matrix-multiply FLOPs of a call (torch's ``FlopCounterMode``, plus the
  static decoder's packed linear layers, counted by a module hook).
"""

from contextlib import contextmanager
from typing import Callable, Dict, List, Optional, Tuple

import torch

from fairseq_san.benchmark.timing import clock
from fairseq_san.static_decoding.precision import PackedLinear


@contextmanager
def _wrapped_method(obj, name: str, make_wrapper: Callable[[Callable], Callable]):
    """Temporarily replace the bound method ``obj.name`` by ``make_wrapper(original)`` (on a
    class: the method of all its instances).

    SequenceGenerator calls ``model.decoder.forward`` (and ``forward_torchscript``,
    ``reorder_incremental_state_scripting``) directly, not through ``__call__``, so module hooks
    on the decoder itself never fire; an instance attribute does.
    """
    had_own = name in vars(obj)
    previous = vars(obj).get(name)
    setattr(obj, name, make_wrapper(getattr(obj, name)))
    try:
        yield
    finally:
        if had_own:
            setattr(obj, name, previous)
        else:
            delattr(obj, name)


def incremental_state_bytes(state: Optional[Dict]) -> Tuple[int, int]:
    """(bytes of the distinct storages, sum of numel * element_size per distinct storage).

    ``state`` is fairseq's incremental state: module key -> {name: tensor or None}, possibly
    nested, or an object holding tensors in its attributes (the static decoder's DecoderCache).
    A storage shared by several tensors (views) is counted once.
    """
    storages: Dict[Tuple[str, int], Tuple[int, int]] = {}

    def visit(value):
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            key = (str(value.device), storage.data_ptr())
            held, extent = storages.get(key, (0, 0))
            storages[key] = (
                max(held, storage.nbytes()),
                max(extent, value.numel() * value.element_size()),
            )
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)
        elif hasattr(value, "__dict__") and not isinstance(value, torch.nn.Module):
            visit(vars(value))

    visit(state or {})
    return sum(h for h, _ in storages.values()), sum(e for _, e in storages.values())


class CacheMeter:
    """Peak size of a decoder's cache, measured after every call of ``owner.method``.

    ``state_of(args, kwargs)`` picks the cache from that call's arguments.
    """

    def __init__(self, owner, method: str, state_of: Callable[[Tuple, Dict], object]):
        self.owner, self.method, self.state_of = owner, method, state_of
        self.peak = 0
        self.peak_tensor = 0
        self._context = None

    @classmethod
    def of_fairseq(cls, decoder: torch.nn.Module) -> "CacheMeter":
        """fairseq's incremental state, after every ``decoder.forward`` (one step)."""
        return cls(decoder, "forward", lambda args, kwargs: kwargs.get("incremental_state"))

    @classmethod
    def of_static(cls, step: torch.nn.Module) -> "CacheMeter":
        """The static decoder's DecoderCache, after ``step.prepare(encoder_out, padding, cache,
        positions)`` has allocated and filled it for a batch."""
        return cls(step, "prepare", lambda args, kwargs: args[2])

    def _wrap(self, method):
        def measured(*args, **kwargs):
            out = method(*args, **kwargs)
            held, extent = incremental_state_bytes(self.state_of(args, kwargs))
            self.peak = max(self.peak, held)
            self.peak_tensor = max(self.peak_tensor, extent)
            return out

        return measured

    def __enter__(self):
        self._context = _wrapped_method(self.owner, self.method, self._wrap)
        self._context.__enter__()
        return self

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)


PARTS = ("self_attn", "encdec_attn", "ffn", "output_proj")


class StepProfiler:
    """Wall time of the parts of decoding, from forward hooks and wrapped methods.

    Each decoder layer's ``self_attn`` and ``encoder_attn`` are timed from their pre-hook to
    their post-hook, the FFN from ``fc1``'s pre-hook to ``fc2``'s post-hook, the output
    projection likewise; ``decoder.forward`` (one decoder step), ``encoder.forward_torchscript``
    and the cache reorder of beam search (``reorder``: the owner and name of the method) by
    wrapping their methods. ``decoder`` is fairseq's decoder or the static decoder's step.
    """

    def __init__(
        self,
        decoder: torch.nn.Module,
        encoder: torch.nn.Module,
        reorder: Tuple[object, str],
        device: torch.device,
    ):
        self.decoder, self.encoder, self.reorder = decoder, encoder, reorder
        self.device = device
        layers = len(decoder.layers)
        self.layer_seconds = {part: [0.0] * layers for part in ("self_attn", "encdec_attn", "ffn")}
        self.output_seconds = 0.0
        self.step_seconds = 0.0
        self.steps = 0
        self.encoder_seconds = 0.0
        self.reorder_seconds = 0.0
        self.generate_seconds = 0.0
        self._handles: List = []
        self._contexts: List = []

    def _span(self, start_module, end_module, add: Callable[[float], None]) -> None:
        started: List[float] = []

        def pre_hook(module, inputs):
            started.append(clock(self.device))

        def post_hook(module, inputs, output):
            add(clock(self.device) - started.pop())

        self._handles.append(start_module.register_forward_pre_hook(pre_hook))
        self._handles.append(end_module.register_forward_hook(post_hook))

    def _adder(self, part: str, index: int) -> Callable[[float], None]:
        def add(seconds: float) -> None:
            self.layer_seconds[part][index] += seconds

        return add

    def _timed(self, attribute: str, count_steps: bool = False):
        def make_wrapper(method):
            def timed(*args, **kwargs):
                start = clock(self.device)
                out = method(*args, **kwargs)
                setattr(self, attribute, getattr(self, attribute) + clock(self.device) - start)
                if count_steps:
                    self.steps += 1
                return out

            return timed

        return make_wrapper

    def __enter__(self):
        decoder = self.decoder
        for index, layer in enumerate(decoder.layers):
            self._span(layer.self_attn, layer.self_attn, self._adder("self_attn", index))
            if getattr(layer, "encoder_attn", None) is not None:
                add = self._adder("encdec_attn", index)
                self._span(layer.encoder_attn, layer.encoder_attn, add)
            self._span(layer.fc1, layer.fc2, self._adder("ffn", index))
        if isinstance(getattr(decoder, "output_projection", None), torch.nn.Module):

            def add_output(seconds: float) -> None:
                self.output_seconds += seconds

            self._span(decoder.output_projection, decoder.output_projection, add_output)
        self._contexts = [
            _wrapped_method(decoder, "forward", self._timed("step_seconds", count_steps=True)),
            _wrapped_method(self.encoder, "forward_torchscript", self._timed("encoder_seconds")),
            _wrapped_method(*self.reorder, self._timed("reorder_seconds")),
        ]
        for context in self._contexts:
            context.__enter__()
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        for context in reversed(self._contexts):
            context.__exit__(None, None, None)
        self._handles, self._contexts = [], []
        return False

    def summary(self) -> Dict:
        parts = {part: sum(values) for part, values in self.layer_seconds.items()}
        parts["output_proj"] = self.output_seconds
        parts["rest"] = max(self.step_seconds - sum(parts.values()), 0.0)
        step = self.step_seconds
        total = self.generate_seconds
        attention = parts["self_attn"] + parts["encdec_attn"]
        removable = sum(self.layer_seconds["self_attn"][1:]) + sum(
            self.layer_seconds["encdec_attn"][1:]
        )
        outside = max(total - step - self.encoder_seconds - self.reorder_seconds, 0.0)
        return {
            "steps": self.steps,
            "ms_per_step": 1000 * step / self.steps if self.steps else float("nan"),
            "decoder_step_share": {k: _share(v, step) for k, v in parts.items()},
            "decoder_step_seconds": parts,
            "per_layer_seconds": self.layer_seconds,
            "generate_seconds": total,
            "generate_share": {
                "encoder": _share(self.encoder_seconds, total),
                "decoder_steps": _share(step, total),
                "cache_reorder": _share(self.reorder_seconds, total),
                "search_and_other": _share(outside, total),
            },
            "attention_share_of_decode": _share(attention, total),
            "removable_share_of_decode": _share(removable, total),
            "max_speedup_from_sharing": 1.0 / (1.0 - _share(removable, total))
            if total > 0 and removable < total
            else float("nan"),
        }


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else float("nan")


def matmul_flops(call: Callable[[], object]) -> Tuple[int, object]:
    """(matrix-multiply FLOPs of ``call()``, its output): what torch's FlopCounterMode counts,
    plus the static decoder's packed linear layers, which it cannot see (oneDNN's kernel on a
    packed weight bypasses the Python dispatch that FlopCounterMode listens to)."""
    from torch.nn.modules.module import register_module_forward_hook
    from torch.utils.flop_counter import FlopCounterMode

    packed = []

    def count_packed(module, inputs, output) -> None:
        if isinstance(module, PackedLinear):
            packed.append(module.flops(inputs[0]))

    handle = register_module_forward_hook(count_packed)
    try:
        with FlopCounterMode(display=False) as counter:
            output = call()
    finally:
        handle.remove()
    return counter.get_total_flops() + sum(packed), output
