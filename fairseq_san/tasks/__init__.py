"""Tasks registered with fairseq."""
from . import translation_san  # noqa: F401
