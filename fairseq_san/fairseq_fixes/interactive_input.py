"""fairseq-interactive's input read as UTF-8 text, strictly, and named when it is not.

Upstream behaviour corrected: fairseq-interactive reads its input (``--input FILE``, or ``-``:
standard input) in ``fairseq_cli.interactive.buffered_read``. A file is decoded as strict UTF-8,
so a byte that is not UTF-8 ends the command with a ``UnicodeDecodeError`` traceback that names
neither the input nor the fix. Standard input is decoded with Python's locale settings: under
the C or C.UTF-8 locale with ``surrogateescape``, so such bytes silently become unknown words
(or make sentencepiece fail), a wrong translation without a word.

The plugin cannot see the input earlier (fairseq reads it, for any ``--task``), so
``install()``, run when the plugin registers, wraps ``buffered_read`` once when
fairseq-interactive is the running command: standard input is switched to strict UTF-8 and a
decoding error becomes one line naming the input (a gzip-compressed file said as such: it was
"byte 0x8b", with advice to convert from latin1). A UTF-8 byte-order mark at the start of the
input (a file saved by a Windows editor) is dropped: fairseq read it as part of the first word,
which became the unknown word in S-0's translation without a word.

fairseq-interactive numbers its output across buffers (``S-N``: the lines read before the
buffer, plus the id in the buffer's batches), and gives the task samples without ids: the
plugin's messages named a sentence by its row in the batch ("sample 0" for every line at the
default ``--buffer-size 1``). ``install()`` also wraps ``make_batches``, which tells a plugin
task (a ``DecodingTask``) the ids of each batch as the output numbers them, refuses a
``--constraints`` phrase holding a word that the target dictionary has not (fairseq forced the
unknown word into the translation), and without ``--constraints`` logs the first line holding a
tab (its phrases were translated as part of the sentence, without a word; not for a language
model, which decodes no constraints). A buffer whose every line is longer than the model's
positions, with ``--skip-invalid-size-inputs-valid-test``, is logged and left untranslated, and
the command goes on (the batching's refusal of no sentence, ``last_batch``, ended it: with the
default ``--buffer-size 1``, at the first such line); every line skipped is logged by its ``S-N``
(fairseq's own warning named a skipped line by its place in its buffer, "sample ids=[1]" for
S-4 with ``--buffer-size 3``).
"""

import functools
import logging
import re
import sys
import weakref
from typing import Iterator, List

from fairseq_san.errors import CLOSED_STREAM, UsageError
from fairseq_san.fairseq_fixes.last_batch import NOTHING_TO_BATCH
from fairseq_san.fairseq_fixes.one_line_errors import too_long_sentence, without_numpy_reprs
from fairseq_san.fairseq_fixes.wrapping import running_command, wrap_once
from fairseq_san.files import DASH, GZIP_MAGIC

logger = logging.getLogger(__name__)


def not_utf8(source: str, error: UnicodeDecodeError) -> UsageError:
    """The one-line error for ``source`` (a path or ``-``) that is not UTF-8 text; for
    gzip-compressed input (its first bytes), how to decompress it."""
    name = "standard input" if source == DASH else f"--input {source}"
    if bytes(error.object[:2]) == GZIP_MAGIC and error.start <= 1:
        given = "FILE" if source == DASH else source
        return UsageError(
            f"{name} is gzip-compressed; fairseq-interactive reads plain UTF-8 text: decompress "
            f"it first (zcat {given} | fairseq-interactive ... --input -)"
        )
    byte = error.object[error.start : error.start + 1].hex()
    return UsageError(
        f"{name} is not UTF-8 text (byte 0x{byte}: {error.reason}); fairseq-interactive reads "
        "UTF-8: convert it first, e.g. iconv -f latin1 -t utf-8"
    )


BYTE_ORDER_MARK = "\ufeff"


def without_byte_order_mark(buffers: Iterator[List[str]]) -> Iterator[List[str]]:
    """``buffers`` (fairseq's, of stripped lines) with a byte-order mark at the start of the
    first line dropped: fairseq kept it, and its first word became the unknown word."""
    for number, buffer in enumerate(buffers):
        if number == 0 and buffer and buffer[0].startswith(BYTE_ORDER_MARK):
            buffer[0] = buffer[0][len(BYTE_ORDER_MARK) :].strip()
        yield buffer


def strict_utf8(buffered_read):
    """``buffered_read`` (fairseq's signature) reading strict UTF-8, one line when it is not,
    a byte-order mark at its start dropped; a closed standard input one line (an
    AttributeError of None)."""

    @functools.wraps(buffered_read)
    def wrapper(source, buffer_size):
        if source == DASH and sys.stdin is None:  # started with it closed (<&-): Python's None
            raise UsageError(
                f"standard input {CLOSED_STREAM}: give the sentences on it, or --input FILE"
            )
        if source == DASH:
            sys.stdin.reconfigure(errors="strict")
        try:
            yield from without_byte_order_mark(buffered_read(source, buffer_size))
        except UnicodeDecodeError as error:
            raise not_utf8(source, error) from None

    return wrapper


