"""Which sharing policy a saved model was trained with, read from its parameters.

Only the first layer of a block has query/key projections (``modules.shared_attention``), so a
checkpoint's parameter names say its policy. A model can load a checkpoint when its own policy
shares at least as much (each trained block inside one of its blocks): the projections it no
longer uses are dropped on load; a policy that shares less lacks trained projections.
"""

import json
import re
from typing import Dict, List

from torch import nn

from fairseq_san import policy as san_policy

PROJECTION_KEY = re.compile(
    r"^(?P<module>(?P<stack>encoder|decoder)\.layers\.(?P<layer>\d+)\.(?P<attn>self_attn|encoder_attn))"
    r"\.(?P<proj>[qkv]_proj)\.(weight|bias)$"
)


def check_checkpoint_has_projections(model: nn.Module, state_dict: Dict) -> None:
    """Raise PolicyError naming the attention modules whose projections the checkpoint lacks.

    This is the one test of whether a checkpoint can run under the model's policy: a policy may
    share more than the checkpoint's (each trained block inside a requested block), never less,
    since only the first layer of a block computes S and A. It fails when training resumes
    without the policy flags the run was started with, or when a decode-time policy shares less
    than the checkpoint; the message gives the flags that rebuild the checkpoint's model.
    """
    own = model.state_dict()
    needed = [k for k in own if PROJECTION_KEY.match(k) and k not in state_dict]
    if not needed:
        return
    modules = sorted({PROJECTION_KEY.match(k).group("module") for k in needed})
    layers = {"encoder": len(model.encoder.layers), "decoder": len(model.decoder.layers)}
    trained = policy_of_state_dict(state_dict, layers)
    flags = f"--san-policy '{json.dumps(trained)}'"
    if "decoder_encdec" in trained:
        share = "weights" if shares_encdec_weights_only(state_dict, trained) else "output"
        flags += f" --san-encdec-share {share}"
    raise san_policy.PolicyError(
        f"the checkpoint was trained with more attention sharing "
        f"({san_policy.format_policy(trained)}) than this model "
        f"({san_policy.format_policy(policy_of_state_dict(own, layers))}): it has no projections "
        f"for {', '.join(modules)}. To continue training it, pass {flags}; to decode it, use a "
        "policy that shares at least as much as the checkpoint's."
    )


def policy_of_state_dict(state_dict: Dict, layers: Dict[str, int]) -> Dict[str, List[int]]:
    """The sharing policy a model's parameters were saved with.

    The first layer of a block is the only one with a k_proj (``modules.shared_attention``); a
    kind without any (AAN) or with one in every layer is not shared.
    """
    policy = {}
    for kind, (stack, attr) in san_policy.KIND_MODULES.items():
        leaders = [
            index
            for index in range(layers[stack])
            if f"{stack}.layers.{index}.{attr}.k_proj.weight" in state_dict
        ]
        if 0 < len(leaders) < layers[stack]:
            policy[kind] = san_policy.blocks_from_leaders(leaders, layers[stack])
    return policy


def shares_encdec_weights_only(state_dict: Dict, policy: Dict) -> bool:
    """Whether shared encoder-decoder layers kept their own V (``--san-encdec-share weights``)."""
    blocks = policy["decoder_encdec"]
    leaders = san_policy.block_leaders(blocks, sum(blocks))
    return any(
        f"decoder.layers.{index}.encoder_attn.v_proj.weight" in state_dict
        for index, leader in enumerate(leaders)
        if index != leader
    )
