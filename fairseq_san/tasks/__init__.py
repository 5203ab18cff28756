"""Tasks registered with fairseq."""
from . import language_modeling_san, translation_san  # noqa: F401
