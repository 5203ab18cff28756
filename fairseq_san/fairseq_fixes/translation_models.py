"""A translation model in a language-modelling task is one line.

Upstream behaviour corrected: fairseq's ``language_modeling`` task builds whatever model the
checkpoint or ``--arch`` names and then reads its ``supported_targets``, which an encoder-decoder
model lacks: fairseq-eval-lm of a translation checkpoint trained with fairseq's ``--arch
transformer`` (or fairseq-train ``--task language_modeling --arch transformer``) ended in
``AttributeError: 'TransformerModel' object has no attribute 'supported_targets'``. The plugin's
own translation models refuse it as they are built (``option_checks.check_translation_task``);
``install()`` wraps the task's ``build_model`` so that fairseq's refuse it the same way.
"""

import functools

from fairseq_san.fairseq_fixes.wrapping import wrap_once
from fairseq_san.models.option_checks import check_translation_task


def model_arch(args) -> str:
    """The architecture (or, without one, the model name) that ``args`` builds."""
    return getattr(args, "arch", None) or getattr(args, "_name", None) or ""


def check_language_model(task, args) -> None:
    """Refuse ``args``' model in ``task`` where its registered class is an encoder-decoder one."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY, FairseqEncoderDecoderModel

    arch = model_arch(args)
    model_class = ARCH_MODEL_REGISTRY.get(arch) or MODEL_REGISTRY.get(arch)
    if isinstance(model_class, type) and issubclass(model_class, FairseqEncoderDecoderModel):
        check_translation_task(task, arch)


def _refusing_translation_models(build_model):
    @functools.wraps(build_model)
    def wrapper(self, args, *rest, **kwargs):
        check_language_model(self, args)
        return build_model(self, args, *rest, **kwargs)

    return wrapper


def install() -> None:
    """Wrap ``LanguageModelingTask.build_model`` (idempotent)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    wrap_once(LanguageModelingTask, "build_model", _refusing_translation_models)
