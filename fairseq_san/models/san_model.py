"""What the plugin's two models (``transformer_san``, ``transformer_lm_san``) add to fairseq's
the same way, as a mixin before fairseq's model class: the hub interface (``HubModel``) and a
checkpoint fitted to the model's sharing policy before fairseq loads it."""

from typing import Callable, ClassVar, Dict

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
        lacks start from its blocks.
        """
        fit_checkpoint(self, state_dict, type(self).checkpoint_check)
        return super().load_state_dict(state_dict, strict, model_cfg, args)
