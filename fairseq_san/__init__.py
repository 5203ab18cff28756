"""fairseq-san: Shared Attention Networks (Xiao et al., IJCAI 2019) as a fairseq plugin.

``import fairseq_san`` (or ``--user-dir fairseq_san``) registers the models ``transformer_san``
and ``transformer_lm_san``, their named architectures and the tasks ``translation_san`` and
``language_modeling_san`` with fairseq, whatever the import order:
at once when fairseq is already imported, else the moment it is (fairseq's registries do not
exist before). The pure-Python parts (``fairseq_san.policy``, ``fairseq-san-policy``) therefore
stay fast and torch-free: importing them imports neither fairseq nor torch.

Registering also changes, for the whole process, what fairseq does where it would otherwise lose
data, run code from a checkpoint or refuse safe input: ``fairseq_san.fairseq_fixes``, one module
per fix.
"""

import importlib.abc
import importlib.metadata
import importlib.util
import sys

try:
    __version__ = importlib.metadata.version("fairseq-san")
except importlib.metadata.PackageNotFoundError:  # used as a --user-dir folder, not installed
    __version__ = "unknown version"


def _register() -> None:
    """Register the model and the task with the (imported) fairseq; install fairseq_fixes."""
    from fairseq_san import fairseq_fixes, models, tasks  # noqa: F401  (registration)

    fairseq_fixes.install()


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
