"""fairseq-san: Shared Attention Networks (Xiao et al., IJCAI 2019) as a fairseq plugin.

``import fairseq_san`` (or ``--user-dir fairseq_san``) registers the models ``transformer_san``
and ``transformer_lm_san``, their named architectures and the tasks ``translation_san`` and
``language_modeling_san`` with fairseq, whatever the import order: at once when fairseq is
already imported, else once it is and no module of ours is half run (fairseq's registries do not
exist before). The pure-Python parts (``fairseq_san.policy``, ``fairseq-san-policy``) therefore
stay fast and torch-free: importing them imports neither fairseq nor torch.

Registering also changes, for the whole process, what fairseq does where it would otherwise lose
data, run code from a checkpoint or refuse safe input: ``fairseq_san.fairseq_fixes``, one module
per fix. One fix acts here, as fairseq is imported after the plugin: its import leaves the
process's logging to the program (``logging_left_to_the_program``).
"""

import contextlib
import importlib.abc
import importlib.metadata
import importlib.util
import logging
import sys
import threading
from typing import Iterator

try:
    __version__ = importlib.metadata.version("fairseq-san")
except importlib.metadata.PackageNotFoundError:  # used as a --user-dir folder, not installed
    __version__ = "unknown version"


def _register() -> None:
    """Register the model and the task with the (imported) fairseq; install fairseq_fixes."""
    from fairseq_san import fairseq_fixes, models, tasks  # noqa: F401  (registration)

    fairseq_fixes.install()


@contextlib.contextmanager
def logging_left_to_the_program() -> Iterator[None]:
    """fairseq's import with ``logging.basicConfig`` doing nothing. Three of fairseq's modules
    configure the process's logging as they are imported, which is the program's to do (the
    first one's call is the one that counts): ``models/wav2vec/wav2vec2_classification.py`` sets
    the root logger to DEBUG with a handler on standard error, so that every library's debug
    messages print (matplotlib's font search wrote some 150 lines for one plot of a hub user's),
    and a program's own ``basicConfig`` after it did nothing (``tasks/text_to_speech.py`` and
    ``frm_text_to_speech.py`` ask for INFO). Where fairseq is imported before the plugin
    (fairseq's own commands import the plugin last), its configuration stands."""
    configure = logging.basicConfig
    logging.basicConfig = lambda *args, **kwargs: None
    try:
        yield
    finally:
        logging.basicConfig = configure


class _RegisterAfterFairseq(importlib.abc.MetaPathFinder):
    """An import hook that registers once fairseq is imported and no module of ours is half run.

    Our attention modules and the analysis subclass fairseq's classes, so importing one of them
    first imports fairseq; registering at that moment would import the models, which import
    that very module, half run (a circular import). Registration therefore waits until every
    module of ours that was being executed (in the importing thread) has finished, failed or not.
    """

    def __init__(self) -> None:
        self.running = threading.local()  # per thread: modules of ours (and fairseq) executing
        self.removing = threading.Lock()
        # fairseq's code has run to its end (in sys.modules it may still be running, in another
        # thread, and registering then would import the models from a half-imported fairseq).
        self.fairseq_imported = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "fairseq" and not fullname.startswith(__name__ + "."):
            return None
        spec = self._spec_of_the_other_finders(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader, self)
        return spec

    def _spec_of_the_other_finders(self, fullname, path, target):
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    return spec
        return None

    def executing(self, change: int = 0) -> int:
        """How many of our modules this thread is executing, after adding ``change``."""
        self.running.count = getattr(self.running, "count", 0) + change
        return self.running.count

    def register_when_ready(self) -> None:
        """Register (once, whichever thread comes first) when fairseq is imported and this thread
        executes no module of ours."""
        if self.executing() or not self.fairseq_imported:
            return
        with self.removing:
            if self not in sys.meta_path:
                return
            sys.meta_path.remove(self)
        _register()


class _ThenRegister(importlib.abc.Loader):
    """A module's own loader, then ``register_when_ready()``."""

    def __init__(self, loader, hook: _RegisterAfterFairseq) -> None:
        self.loader = loader
        self.hook = hook

    def __getattr__(self, name):  # resources and the like: the module's loader answers
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader
        self.hook.executing(+1)
        fairseq = module.__name__ == "fairseq"
        try:
            with logging_left_to_the_program() if fairseq else contextlib.nullcontext():
                self.loader.exec_module(module)
            if fairseq:
                self.hook.fairseq_imported = True
        finally:  # a failed import registers too: fairseq may be imported, and used, after it
            self.hook.executing(-1)
            self.hook.register_when_ready()


if "fairseq" in sys.modules:
    _register()
else:
    sys.meta_path.insert(0, _RegisterAfterFairseq())
