"""What the plugin's two models (``transformer_san``, ``transformer_lm_san``) add to fairseq's
the same way, as a mixin before fairseq's model class: the hub interface (``HubModel``) and a
checkpoint fitted to the model's sharing policy before fairseq loads it."""

import argparse
import contextlib
from typing import Callable, ClassVar, Dict, List, Mapping, Optional, Union

from fairseq.checkpoint_utils import prune_state_dict
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import DictConfig, open_dict
from torch import Tensor

from fairseq_san import checkpoints
from fairseq_san.errors import STORED_SOURCE, UsageError
from fairseq_san.models.checkpoint_policy import fit_checkpoint, key_mismatch
from fairseq_san.models.hub_model import HubModel


class SANModel(HubModel):
    """A model mixin; ``checkpoint_check(model, state_dict)`` refuses, in one line, a checkpoint
    whose sharing this model cannot load (``models.checkpoint_policy``)."""

    checkpoint_check: ClassVar[Callable]

    def half(self):
        """The model in float16, refusing a weight that float16 cannot hold
        (``checkpoints.refuse_beyond_float16``)."""
        checkpoints.refuse_beyond_float16(self.state_dict().items())
        return super().half()

    def load_state_dict(
        self, state_dict: Dict[str, Tensor], strict: bool = True, model_cfg=None, args=None
    ):
        """Load a checkpoint, dropping projections the current policy no longer uses.

        A checkpoint this model cannot load (other dictionaries or attention type, more sharing,
        K/V shared instead of S) gets a one-line error naming the cause instead of fairseq's list
        of keys and shapes. One it is fine-tuned from may have any policy: the projections it
        lacks start from its blocks. The layers ``--*-layers-to-keep`` keeps are pruned first, as
        fairseq does, so that the checkpoint is checked against the pruned model.
        """
        if model_cfg is None and args is not None:
            model_cfg = convert_namespace_to_omegaconf(args).model
        # fairseq's pruning clears ``*_layers_to_keep`` in ``model_cfg``: its own, below, keeps all
        state_dict = prune_state_dict(state_dict, pruning_config(model_cfg, state_dict))
        fit_checkpoint(self, state_dict, type(self).checkpoint_check)
        try:
            return super().load_state_dict(state_dict, strict, model_cfg)
        except RuntimeError as err:  # torch's list of every key (another layer option)
            problem = key_mismatch(err)
            if problem is None:
                raise
            raise UsageError(problem) from None


STACKS = ("encoder", "decoder")
# A model's configuration as fairseq hands it over: its config node, or a legacy namespace.
ModelConfig = Union[DictConfig, argparse.Namespace]
# The model configuration's key for the layers to keep a model was trained with, per stack.
TRAINING_PRUNING = "training_layers_to_keep"


def kept_layers(stack: str, value: object) -> List[int]:
    """The layers ``--STACK-layers-to-keep`` names: text ("0,2,4", as ``--model-overrides`` and
    fairseq's builds take it) or the list fairseq's parser makes of it; a UsageError for anything
    but distinct layer numbers (fairseq failed on int() deep in its pruning, or pruned every
    layer for a negative one)."""
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    try:
        layers = [int(part) for part in text.split(",")]
    except ValueError:
        layers = []
    if not layers or min(layers) < 0 or len(set(layers)) != len(layers):
        raise UsageError(
            f"--{stack}-layers-to-keep {text}: give distinct layer numbers from 0, e.g. 0,2,4"
        )
    return layers


def layers_to_keep_as_text(args: argparse.Namespace) -> None:
    """``--encoder-layers-to-keep 0,2`` checked (``kept_layers``) and as fairseq's models read
    it, "0,2": fairseq's parser turns the option into a list of ints (its dataclass field's
    type), and its transformer's ``build_model`` and ``checkpoint_utils.prune_state_dict`` split
    it as text (fairseq's own ``--arch transformer`` fails with ``'list' object has no attribute
    'split'``); ``--model-overrides`` gives text."""
    for stack in STACKS:
        value = getattr(args, f"{stack}_layers_to_keep", None)
        if value:
            layers = kept_layers(stack, value)
            setattr(args, f"{stack}_layers_to_keep", ",".join(str(layer) for layer in layers))


