"""Which sharing policy a saved model was trained with, read from its parameters, and whether a
model can load it.

Only the first layer of a block has a key projection, and each role of a following layer keeps
other projections (``modules.shared_attention.KEPT_PROJECTIONS``), so a checkpoint's parameter
names say its policy and how its blocks shared; AAN's gate says its decoder self-attention type. A
model can load a checkpoint when its own policy shares at least as much (each trained block inside
one of its blocks): the projections it no longer uses are dropped on load; a policy that shares
less lacks trained projections. Its embeddings must have the checkpoint's vocabulary sizes, and it
must be the same kind of model (with an encoder or without: a language model). What a block's
following layers kept says how they shared: own V (SAN's weights S) or own Q (a language model's
keys and values, ``--san-self-share kv``).

Fine-tuning (``--finetune-from-model``, the learn-to-share loop's ``--warm-start``) may change the
policy freely: a layer that leads a block in the model but followed one in the checkpoint starts
from the projections of the checkpoint's block leader, the ones its attention was computed with.
"""

import contextlib
import contextvars
import json
import logging
import re
from typing import Callable, Dict, Iterator, List, Optional

from torch import nn

from fairseq_san import options
from fairseq_san import policy as san_policy
from fairseq_san.checkpoints import EMBEDDINGS, vocabulary_mismatch
from fairseq_san.errors import UsageError
from fairseq_san.modules.shared_attention import (
    LEADER_PROJECTION,
    PROJECTIONS,
    AttentionRole,
    follower_role,
)

logger = logging.getLogger(__name__)

PROJECTION_KEY = re.compile(
    r"^(?P<module>(?P<stack>encoder|decoder)\.layers\.(?P<layer>\d+)\."
    r"(?P<attn>self_attn|encoder_attn))"
    r"\.(?P<proj>[qkv]_proj)\.(weight|bias)$"
)
# A pre-norm decoder layer's encoder-decoder attention norm, which a following layer of a block
# has not (``transformer_san.drop_unused_query_norms``); its groups are PROJECTION_KEY's.
QUERY_NORM_KEY = re.compile(
    r"^(?P<module>(?P<stack>decoder)\.layers\.(?P<layer>\d+)\.(?P<attn>encoder_attn))"
    r"_layer_norm\.(weight|bias)$"
)
LAYER_KEY = re.compile(r"^(?P<stack>encoder|decoder)\.layers\.(?P<layer>\d+)\.")
ANOTHER_SIZE = (
    "it was trained with another architecture; build the model it was trained with (its --arch "
    "and size flags when training on, no size keys in --model-overrides when decoding)"
)
# torch's refusal of a state dict whose keys are not the model's (``strict``): its key lists.
KEY_LIST = re.compile(r'(Missing|Unexpected) key\(s\) in state_dict: ((?:"[^"]*"(?:, )?)+)')
ANOTHER_LAYOUT = (
    "it was trained with other layer options (--encoder-normalize-before, "
    "--decoder-normalize-before, --encoder-learned-pos, --decoder-learned-pos, "
    "--layernorm-embedding, ...); build the model it was trained with (leave those keys out of "
    "--model-overrides when decoding)"
)
# Training under another policy from a checkpoint (``start_from_checkpoint_blocks``).
FINE_TUNE = "to train this policy from it, start a new run with --finetune-from-model"
# Only the average attention network (``modules.average_attention``) has a gate.
AAN_KEY = re.compile(r"^decoder\.layers\.\d+\.self_attn\.gate\.weight$")
ATTENTION_TYPES = {"dot": "dot-product attention", "aan": "the average attention network"}
# The option value (``--san-encdec-share``, ``--san-self-share``) that gives a block's following
# layers each role.
SHARE_OF_ROLE = {
    AttentionRole.WEIGHTS: options.WEIGHTS,
    AttentionRole.CONTEXT: options.OUTPUT,
    AttentionRole.KEYS_VALUES: options.KV,
}
# A model with an encoder translates, one without is a language model: {has an encoder: (what it
# is, its checkpoints, the flags that train it)}.
MODEL_KINDS = {
    True: ("a translation model (an encoder and a decoder)", "a translation checkpoint",
           "--task translation_san --arch transformer_san"),
    False: ("a language model (a decoder only)", "a language model's checkpoint",
            "--task language_modeling_san --arch transformer_lm_san"),
}  # fmt: skip


