"""Models registered with fairseq."""

from . import transformer_lm_san, transformer_san  # noqa: F401