def record_training_pruning(args: argparse.Namespace) -> None:
    """Record in a model being trained (not a checkpoint's configuration, which carries the
    plugin's stamp) the layers ``--*-layers-to-keep`` keeps, as text, None for a stack kept
    whole: fairseq saves the option with a stack it stored pruned, and ``pruning_config`` tells
    that stack from an unpruned one of the same size given the option at decoding."""
    if not checkpoints.is_stamped(args):
        setattr(args, TRAINING_PRUNING, {
            stack: getattr(args, f"{stack}_layers_to_keep", None) or None for stack in STACKS
        })  # fmt: skip


def training_pruning(model_cfg: ModelConfig) -> Optional[Mapping]:
    """The layers to keep recorded by ``record_training_pruning``, None where none are (a
    checkpoint made before the record); a UsageError for a value ``--model-overrides`` set
    that is no mapping of stacks."""
    trained = getattr(model_cfg, TRAINING_PRUNING, None)
    if trained is not None and not isinstance(trained, Mapping):
        raise UsageError(
            f"{TRAINING_PRUNING} {trained!r} {STORED_SOURCE} is not the layers to keep per "
            "stack ({'encoder': None, 'decoder': '0,2'}): leave it out of --model-overrides"
        )
    return trained


def pruning_config(
    model_cfg: Optional[ModelConfig], state_dict: Dict[str, Tensor]
) -> Optional[ModelConfig]:
    """``model_cfg`` with the ``--*-layers-to-keep`` that fairseq's ``prune_state_dict`` can apply
    to this checkpoint, checked against its layers.

    fairseq's pruning drops every layer of a stack given none (the encoder's, where only the
    decoder's layers to keep are given): that stack keeps all its layers here. A stack already
    stored pruned (a model trained with the option saves its kept layers, and the option with
    them) is not pruned again: it holds as many layers as it keeps, and keeps the layers its
    training kept (``record_training_pruning``; a checkpoint made before that record is taken
    as stored pruned by the count alone). A layer the checkpoint has not is one error naming it.
    """
    if model_cfg is None:
        return model_cfg
    kept = layers_to_prune(model_cfg, state_dict)
    with open_dict(model_cfg) if isinstance(model_cfg, DictConfig) else contextlib.ExitStack():
        for stack in STACKS:
            if hasattr(model_cfg, f"{stack}_layers_to_keep"):
                setattr(model_cfg, f"{stack}_layers_to_keep", kept[stack])
    return model_cfg


def layers_to_prune(model_cfg: ModelConfig, state_dict: Dict[str, Tensor]) -> Dict[str, object]:
    """Per stack, the layers to keep that ``pruning_config`` hands fairseq's pruning: those the
    configuration gives, but None for a stack stored pruned, and where any stack is pruned,
    every layer of a stack given none."""
    kept = {stack: getattr(model_cfg, f"{stack}_layers_to_keep", None) for stack in STACKS}
    stored = {stack: checkpoints.stored_layers(state_dict, stack) for stack in STACKS}
    trained = training_pruning(model_cfg)
    for stack, layers in kept.items():
        if not layers:
            continue
        numbers = kept_layers(stack, layers)
        if len(numbers) == stored[stack] and (trained is None or trained.get(stack) == layers):
            kept[stack] = None  # stored pruned
        elif max(numbers) >= stored[stack]:
            raise UsageError(
                f"--{stack}-layers-to-keep {layers}: the checkpoint has {stored[stack]} "
                f"{stack} layers, 0 to {stored[stack] - 1}"
            )
    if any(kept.values()):
        for stack in STACKS:
            if not kept[stack] and stored[stack]:
                kept[stack] = ",".join(str(layer) for layer in range(stored[stack]))
    return kept