def drop_unused_projections(model: nn.Module, state_dict: Dict) -> List[str]:
    """Remove from ``state_dict`` the projections ``model`` no longer has, and return their keys:
    a decode-time policy that shares more than the checkpoint leaves its followers' projections
    unused (and a pre-norm follower's query norm, which a checkpoint made before it was dropped
    holds too)."""
    own_keys = set(model.state_dict())
    dropped = [k for k in state_dict if k not in own_keys and shared_parameter(k) is not None]
    for key in dropped:
        del state_dict[key]
    return dropped


def log_dropped_projections(dropped: List[str]) -> None:
    """Say which trained projections (``drop_unused_projections``' keys) a fine-tuned model left
    behind, a pre-norm layer's query norm with them: its policy shares more than the
    checkpoint's, and they went without a word."""
    names: Dict[str, List[str]] = {}
    for key in sorted(dropped, key=key_order):
        found = shared_parameter(key)
        names.setdefault(found.group("module"), []).append(shared_part(found))
    for module, projections in names.items():
        logger.info(
            "fine-tuning from a checkpoint that shared otherwise: %s drops its trained %s (this "
            "policy shares that attention)", module, ", ".join(dict.fromkeys(projections)),
        )  # fmt: skip


def check_checkpoint_fits(model: nn.Module, state_dict: Dict) -> None:
    """Raise a one-line error when ``model`` cannot load ``state_dict``, naming what differs.

    fairseq's own errors list every missing key or mismatched shape; these say the cause: the kind
    of model, the dictionaries, the decoder self-attention type, the encoder-decoder share mode or
    the policy.
    """
    check_checkpoint_model(model, state_dict)
    check_checkpoint_has_projections(model, state_dict)


def check_checkpoint_model(model: nn.Module, state_dict: Dict) -> None:
    """Refuse a checkpoint of another model than ``model`` whatever its policy: the other kind
    of model, other dictionaries, another size or decoder self-attention type."""
    check_checkpoint_model_kind(model, state_dict)
    check_checkpoint_vocabulary(model, state_dict)
    check_checkpoint_size(model, state_dict)
    check_checkpoint_attention_type(model, state_dict)


_FINE_TUNING = contextvars.ContextVar("fine_tuning", default=False)


@contextlib.contextmanager
def fine_tuning() -> Iterator[None]:
    """While fairseq-train loads its ``--finetune-from-model`` checkpoint (set by
    ``fairseq_fixes.restore_file``): the model then starts from it under any policy."""
    token = _FINE_TUNING.set(True)
    try:
        yield
    finally:
        _FINE_TUNING.reset(token)


def is_fine_tuning() -> bool:
    """Whether the checkpoint being loaded is fairseq-train's ``--finetune-from-model``."""
    return _FINE_TUNING.get()


# The checkpoint fairseq-train resumes from while it loads it, and whether the run restarts from
# its weights (--reset-optimizer); None while another checkpoint loads (decoding, the hub).
_RESUMING: contextvars.ContextVar = contextvars.ContextVar("resuming", default=None)


@contextlib.contextmanager
def resuming(path: str, restarts: bool) -> Iterator[None]:
    """While fairseq-train loads the checkpoint ``path`` it resumes (set by
    ``fairseq_fixes.restore_file``): a policy that shares more than the checkpoint's is refused
    there (``check_resumed_sharing``), as a decode-time policy is not."""
    token = _RESUMING.set((path, restarts))
    try:
        yield
    finally:
        _RESUMING.reset(token)


