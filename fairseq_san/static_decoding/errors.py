"""The one error the static decoder raises for a model or an option it does not support."""

from fairseq_san.errors import UsageError


class StaticDecoderError(UsageError):
    """``--san-decoding static`` cannot decode this model or honour this option; the message names
    it and the way out (fairseq's own decoder, ``--san-decoding fairseq``, the default).

    A UsageError, so that the plugin's command-line hook prints it as one line, like the other
    errors of bad input (fairseq_san/errors.py).
    """

    def __init__(self, what: str) -> None:
        super().__init__(
            f"--san-decoding static does not support {what}; decode with fairseq's own decoder "
            "(--san-decoding fairseq, the default) to use it"
        )
