"""What a decoded split was made from: the key ``examples/multi30k/test_bleu.sh`` keeps beside
a split it decoded, and compares before reusing it.

A decoded split is reused only for the very same checkpoint (its bytes, wherever it is), data
(``run_record.digest``: dictionaries, index files and sentences, every split's), split and
fairseq-generate options (the model overrides among them, and the bytes of each file they name:
a policy file); anything else decodes again.
"""

import glob
import json
import os
from typing import Dict, Iterator, List, Optional

from fairseq_san.files import glob_in
from fairseq_san.loop.run_record import digest, file_sha256, train_arg


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
        "override_files_sha256": override_files(generate_args),
    })  # fmt: skip


def override_files(generate_args: List[str]) -> Dict[str, str]:
    """The sha256 of each file that ``--model-overrides`` names, by its real path: the overrides'
    text says which file (``{'san_policy': 'policy.json'}``), not what it holds, and a split
    decoded under an earlier policy written to the same file was only rescored."""
    from fairseq_san.fairseq_fixes.literal_eval import NotALiteral, evaluate

    # --model-overrides TEXT or =TEXT, as fairseq-generate reads both (the files the second
    # named were left out of the key: a split decoded under another policy was reused)
    given = train_arg(generate_args, "--model-overrides", "")
    try:
        overrides = evaluate(given) if given else {}
    except NotALiteral:  # test-systems refuses it before any decoding
        return {}
    return {
        os.path.realpath(text): file_sha256(text)
        for text in strings_in(overrides) if os.path.isfile(text)
    }  # fmt: skip


def strings_in(value: object) -> Iterator[str]:
    """Every string among ``value``, a literal (dicts' keys left out), at any depth."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, (list, tuple, set)):
        for item in value:
            yield from strings_in(item)


def binarized(data: str, split: str, target: Optional[str] = None) -> bool:
    """Whether ``data`` holds the binarized ``split`` (``SPLIT.*.bin``; its ``target`` side,
    ``SPLIT.*-TGT.TGT.bin``, where given)."""
    if target is None:
        return bool(glob_in(data, f"{glob.escape(split)}.*.bin"))
    language = glob.escape(target)
    return bool(glob_in(data, f"{glob.escape(split)}.*-{language}.{language}.bin"))


def check_split(data: str, split: str) -> None:
    """FileNotFoundError naming a split that ``data`` has not binarized (``binarized``)."""
    if not binarized(data, split):
        raise FileNotFoundError(f"{data}: no binarized split '{split}' ({split}.*.bin)")
