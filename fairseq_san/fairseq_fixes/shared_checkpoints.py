"""fairseq's own models (``--arch transformer``, ``transformer_lm``) given a checkpoint trained
with attention sharing or the average attention network: one line naming the plugin's model.

Upstream behaviour corrected: ``fairseq-train --arch transformer --restore-file`` (or
``--finetune-from-model``) of a ``transformer_san`` checkpoint trained with a sharing policy
fails in torch's ``load_state_dict`` (``RuntimeError``: every missing
``decoder.layers.N.self_attn.k_proj.weight`` of the layers that followed a block), which
fairseq's trainer re-raises as "Cannot load model parameters from checkpoint ...; please ensure
that the architectures match", a traceback. Only the first layer of a block has query/key
projections (``modules.shared_attention``); AAN's decoder has no self-attention projections at
all. When a model that is not the plugin's fails to load such a checkpoint, the error names its
sharing and the flags of the plugin's model that loads it. A checkpoint of other dictionaries
than the data's is said as the plugin's models say it (``checkpoints.vocabulary_mismatch``: the
entries of each dictionary), not as torch's size mismatch of the embeddings (fairseq-generate of
a ``transformer`` on another data directory), and one of another size (a ``transformer`` resumed
with other ``--encoder-layers``) as the plugin's say it (``check_checkpoint_size``: the first
difference); any other failure is fairseq's own.
"""

import functools
from typing import Dict, List, Optional

from torch import nn

from fairseq_san import policy as san_policy
from fairseq_san.checkpoints import vocabulary_mismatch_in
from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.model_overrides import plugin_model_classes
from fairseq_san.fairseq_fixes.wrapping import wrap_once

# Each function imports fairseq_san.models.checkpoint_policy where it uses it: importing
# fairseq_san.models imports fairseq, which registers the plugin, and so these fixes.


def trained_with(state_dict: Dict, policy: Dict[str, List[int]]) -> List[str]:
    """What of the plugin's models a checkpoint was trained with (sharing ``policy``, AAN)."""
    from fairseq_san.models.checkpoint_policy import decoder_self_attention_type

    blocks = (f"{kind} {san_policy.format_blocks(sizes)}" for kind, sizes in policy.items())
    features = [f"attention sharing ({', '.join(blocks)})"] if policy else []
    if decoder_self_attention_type(state_dict) == "aan":
        features.append("the average attention network (decoder self-attention aan)")
    return features


def plugin_model_flags(state_dict: Dict, policy: Dict[str, List[int]]) -> str:
    """The flags of the plugin's model that a checkpoint was saved from: its kind's task and
    arch, its sharing (``policy``, none when empty) and its decoder self-attention type."""
    from fairseq_san.models.checkpoint_policy import (
        MODEL_KINDS,
        attention_type_flags,
        has_encoder,
        sharing_flags,
    )

    flags = [MODEL_KINDS[has_encoder(state_dict)][2]]
    if policy:
        flags += sharing_flags(state_dict, policy)
    return " ".join(flags + attention_type_flags(state_dict))


def plugin_checkpoint_problem(model: nn.Module, state_dict: Dict) -> Optional[str]:
    """Why ``model``, not one of the plugin's, cannot load a checkpoint of the plugin's (trained
    with sharing or AAN): it lacks projections the model has; None for any other checkpoint."""
    from fairseq_san.models.checkpoint_policy import (
        is_fine_tuning,
        layers_of,
        missing_projections,
        policy_of_state_dict,
    )

    if isinstance(model, plugin_model_classes()):
        return None
    modules = missing_projections(model.state_dict(), state_dict)
    policy = policy_of_state_dict(state_dict, layers_of(state_dict))
    features = trained_with(state_dict, policy)
    if not modules or not features:
        return None
    fix = (
        f"To fine-tune from it, pass {plugin_model_flags(state_dict, {})} and any policy (with "
        "none, each layer starts from the projections of its block)"
        if is_fine_tuning()
        else f"To continue training it, pass {plugin_model_flags(state_dict, policy)}"
    )
    return (
        f"the checkpoint was trained with {' and '.join(features)}, which this model "
        f"({type(model).__name__}) has not: the checkpoint has no projections for "
        f"{', '.join(modules)}. {fix}"
    )


def _naming(load_state_dict):
    @functools.wraps(load_state_dict)
    def wrapper(model, state_dict, *args, **kwargs):
        from fairseq_san.models.checkpoint_policy import check_checkpoint_size

        try:
            return load_state_dict(model, state_dict, *args, **kwargs)
        except RuntimeError as error:
            problem = plugin_checkpoint_problem(model, state_dict)
            if problem is not None:
                raise UsageError(problem) from None
            mismatch = vocabulary_mismatch_in(error)
            if mismatch is not None:
                raise mismatch from None
            check_checkpoint_size(model, state_dict)
            raise

    return wrapper


def install() -> None:
    """Name a plugin's checkpoint where fairseq's models fail to load it (idempotent)."""
    from fairseq.models import BaseFairseqModel

    wrap_once(BaseFairseqModel, "load_state_dict", _naming)
