"""fairseq-san: Shared Attention Networks (Xiao et al., IJCAI 2019) as a fairseq plugin.

fairseq imports this package for ``--user-dir fairseq_san``; importing the models and the task
registers ``transformer_san`` and ``translation_san``. The pure-Python parts (``policy``, the
``fairseq-san-policy`` command) must stay fast and torch-free, so registration only happens when
fairseq itself is loaded (always the case under ``--user-dir``; elsewhere ``import fairseq`` first
or import ``fairseq_san.models`` directly).
"""

import sys

from fairseq_san.policy import PolicyError


def _report_policy_errors(previous_hook):
    """An excepthook that prints a bad policy as one line, not a traceback from inside fairseq."""

    def hook(exc_type, exc, traceback):
        if issubclass(exc_type, PolicyError):
            print(f"fairseq-san: error: {exc}", file=sys.stderr)
        else:
            previous_hook(exc_type, exc, traceback)

    return hook


if "fairseq" in sys.modules:
    from . import models, tasks  # noqa: F401  (registration side effects)
    from . import clean_exit  # noqa: F401  (fairseq's batch loaders stop before exit)

    sys.excepthook = _report_policy_errors(sys.excepthook)
