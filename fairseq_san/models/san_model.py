"""What the plugin's two models (``transformer_san``, ``transformer_lm_san``) add to fairseq's
the same way, as a mixin before fairseq's model class: the hub interface (``HubModel``) and a
checkpoint fitted to the model's sharing policy before fairseq loads it."""

from typing import Callable, ClassVar, Dict

from fairseq.checkpoint_utils import prune_state_dict
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from torch import Tensor

from fairseq_san.models.checkpoint_policy import fit_checkpoint
from fairseq_san.models.hub_model import HubModel


class SANModel(HubModel):
    """A model mixin; ``checkpoint_check(model, state_dict)`` refuses, in one line, a checkpoint
    whose sharing this model cannot load (``models.checkpoint_policy``)."""

    checkpoint_check: ClassVar[Callable]

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
        state_dict = prune_state_dict(state_dict, model_cfg)
        fit_checkpoint(self, state_dict, type(self).checkpoint_check)
        return super().load_state_dict(state_dict, strict, model_cfg)
