"""Tasks registered with fairseq."""

from .language_modeling_san import LanguageModelingSANTask
from .translation_san import TranslationSANTask

# The plugin's tasks: those its options belong to.
TASKS = (TranslationSANTask, LanguageModelingSANTask)
