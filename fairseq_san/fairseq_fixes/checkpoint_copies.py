"""fairseq-train's copies of a checkpoint (``checkpoint_last.pt``, ``checkpoint_best.pt``) are
whole or absent: a run stopped while it copies leaves the previous file, not part of the new one.

Upstream behaviour corrected: ``checkpoint_utils.save_checkpoint`` writes the first file of a
save under a temporary name and renames it (``torch_persistent_save``), but makes the others
with ``PathManager.copy``, which is ``shutil.copyfile``: written in place. A run killed during
that copy (seconds for a checkpoint of hundreds of MB) left a truncated ``checkpoint_last.pt``,
and every later fairseq-train in that save dir stopped on it ("not a complete torch.save
archive") until the file was removed by hand, though the complete checkpoint was beside it.
Local copies are now made under a temporary name in the same folder and renamed over the
destination (``os.replace``: atomic; a link is written through, as fairseq's copy did); paths
that fairseq cannot rename (iopath's remote ones) are copied as fairseq does.
"""

import os
import shutil

from fairseq_san.fairseq_fixes.wrapping import wrap_once

PARTIAL_SUFFIX = ".partial-copy"  # the copy being written, beside its destination


def _copying_whole_files(path_manager):
    class WholeCopies(path_manager):
        """fairseq's ``PathManager`` whose local copies replace the destination at once."""

        @staticmethod
        def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
            if not path_manager.supports_rename(dst_path):
                return path_manager.copy(src_path, dst_path, overwrite=overwrite)
            if not overwrite and os.path.exists(dst_path):
                return False
            destination = os.path.realpath(dst_path)  # a link is written through, as fairseq's
            partial = destination + PARTIAL_SUFFIX
            try:
                shutil.copyfile(src_path, partial)
                os.replace(partial, destination)
            finally:  # a copy stopped by an exception leaves nothing (a killed one: the partial)
                if os.path.exists(partial):
                    os.remove(partial)
            return True

    return WholeCopies


def install() -> None:
    """Make checkpoint_utils' copies whole or absent (idempotent)."""
    from fairseq import checkpoint_utils

    wrap_once(checkpoint_utils, "PathManager", _copying_whole_files)