def fit_checkpoint(model: nn.Module, state_dict: Dict, check: Callable) -> None:
    """Make ``state_dict`` fit ``model``'s policy: a fine-tuning checkpoint's lacking projections
    started from its blocks, any other's ``check``-ed (refused in one line if it cannot fit);
    then the projections the policy does not use dropped."""
    if is_fine_tuning():
        start_from_checkpoint_blocks(model, state_dict)
    else:
        check(model, state_dict)
        if _RESUMING.get() is not None:
            check_resumed_sharing(model, state_dict, *_RESUMING.get())
    dropped = drop_unused_projections(model, state_dict)
    if is_fine_tuning():
        log_dropped_projections(dropped)


def check_resumed_sharing(model: nn.Module, state_dict: Dict, path: str, restarts: bool) -> None:
    """Refuse to resume fairseq-train from ``path`` under a policy that shares more than its
    checkpoint (or a following layer's other share mode): its unused projections were dropped
    and the run trained on under another policy than it was started with, without a word where
    no optimizer state was saved (``--no-save-optimizer-state``; else torch's mismatch). A run
    that restarts from the weights (``restarts``: ``--reset-optimizer``) is logged."""
    own = model.state_dict()
    unused = sorted({found.group("module") for found in map(PROJECTION_KEY.match, state_dict)
                     if found and found.string not in own})  # fmt: skip
    if not unused:
        return
    layers, kinds = layers_of(own), model_kinds(own)
    trained, built = policy_of_state_dict(state_dict, layers), policy_of_state_dict(own, layers)
    said = (
        f"{path} was trained with {sharing_shown(state_dict, trained, kinds)}, and this run's "
        f"model has {sharing_shown(own, built, kinds)}: it would drop the projections of "
        f"{', '.join(unused)}"
    )
    if restarts:
        logger.warning("%s; --reset-optimizer trains on from its weights under this policy", said)
        return
    raise san_policy.PolicyError(
        f"{said} and train on under another policy than the run was started with. To resume it, "
        f"pass {trained_model_flags(model, state_dict)}; {FINE_TUNE} (or --reset-optimizer to go "
        "on in this run from its weights)"
    )


def sharing_shown(state_dict: Dict, policy: Dict, kinds: List[str]) -> str:
    """A model's attention sharing as messages say it: its policy, and the encoder-decoder
    share mode where it shares that attention."""
    mode = encdec_share(state_dict, policy)
    shown = f"attention sharing {san_policy.format_policy(policy, kinds)}"
    return shown + (f" (--san-encdec-share {mode})" if mode else "")


def start_from_checkpoint_blocks(model: nn.Module, state_dict: Dict) -> None:
    """Fill in ``state_dict`` the projections ``model``'s policy needs and the checkpoint's lacks,
    from the checkpoint's leader of that layer's block: a fine-tuned model's policy may share
    less than the checkpoint's, or move its blocks (``{3,3}`` -> ``{4,2}``), or change what
    following layers share (``--san-encdec-share``, ``--san-self-share``).

    A layer that followed a block used the leader's S (Eq. 4) or A (Eq. 5), computed with the
    leader's projections; starting its own from them is the nearest start to what it computed.
    A checkpoint of another model (kind, dictionaries, size, attention type) is still refused.
    """
    check_checkpoint_model(model, state_dict)
    own = model.state_dict()
    layers = layers_of(own)
    trained = policy_of_state_dict(state_dict, layers)
    found_keys = filter(None, map(PROJECTION_KEY.match, own))
    lacking = [found for found in found_keys if found[0] not in state_dict]
    started: Dict[tuple, List[str]] = {}
    for found in sorted(lacking, key=lambda found: key_order(found[0])):
        module, source = found.group("module"), checkpoint_leader_module(found, trained, layers)
        leader_key = found[0].replace(module, source, 1)
        if leader_key in state_dict:
            state_dict[found[0]] = state_dict[leader_key].clone()
            started.setdefault((module, source), []).append(found.group("proj"))
    for (module, source), projections in started.items():
        logger.info(
            "fine-tuning from a checkpoint that shared otherwise: %s starts with %s's %s",
            module, source, ", ".join(dict.fromkeys(projections)),
        )  # fmt: skip
    start_query_norms(own, state_dict, trained, layers)


