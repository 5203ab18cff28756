"""Models registered with fairseq."""

from .transformer_lm_san import TransformerLMSANModel
from .transformer_san import TransformerSANModel

# The plugin's models: those its options, checks and checkpoints belong to.
MODELS = (TransformerSANModel, TransformerLMSANModel)
