"""``System``: what a worker decodes with, whichever its engine (``fairseq_system``,
``ctranslate2_system``)."""

from typing import Dict, Protocol

from fairseq_san.benchmark.config import DecodeOptions, Setting
from fairseq_san.benchmark.data import Batches
from fairseq_san.benchmark.timing import PassResult


class System(Protocol):
    """A model of one engine, by its row's name, decoding the benchmark's batches."""

    name: str

    def describe(self) -> Dict:
        """The report's record of the row (its ``kind``, decoder and precision)."""

    def decode(
        self,
        batches: Batches,
        setting: Setting,
        options: DecodeOptions,
        keep_hypotheses: bool = False,
        measure_cache: bool = False,
    ) -> PassResult:
        """One pass of ``setting`` over the batches, timed around each call of the engine; the
        best hypotheses with ``keep_hypotheses``, the cache's peak bytes with
        ``measure_cache``."""
