"""fairseq-san: Shared Attention Networks (Xiao et al., IJCAI 2019) as a fairseq plugin.

fairseq imports this package for ``--user-dir fairseq_san``; importing the models and the task
registers ``transformer_san`` and ``translation_san``. The pure-Python parts (``policy``, the
``fairseq-san-policy`` command) must stay fast and torch-free, so registration only happens when
fairseq itself is loaded (always the case under ``--user-dir``; elsewhere ``import fairseq`` first
or import ``fairseq_san.models`` directly).
"""

import sys

from fairseq_san import errors

if "fairseq" in sys.modules:
    from . import models, tasks  # noqa: F401  (registration side effects)

    sys.excepthook = errors.excepthook(sys.excepthook)
