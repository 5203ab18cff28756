"""The one error the static decoder raises for a model or an option it does not support."""

from fairseq_san.errors import UsageError


class StaticDecoderError(UsageError):
    """``--san-decoder static`` cannot decode this model or honour this option; the message names
    it and the way out (drop ``--san-decoder static``).

    A UsageError, so that the plugin's command-line hook prints it as one line, like the other
    errors of bad input (fairseq_san/errors.py).
    """

    def __init__(self, what: str) -> None:
        super().__init__(
            f"--san-decoder static does not support {what}; drop --san-decoder static "
            "(fairseq's own decoder) to use it"
        )