def check_constraints_known(batch, dictionary, before: int) -> None:
    """Refuse a ``--constraints`` phrase of ``batch`` holding a word that the target
    ``dictionary`` has not (``before``: the lines of the buffers before it, for its S-N):
    fairseq encodes it as the unknown word and forces that into the translation silently."""
    if batch.constraints is None:
        return
    # packed (fairseq's pack_constraints): each row a count, then the phrases' tokens
    rows = (batch.constraints[:, 1:] == dictionary.unk()).any(dim=1).nonzero().flatten()
    if len(rows):
        raise UsageError(
            f"--constraints: a phrase of sentence S-{int(batch.ids[rows[0]]) + before} holds a "
            f"word that is not in the target dictionary, which fairseq would force into the "
            f"translation as {dictionary.unk_word}: give words of the target vocabulary (as "
            "--bpe and --tokenizer make them)"
        )


def said_tab_without_constraints(lines, before: int) -> bool:
    """Log the first of ``lines`` (after ``before`` lines) that holds a tab, and say whether one
    did: without ``--constraints`` fairseq translates a line whole, its tabs read as spaces, so
    the phrases of a user who forgot the flag were translated as part of the sentence."""
    tabbed = next((number for number, line in enumerate(lines) if "\t" in line), None)
    if tabbed is None:
        return False
    logger.warning(
        "S-%d holds a tab: without --constraints fairseq-interactive translates the whole line, "
        "its tabs read as spaces; give --constraints to read each phrase after a tab as one the "
        "translation must hold (said once)", tabbed + before,
    )  # fmt: skip
    return True


def language_modelling(task) -> bool:
    """Whether ``task`` is a language-modelling task, which decodes no constraints: a tab in a
    prompt is no sign of forgotten ones."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    return isinstance(task, LanguageModelingTask)


# What fairseq-interactive says of a buffer that --skip-invalid-size-inputs-valid-test skipped
# whole, by whether the model is a language model (whose prompt needs the start token and one
# position to generate in besides its tokens).
SKIPPED = {
    False: "longer than the model's positions, not translated "
    "(--skip-invalid-size-inputs-valid-test)",
    True: "too long for the model's positions (the start token, the prompt and one generated "
    "token), nothing generated (--skip-invalid-size-inputs-valid-test)",
}


def skipped_whole_buffer(error: UsageError, cfg) -> bool:
    """Whether ``error`` is the batching's refusal of no sentence where
    ``--skip-invalid-size-inputs-valid-test`` left out every line of a buffer: fairseq-interactive
    goes on with the next one (it stopped, the lines after never translated)."""
    return str(error) == NOTHING_TO_BATCH and cfg.dataset.skip_invalid_size_inputs_valid_test


def numbered_lines(numbers: List[int]) -> str:
    """``numbers`` (ascending) as fairseq-interactive's output names them: ``S-N``, a run of
    them ``S-A to S-B``."""
    runs: List[List[int]] = []
    for number in numbers:
        if runs and runs[-1][1] == number - 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(f"S-{a}" if a == b else f"S-{a} to S-{b}" for a, b in runs)


def too_long_line(error: Exception, number: int) -> UsageError:
    """fairseq's batching's refusal of a line longer than the model's positions, naming it by
    its number in the input (``S-N``; fairseq's "sample #K" counts from its buffer's first, #0
    with the default --buffer-size 1), its sizes as numbers (numpy 2 printed "np.int64(9)")."""
    said = without_numpy_reprs(str(error))
    return UsageError(re.sub(r"^Size of sample #\d+", f"Size of S-{number}", said))


def numbered_across_buffers(make_batches):
    """``make_batches`` (fairseq's signature) that sets a plugin task's ``interactive_ids`` to
    each batch's ids as fairseq-interactive's output numbers them: after the lines of the task's
    buffers before ``lines``; refuses constraints of unknown words (``check_constraints_known``);
    yields no batch of a buffer whose every line was skipped (``skipped_whole_buffer``); and
    logs the lines skipped by their ``S-N`` (fairseq's warning counts them from their buffer's
    first)."""
    lines_before = weakref.WeakKeyDictionary()  # task -> its lines in the buffers before
    tab_said = False

    @functools.wraps(make_batches)
    def wrapper(lines, cfg, task, *rest, **keywords):
        nonlocal tab_said
        numbered = hasattr(task, "interactive_ids")
        before = lines_before.get(task, 0)
        if not (cfg.generation.constraints or tab_said or language_modelling(task)):
            tab_said = said_tab_without_constraints(lines, before)
        if hasattr(task, "skipping_too_long"):  # a plugin language model's prompts
            task.skipping_too_long = cfg.dataset.skip_invalid_size_inputs_valid_test
        batched = set()
        try:
            for batch in make_batches(lines, cfg, task, *rest, **keywords):
                check_constraints_known(batch, task.target_dictionary, before)
                if numbered:
                    task.interactive_ids = batch.ids + before
                batched.update(batch.ids.tolist())
                yield batch
        except Exception as error:  # fairseq's batching: "Size of sample #K" of the buffer
            index = too_long_sentence(error)
            if index is not None:
                raise too_long_line(error, before + index) from None
            if not (isinstance(error, UsageError) and skipped_whole_buffer(error, cfg)):
                raise
        skipped = [before + index for index in range(len(lines)) if index not in batched]
        if skipped:
            logger.warning("%s: %s", numbered_lines(skipped), SKIPPED[language_modelling(task)])
        lines_before[task] = before + len(lines)

    return wrapper


def install() -> None:
    """Wrap fairseq-interactive's ``buffered_read`` and ``make_batches`` when that command runs
    (idempotent)."""
    interactive = running_command("fairseq_cli.interactive")
    if getattr(interactive, "buffered_read", None) is not None:
        wrap_once(interactive, "buffered_read", strict_utf8)
        wrap_once(interactive, "make_batches", numbered_across_buffers)