def start_query_norms(own: Dict, state_dict: Dict, trained: Dict, layers: Dict[str, int]) -> None:
    """Fill in ``state_dict`` the pre-norm query norms ``own`` (the model's state dict) has and
    the checkpoint's lacks (its following layers had none) from the checkpoint's block leader."""
    for found in filter(None, map(QUERY_NORM_KEY.match, own)):
        if found[0] not in state_dict:
            source = checkpoint_leader_module(found, trained, layers)
            leader_key = found[0].replace(found.group("module"), source, 1)
            if leader_key in state_dict:
                state_dict[found[0]] = state_dict[leader_key].clone()


def shared_parameter(key: str) -> Optional[re.Match]:
    """``key``'s match of ``PROJECTION_KEY`` or ``QUERY_NORM_KEY``: a parameter that a layer
    following in a block of shared attention has not; None for any other key."""
    return PROJECTION_KEY.match(key) or QUERY_NORM_KEY.match(key)


def shared_part(found: re.Match) -> str:
    """The part of its attention module that ``shared_parameter``'s match ``found`` is a parameter
    of: ``q_proj``, ``k_proj``, ``v_proj`` or ``encoder_attn_layer_norm``."""
    return found.group("proj") if found.re is PROJECTION_KEY else f"{found['attn']}_layer_norm"


def key_order(key: str) -> tuple:
    """``shared_parameter`` keys by stack, layer, module, then q, k, v and the norm."""
    found = shared_parameter(key)
    part = "qkv".index(found.group("proj")[0]) if found.re is PROJECTION_KEY else 3
    return found.group("stack"), int(found.group("layer")), found.group("attn"), part, key


def checkpoint_leader_module(found: re.Match, trained: Dict, layers: Dict[str, int]) -> str:
    """The attention module (``decoder.layers.3.self_attn``) that led, in the checkpoint, the
    block of the module of ``found`` (a ``PROJECTION_KEY`` or ``QUERY_NORM_KEY`` match); itself
    where it led one."""
    stack, attention, layer = found.group("stack"), found.group("attn"), int(found.group("layer"))
    kind = next(k for k, module in san_policy.KIND_MODULES.items() if module == (stack, attention))
    leader = san_policy.block_leaders(trained.get(kind), layers[stack])[layer]
    return f"{stack}.layers.{leader}.{attention}"


def has_encoder(state_dict: Dict) -> bool:
    return any(key.startswith("encoder.") for key in state_dict)


def check_checkpoint_model_kind(model: nn.Module, state_dict: Dict) -> None:
    """Refuse a language model's checkpoint in a translation model, or the reverse (fairseq-train
    --restore-file or --finetune-from-model builds the model from its own flags): its parameters
    would read as other dictionaries, more sharing, or fairseq's "architectures match"."""
    trained, built = has_encoder(state_dict), has_encoder(model.state_dict())
    if trained == built:
        return
    (kind, _, flags), (own_kind, checkpoints, _) = MODEL_KINDS[trained], MODEL_KINDS[built]
    raise UsageError(
        f"the checkpoint is {kind}, and this model is {own_kind}: restore or fine-tune from "
        f"{checkpoints}; to train the checkpoint's model on, pass {flags}"
    )


def check_checkpoint_vocabulary(model: nn.Module, state_dict: Dict) -> None:
    """Refuse a checkpoint whose embeddings have other sizes than the model's dictionaries."""
    own = model.state_dict()
    sizes = {
        side: (len(state_dict[key]), len(own[key]))
        for side, key in EMBEDDINGS.items()
        if key in state_dict and key in own
    }
    mismatch = vocabulary_mismatch(sizes)
    if mismatch is not None:
        raise mismatch


def stack_depths(state_dict: Dict) -> Dict[str, int]:
    """The number of layers of each stack (``encoder``, ``decoder``) a state dict holds."""
    depths: Dict[str, int] = {}
    for key in state_dict:
        found = LAYER_KEY.match(key)
        if found:
            stack, index = found.group("stack"), int(found.group("layer"))
            depths[stack] = max(depths.get(stack, 0), index + 1)
    return depths


