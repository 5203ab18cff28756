"""What a decoded split was made from: the key ``examples/multi30k/test_bleu.sh`` keeps beside
a split it decoded, and compares before reusing it.

A decoded split is reused only for the very same checkpoint (its bytes, wherever it is), data
(``run_record.digest``: dictionaries, index files and sentences, every split's), split and
fairseq-generate options (the model overrides among them); anything else decodes again.
"""

import glob
import json
import os
from typing import List

from fairseq_san.loop.run_record import digest, file_sha256


def decode_key(checkpoint: str, data: str, split: str, generate_args: List[str]) -> str:
    """One line of JSON that names what decoding ``split`` of ``data`` with ``checkpoint`` and
    ``generate_args`` depends on."""
    data_sha256 = digest(data)  # first: a data directory that is not there is said as such
    check_split(data, split)
    return json.dumps({
        "checkpoint_sha256": file_sha256(checkpoint),
        "data_sha256": data_sha256,
        "split": split,
        "generate_args": generate_args,
    })  # fmt: skip


def check_split(data: str, split: str) -> None:
    """FileNotFoundError naming a split that ``data`` has not binarized (``SPLIT.*.bin``)."""
    if not glob.glob(os.path.join(glob.escape(data), f"{glob.escape(split)}.*.bin")):
        raise FileNotFoundError(f"{data}: no binarized split '{split}' ({split}.*.bin)")
