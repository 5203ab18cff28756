"""The one error the static decoder raises for a model or an option it does not support."""

from fairseq_san.errors import UsageError


FAIRSEQS_DECODER = (
    "decode with fairseq's own decoder (--san-decoding fairseq, the default) to use it"
)


class StaticDecoderError(UsageError):
    """``--san-decoding static`` cannot decode this model or honour this option; the message names
    it and the way out: fairseq's own decoder, or another choice of the static decoder's where
    only that choice is the problem (an execution or a precision this device does not run).

    A UsageError, so that the plugin's command-line hook prints it as one line, like the other
    errors of bad input (``fairseq_fixes.one_line_errors``).
    """

    def __init__(self, what: str, way_out: str = FAIRSEQS_DECODER) -> None:
        super().__init__(f"--san-decoding static does not support {what}; {way_out}")