def check_checkpoint_size(model: nn.Module, state_dict: Dict) -> None:
    """Refuse a checkpoint of another size than the model (layers, widths), naming the first
    difference, instead of fairseq's list of every mismatched shape."""
    own = model.state_dict()
    trained, built = stack_depths(state_dict), stack_depths(own)
    for stack in sorted(set(trained) & set(built)):
        if trained[stack] != built[stack]:
            kept = (f"; a model trained with --{stack}-layers-to-keep holds the layers it kept"
                    if trained[stack] < built[stack] else "")  # fmt: skip
            raise UsageError(
                f"the checkpoint has {trained[stack]} {stack} layers, this model "
                f"{built[stack]} (--{stack}-layers{kept}): {ANOTHER_SIZE}"
            )
    for key, tensor in state_dict.items():
        if key in own and tuple(own[key].shape) != tuple(tensor.shape):
            raise UsageError(
                f"the checkpoint's {key} has shape {tuple(tensor.shape)}, this model's "
                f"{tuple(own[key].shape)}: {ANOTHER_SIZE}"
            )


def key_mismatch(error: RuntimeError) -> Optional[str]:
    """torch's refusal of a checkpoint's keys (``load_state_dict``'s "Missing key(s) ...", every
    key listed) as one line naming the first and the likely cause; None for any other error.
    Called after the checks above, which name a policy's, size's or kind's difference."""
    found = KEY_LIST.search(str(error))
    if found is None:
        return None
    keys = re.findall(r'"([^"]*)"', found.group(2))
    more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
    said = "lacks" if found.group(1) == "Missing" else "has"
    other = "this model has" if said == "lacks" else "this model has not"
    return f"the checkpoint {said} {keys[0]}{more}, which {other}: {ANOTHER_LAYOUT}"


def decoder_self_attention_type(state_dict: Dict) -> str:
    """"aan" when the decoder's self-attention is the average attention network, else "dot"."""
    return "aan" if any(AAN_KEY.match(key) for key in state_dict) else "dot"


def check_checkpoint_attention_type(model: nn.Module, state_dict: Dict) -> None:
    """Refuse a checkpoint whose decoder self-attention type is not the model's."""
    trained = decoder_self_attention_type(state_dict)
    built = decoder_self_attention_type(model.state_dict())
    if trained == built:
        return
    if is_fine_tuning():
        flags = " ".join(attention_type_flags(state_dict, built))
        raise san_policy.PolicyError(
            f"the checkpoint's decoder self-attention is {trained} ({ATTENTION_TYPES[trained]}) "
            f"but this model's is {built} ({ATTENTION_TYPES[built]}), whose parameters are "
            "others: --finetune-from-model starts from a checkpoint of the same attention type; "
            f"fine-tune it with {flags} (a sharing policy of its own is fine), or train this "
            "model from scratch"
        )
    raise san_policy.PolicyError(
        f"the checkpoint's decoder self-attention is {trained} ({ATTENTION_TYPES[trained]}) but "
        f"this model's is {built} ({ATTENTION_TYPES[built]}). To continue training it, pass "
        f"{trained_model_flags(model, state_dict)}; to decode it, leave "
        "decoder_self_attention_type out of --model-overrides."
    )


def trained_model_flags(model: nn.Module, state_dict: Dict) -> str:
    """The command-line flags that build the model a checkpoint was saved from."""
    layers = layers_of(model.state_dict())
    flags = sharing_flags(state_dict, policy_of_state_dict(state_dict, layers))
    built = decoder_self_attention_type(model.state_dict())
    return " ".join(flags + attention_type_flags(state_dict, built))


def attention_type_flags(state_dict: Dict, built: str = "dot") -> List[str]:
    """The ``--decoder-self-attention-type`` that rebuilds a checkpoint's decoder self-attention,
    unless it and the model's (``built``) are both dot-product (an AAN architecture sets aan, so
    dot must then be given)."""
    trained = decoder_self_attention_type(state_dict)
    return [] if trained == built == "dot" else [f"--decoder-self-attention-type {trained}"]


