"""What a decoded split was made from: the key ``examples/multi30k/test_bleu.sh`` keeps beside
a split it decoded, and compares before reusing it.

A decoded split is reused only for the very same checkpoint (its bytes, wherever it is), data
(``run_record.digest``: dictionaries and index files), split (its sentences: the ``.bin`` files)
and fairseq-generate options (the model overrides among them); anything else decodes again.
"""

import glob
import json
import os
from typing import List

from fairseq_san.loop.run_record import digest, file_sha256, files_sha256


def decode_key(checkpoint: str, data: str, split: str, generate_args: List[str]) -> str:
    """One line of JSON that names what decoding ``split`` of ``data`` with ``checkpoint`` and
    ``generate_args`` depends on."""
    return json.dumps({
        "checkpoint_sha256": file_sha256(checkpoint),
        "data_sha256": digest(data),
        "split": split,
        "split_sha256": split_sha256(data, split),
        "generate_args": generate_args,
    })  # fmt: skip


def split_sha256(data: str, split: str) -> str:
    """sha256 of the binarized sentences of ``split`` (``SPLIT.*.bin``): a test set edited with
    its sentences' lengths kept has the same index files."""
    pattern = os.path.join(glob.escape(data), f"{glob.escape(split)}.*.bin")
    files = sorted(glob.glob(pattern))
    if not files:
        raise FileNotFoundError(f"{data}: no binarized split '{split}' ({split}.*.bin)")
    return files_sha256(files)
