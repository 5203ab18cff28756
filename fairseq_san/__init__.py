"""fairseq-san: Shared Attention Networks (Xiao et al., IJCAI 2019) as a fairseq plugin.

``import fairseq_san`` (or ``--user-dir fairseq_san``) registers the model ``transformer_san``,
its named architectures and the task ``translation_san`` with fairseq, whatever the import order:
at once when fairseq is already imported, else the moment it is (fairseq's registries do not
exist before). The pure-Python parts (``fairseq_san.policy``, ``fairseq-san-policy``) therefore
stay fast and torch-free: importing them imports neither fairseq nor torch.

Registering also changes, for the whole process, what fairseq does where it would otherwise lose
data or refuse safe input:

* ``fairseq_san.batching``: every sentence of a subset is batched (fairseq main drops a last
  batch whose size is not a multiple of ``--required-batch-size-multiple``);
* ``fairseq_san.checkpoints``: torch's safe loader accepts fairseq checkpoints, and a checkpoint
  that cannot be loaded is one line naming the file;
* ``fairseq_san.interactive_input``: fairseq-interactive's input that is not UTF-8 is one line
  naming it, also on standard input (where the locale may turn it into unknown words);
* a bad policy or checkpoint is printed as one line, ``fairseq-san: error: ...``, not a
  traceback from inside fairseq.
"""

import importlib.abc
import importlib.metadata
import importlib.util
import sys

from fairseq_san import errors

try:
    __version__ = importlib.metadata.version("fairseq-san")
except importlib.metadata.PackageNotFoundError:  # used as a --user-dir folder, not installed
    __version__ = "unknown version"


def _register() -> None:
    """Register the model and the task with the (imported) fairseq; install the fixes above."""
    from fairseq_san import batching, checkpoints, models, tasks  # noqa: F401  (registration)
    from fairseq_san import clean_exit  # noqa: F401  (fairseq's batch loaders stop before exit)
    from fairseq_san import interactive_input

    batching.keep_last_batch()
    checkpoints.allow_fairseq_checkpoints()
    interactive_input.read_input_strictly()
    sys.excepthook = errors.excepthook(sys.excepthook)


class _RegisterAfterFairseq(importlib.abc.MetaPathFinder):
    """An import hook that finds ``fairseq`` as usual and registers once it has been executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "fairseq":
            return None
        sys.meta_path.remove(self)  # fairseq is imported once; find it without this hook
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader)
        return spec


class _ThenRegister(importlib.abc.Loader):
    """fairseq's own loader, followed by ``_register()``."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def __getattr__(self, name):  # resources and the like: fairseq's loader answers
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _register()


if "fairseq" in sys.modules:
    _register()
else:
    sys.meta_path.insert(0, _RegisterAfterFairseq())