def sharing_flags(state_dict: Dict, policy: Dict[str, List[int]]) -> List[str]:
    """The flags that rebuild a checkpoint's sharing: its ``policy`` (read from its parameters)
    and what its following layers shared (``--san-encdec-share``, a language model's
    ``--san-self-share``)."""
    flags = [f"--san-policy '{json.dumps(policy)}'"]
    if options.LM_KIND in policy and not has_encoder(state_dict):
        flags.append(f"--san-self-share {self_share(state_dict, policy[options.LM_KIND])}")
    share = encdec_share(state_dict, policy)
    if share is not None:
        flags.append(f"--san-encdec-share {share}")
    return flags


def layers_of(state_dict: Dict) -> Dict[str, int]:
    """The layers of each stack a model's state dict holds; a language model's encoder has none,
    another model's (RoBERTa's ``encoder.sentence_encoder``) maybe neither."""
    return {"encoder": 0, "decoder": 0, **stack_depths(state_dict)}


def model_kinds(own: Dict) -> List[str]:
    """The kinds of attention a model (``own``, its state dict) has: a language model's decoder
    has self-attention only."""
    return [
        kind
        for kind, (stack, attention) in san_policy.KIND_MODULES.items()
        if any(key.startswith(f"{stack}.layers.0.{attention}.") for key in own)
    ]


def missing_projections(own: Dict, state_dict: Dict) -> List[str]:
    """The attention modules (``decoder.layers.3.self_attn``) whose projections the model
    (``own``, its state dict) has and the checkpoint lacks: it shared more than the model."""
    needed = {PROJECTION_KEY.match(k).group("module") for k in own if PROJECTION_KEY.match(k)
              and k not in state_dict}  # fmt: skip
    return sorted(needed)


def check_checkpoint_has_projections(model: nn.Module, state_dict: Dict) -> None:
    """Raise PolicyError naming the attention modules whose projections the checkpoint lacks.

    This is the one test of whether a checkpoint can run under the model's policy: a policy may
    share more than the checkpoint's (each trained block inside a requested block), never less,
    since only the first layer of a block computes S and A. It fails when training resumes
    without the policy flags the run was started with, or when a decode-time policy shares less
    than the checkpoint; the message gives the flags that rebuild the checkpoint's model. With
    the same policy or one that shares more (which the checkpoint's projections serve), only the
    encoder-decoder share mode can differ: the message says so (it named the policy's blocks,
    whose advice the policy followed).
    """
    own = model.state_dict()
    modules = missing_projections(own, state_dict)
    if not modules:
        return
    layers, kinds = layers_of(own), model_kinds(own)
    trained, built = policy_of_state_dict(state_dict, layers), policy_of_state_dict(own, layers)
    flags = trained_model_flags(model, state_dict)
    trained_shown = san_policy.format_policy(trained, kinds)
    built_shown = san_policy.format_policy(built, kinds)
    shares_as_much = refines(trained, built, layers)  # built's blocks join trained's whole
    if shares_as_much and encdec_share(state_dict, trained) != encdec_share(own, built):
        raise san_policy.PolicyError(
            f"the checkpoint shares the encoder-decoder attention output "
            f"(--san-encdec-share {encdec_share(state_dict, trained)}) but this model shares "
            f"only its weights (--san-encdec-share {encdec_share(own, built)}): it has no V "
            f"projections for {', '.join(modules)}. To continue training it, pass {flags}; to "
            "decode it, leave san_encdec_share out of --model-overrides."
        )
    if not refines(built, trained, layers):
        raise san_policy.PolicyError(
            f"the checkpoint's attention sharing ({trained_shown}) and this model's "
            f"({built_shown}) have blocks with other borders: it has "
            f"no projections for {', '.join(modules)}, which followed a block's first layer in the "
            f"checkpoint. To continue training it, pass {flags}; {FINE_TUNE}; to decode it, use a "
            "policy whose blocks each join whole blocks of the checkpoint's."
        )
    raise san_policy.PolicyError(
        f"the checkpoint was trained with more attention sharing ({trained_shown}) than this "
        f"model ({built_shown}): it has no projections "
        f"for {', '.join(modules)}. To continue training it, pass {flags}; {FINE_TUNE}; to "
        "decode it, use a policy that shares at least as much as the checkpoint's."
    )


