"""Models registered with fairseq."""

from . import transformer_san  # noqa: F401
