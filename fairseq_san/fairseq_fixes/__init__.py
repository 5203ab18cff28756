"""Changes the plugin makes to fairseq's own behaviour, one module each, installed together.

``install()`` runs once, when the plugin registers with an imported fairseq (``fairseq_san``'s
``__init__``); every fix is idempotent and names, in its module's docstring, the upstream
behaviour it corrects.
"""


def install() -> None:
    """Install every fix for this process."""
    from fairseq_san.fairseq_fixes import literal_eval

    literal_eval.install()