def starts_of(policy: Dict, kind: str, layers: Dict[str, int]) -> set:
    """The first layers of the blocks of ``kind`` under ``policy`` (every layer when unshared)."""
    return set(san_policy.block_starts(policy.get(kind), layers[san_policy.KIND_TABLE[kind].stack]))


def refines(built: Dict, trained: Dict, layers: Dict[str, int]) -> bool:
    """Whether ``built`` splits each block of ``trained`` only at its borders or inside it, for
    every kind: a model that shares less than the checkpoint, not one whose blocks moved."""
    return all(
        starts_of(trained, kind, layers) <= starts_of(built, kind, layers)
        for kind in san_policy.KINDS
    )


def policy_of_state_dict(state_dict: Dict, layers: Dict[str, int]) -> Dict[str, List[int]]:
    """The sharing policy a model's parameters were saved with.

    The first layer of a block is the only one with its ``LEADER_PROJECTION`` (k_proj); a kind
    without any (AAN) or with one in every layer is not shared.
    """
    policy = {}
    for kind, (stack, attr) in san_policy.KIND_MODULES.items():
        starts = [
            index
            for index in range(layers[stack])
            if f"{stack}.layers.{index}.{attr}.{LEADER_PROJECTION}.weight" in state_dict
        ]
        if 0 < len(starts) < layers[stack]:
            policy[kind] = san_policy.blocks_from_starts(starts, layers[stack])
    return policy


def encdec_share(state_dict: Dict, policy: Dict) -> Optional[str]:
    """The ``--san-encdec-share`` mode of shared encoder-decoder attention; None when unshared."""
    if "decoder_encdec" not in policy:
        return None
    return followers_share(state_dict, policy["decoder_encdec"], "encoder_attn")


def self_share(state_dict: Dict, blocks: List[int]) -> str:
    """How a language model's shared decoder self-attention was trained (``--san-self-share``)."""
    return followers_share(state_dict, blocks, "self_attn")


def followers_share(state_dict: Dict, blocks: List[int], attention: str) -> str:
    """What the following layers of the decoder's ``blocks`` of ``attention`` shared with their
    block's first layer (``SHARE_OF_ROLE``): their role, read from the projections they kept
    (``KEPT_PROJECTIONS``)."""
    leaders = san_policy.block_leaders(blocks, sum(blocks))
    followers = [index for index, leader in enumerate(leaders) if index != leader]
    kept = tuple(
        name
        for name in PROJECTIONS
        if any(f"decoder.layers.{index}.{attention}.{name}.weight" in state_dict
               for index in followers)
    )  # fmt: skip
    role = follower_role(kept)
    if role is None:
        raise UsageError(
            f"the checkpoint's following decoder layers of {attention} keep the projections "
            f"{', '.join(kept)}, which no way of sharing leaves: it was not saved by a SAN model"
        )
    return SHARE_OF_ROLE[role]


def check_lm_checkpoint_fits(model: nn.Module, state_dict: Dict) -> None:
    """A language model's ``check_checkpoint_fits``: also refuse a checkpoint shared the other
    way (K/V or S): its following layers were trained without the projections that the other
    kind of sharing needs."""
    check_checkpoint_model(model, state_dict)
    own = model.state_dict()
    trained = policy_of_state_dict(state_dict, layers_of(own)).get(options.LM_KIND)
    wanted = policy_of_state_dict(own, layers_of(own)).get(options.LM_KIND)
    trained_share = trained and self_share(state_dict, trained)
    if trained and wanted and trained_share != model.self_share:
        raise san_policy.PolicyError(
            f"the checkpoint was trained with {options.SHARE_NAMES[trained_share]} "
            f"(--san-self-share {trained_share}), this model is built with "
            f"{options.SHARE_NAMES[model.self_share]} (--san-self-share {model.self_share}): its "
            f"following layers lack the projections that needs. To continue training it, pass "
            f"{trained_model_flags(model, state_dict)}; to decode it, leave san_self_share out "
            "of --model-overrides."
        )
    check_checkpoint_has_projections(model, state_dict)
