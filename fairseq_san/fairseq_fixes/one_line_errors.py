"""Bad input to a fairseq command as one line, ``fairseq-san: error: ...``, not a traceback.

Upstream behaviour corrected: fairseq's commands have no hook for a plugin's errors, so an error
the plugin raises while fairseq sets up (a bad policy, a refused checkpoint) or a missing path
named on the command line surfaces as a traceback from deep inside fairseq. ``install()`` chains
``fairseq_san.errors.excepthook`` (what is printed, and when) in front of ``sys.excepthook``.
"""

import sys

from fairseq_san import errors


def install() -> None:
    """Print the plugin's usage errors as one line, for this process (idempotent)."""
    if not getattr(sys.excepthook, "prints_one_line", False):
        sys.excepthook = errors.excepthook(sys.excepthook)
