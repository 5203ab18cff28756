"""fairseq's command-line tools (and the plugin's) started warm, for the tests: a fork server.

Every fairseq command (``fairseq-train``, ``fairseq-generate``, ...) spends about 8 s of a 2-core
VM importing torch, fairseq, scikit-learn and SciPy before it reads its arguments; the suite
starts about 200 of them, so that start-up was half its time. The plugin's commands that read
checkpoints (``fairseq-san-loop summary``, ``fairseq-san-bench``) import torch too. Here one
server per pytest process imports those once, and each command forks from it:

* ``warm_bin()`` starts the server (on first use) and returns a folder of stand-ins, one per
  console script of fairseq and per command of the plugin that imports torch (``PLUGIN_WARM``),
  that the tests put first on ``PATH`` (``helpers.cli_env``);
* a stand-in sends its argv, environment, working directory and the file descriptors it
  inherited (the descriptors themselves: standard streams, a recipe's lock) to the server,
  which forks a runner that has them under the same numbers and calls the console script's
  entry point from the top level, as the script does, and the interpreter ends it (exit code,
  uncaught exceptions, atexit, thread shutdown), all but its teardown of the modules, which
  would copy the pages shared with the server (``end_without_teardown``); the stand-in ends as
  the runner ended; a signal sent to the stand-in is passed on, and a stand-in that dies takes
  its runner with it;
* what the server's imports did that a fresh process would do again (``Imports``: log records,
  logging configuration, standard error, environment variables) is replayed in each runner
  where its command imports fairseq;
* the stand-in runs the real command, cold, where the server is not running or where the
  environment differs in a variable read at start-up (threads, locale, Python, torch): the
  fork would not see the change. A PYTHONPATH of its own is the exception: the runner puts its
  folders first on ``sys.path``, unless one holds a package the server has already imported;
  where the server has a PYTHONPATH, the command's must end with it (a recipe's
  ``PYTHONPATH=REPO:$PYTHONPATH``).

``FAIRSEQ_SAN_TEST_COLD=1`` switches all of this off: every command starts as a process of its
own, as users start them.
"""

import atexit
import builtins
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

# Read when a process starts (by Python, torch, OpenMP, numpy, fairseq's logging): a command
# given other values than the server's runs cold.
START_UP_PREFIXES = ("PYTHON", "LC_", "LANG", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "TORCH",
                     "PYTORCH", "CUDA", "LD_", "LOGLEVEL", "SKLEARN", "SCIPY", "NUMPY")  # fmt: skip
# The plugin's commands started warm, beside all of fairseq's: those that import torch (or
# fairseq), as command -> its subcommands that do (None: all). The others start cold in about
# 0.3 s, less than a runner takes to register the plugin with the server's fairseq (fairseq_san's
# doc: 0.4 s).
PLUGIN_WARM = {"fairseq-san-bench": None,
               "fairseq-san-loop": ("summary", "test-systems", "lm-task-args")}
PRELOADED = ("torch", "torch._dynamo", "fairseq", "fairseq.checkpoint_utils", "fairseq.trainer",
             "fairseq.sequence_generator", "fairseq.options", "fairseq.hub_utils")  # fmt: skip
MAX_FDS = 253  # descriptors one message may carry (Linux's SCM_MAX_FD); more: the command runs cold
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGUSR1, signal.SIGUSR2)  # fmt: skip
_server: Dict[str, object] = {}
exit_code: Optional[int] = None  # a runner's, once its command has ended with one


def console_scripts() -> Dict[str, str]:
    """{command: "module:function"} of fairseq's console scripts and PLUGIN_WARM's."""
    from importlib.metadata import entry_points

    return {
        entry.name: entry.value
        for entry in entry_points(group="console_scripts")
        if (entry.name.startswith("fairseq-") and entry.value.startswith("fairseq_cli."))
        or entry.name in PLUGIN_WARM
    }


def runs_warm(argv: List[str]) -> bool:
    """Whether a command line's runner is faster forked (see PLUGIN_WARM)."""
    command = os.path.basename(argv[0])
    if command not in PLUGIN_WARM:
        return True
    subcommands = PLUGIN_WARM[command]
    return subcommands is None or (len(argv) > 1 and argv[1] in subcommands)


def start_up_environment(env: Dict[str, str]) -> Dict[str, str]:
    return {key: value for key, value in env.items() if key.startswith(START_UP_PREFIXES)}


# --- the tests' side ----------------------------------------------------------------------------


def warm_bin(env: Dict[str, str]) -> Optional[Path]:
    """The stand-ins' folder, the server started with ``env`` on first use; None when
    FAIRSEQ_SAN_TEST_COLD=1 or the server did not come up."""
    if os.environ.get("FAIRSEQ_SAN_TEST_COLD") == "1":
        return None
    if "bin" not in _server:
        _server["bin"] = _start_server(env)
    return _server["bin"]


def _start_server(env: Dict[str, str]) -> Optional[Path]:
    root = Path(tempfile.mkdtemp(prefix="fairseq-warm-"))
    address = root / "socket"
    scripts = console_scripts()
    process = subprocess.Popen(
        [sys.executable, __file__, "serve", str(address), json.dumps(scripts)], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=(root / "server.log").open("w"),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (root / "ready").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            return None
        time.sleep(0.1)
    _server["process"] = process
    bin_dir = root / "bin"
    bin_dir.mkdir()
    real_bin = Path(sys.executable).parent
    for command in scripts:
        stand_in = bin_dir / command
        stand_in.write_text(
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            f"from warm_cli import stand_in\nstand_in({str(address)!r}, "
            f"{str(real_bin / command)!r}, {str(root / 'environment.json')!r})\n"
        )  # fmt: skip
        stand_in.chmod(0o755)
    return bin_dir


def stop_server() -> None:
    """Stop this pytest process's server (runners still running finish) and remove its folder."""
    process = _server.pop("process", None)
    bin_dir = _server.pop("bin", None)
    if process is not None and process.poll() is None:
        process.terminate()
        process.wait()
    if bin_dir is not None:
        shutil.rmtree(bin_dir.parent, ignore_errors=True)


# --- the stand-in -------------------------------------------------------------------------------


def stand_in(address: str, real_command: str, environment_file: str) -> None:
    """Run ``real_command`` with this process's argv in a runner forked from the server; cold
    (exec) where that cannot give what a fresh process gives."""
    argv = [real_command, *sys.argv[1:]]
    try:
        if not runs_warm(argv):
            raise ConnectionError("runs cold")
        with open(environment_file, encoding="utf-8") as handle:
            server_env, set_by_imports, imported = json.load(handle)
        mine = start_up_environment(dict(os.environ))
        for key, value in set_by_imports.items():  # e.g. the tests' own import of torch._dynamo
            if mine.get(key) == value:
                del mine[key]
        added = added_python_path(mine, server_env)
        if added is not None and not _shadows(added, imported):
            mine.pop("PYTHONPATH", None)  # the runner puts its entries first on sys.path
            if "PYTHONPATH" in server_env:
                mine["PYTHONPATH"] = server_env["PYTHONPATH"]
        inherited = inherited_fds()
        if mine != server_env or not {0, 1, 2} <= set(inherited) or len(inherited) > MAX_FDS:
            raise ConnectionError("runs cold")
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(address)
    except OSError:
        os.execv(sys.executable, [sys.executable, *argv])
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "fds": inherited}
    message = json.dumps(request).encode()
    socket.send_fds(connection, [len(message).to_bytes(8, "big") + message], inherited)
    replies = connection.makefile("rb")  # both lines may arrive in one read
    runner = int(replies.readline())
    for number in FORWARDED_SIGNALS:
        signal.signal(number, lambda received, _frame: os.kill(runner, received))
    how = replies.readline().decode().strip()  # "exit N" or "signal N"; empty: the server went
    kind, _, number = how.partition(" ")
    if kind == "signal":
        signal.signal(int(number), signal.SIG_DFL)
        os.kill(os.getpid(), int(number))
    sys.exit(int(number) if kind == "exit" else 1)


def python_path(env: Dict[str, str]) -> List[str]:
    """The sys.path entries a fresh process takes from PYTHONPATH (absolute, as Python makes
    them)."""
    entries = env.get("PYTHONPATH", "").split(os.pathsep)
    return [os.path.abspath(entry) for entry in entries if entry]


def added_python_path(env: Dict[str, str], server_env: Dict[str, str]) -> Optional[List[str]]:
    """The PYTHONPATH entries ``env`` puts before the server's; None where its PYTHONPATH does not
    end with the server's (a fresh process would miss one the fork has). An entry given twice
    counts where it first is: imports never reach the second."""
    entries, servers = (list(dict.fromkeys(python_path(e))) for e in (env, server_env))
    before = len(entries) - len(servers)
    if before < 0 or entries[before:] != servers:
        return None
    return entries[:before]


def _shadows(entries: List[str], imported: List[str]) -> bool:
    """Whether one of ``entries`` holds a package the server has imported: a fresh process would
    import that one, the fork keeps the server's."""
    from importlib.machinery import PathFinder

    return any(PathFinder.find_spec(name, [entry]) for entry in entries for name in imported)


def inherited_fds() -> List[int]:
    """The file descriptors this process inherited (open and inheritable: standard streams, a
    recipe's lock on fd 9): a command started cold has them under the same numbers."""
    found = []
    for name in os.listdir("/proc/self/fd"):  # the listing's own descriptor is closed by now
        try:
            if os.get_inheritable(int(name)):
                found.append(int(name))
        except OSError:
            pass
    return sorted(found)


# --- the server ---------------------------------------------------------------------------------


class Imports:
    """What importing PRELOADED did that a fresh process would do again: what it wrote to
    standard error, the log records it emitted, the ``logging.basicConfig`` calls it made (held
    back: fairseq_cli's own call must come first, as it does in a fresh process) and the
    environment variables it set."""

    def __init__(self, capture: Path):
        import logging

        fresh = dict(os.environ)
        self.configs: List[Dict[str, object]] = []
        self.records: List[logging.LogRecord] = []
        recorder = logging.Handler(logging.NOTSET)
        recorder.emit = self.records.append
        logging.root.addHandler(recorder)
        logging.root.setLevel(logging.NOTSET)
        real_basic_config = logging.basicConfig
        logging.basicConfig = lambda **config: self.configs.append(config)
        saved = os.dup(2)
        with capture.open("wb") as handle:
            os.dup2(handle.fileno(), 2)
            try:
                for module in PRELOADED:
                    __import__(module)
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                logging.basicConfig = real_basic_config
                logging.root.removeHandler(recorder)
                logging.root.setLevel(logging.WARNING)
        self.stderr = capture.read_bytes()
        self.environment = {key: value for key, value in os.environ.items() if key not in fresh}

    def replay_at_first_import(self) -> None:
        """Replay at the runner's first import of fairseq, where a fresh process would import it
        (all of what is replayed is fairseq's: its modules configure logging and log as they are
        imported): during the entry module's import for fairseq's commands (fairseq_cli.train
        configures logging before that, fairseq_cli.validate after), when a plugin command needs
        it (the benchmark), or never (the loop's summary reads checkpoints with torch alone)."""
        real_import = builtins.__import__

        def first_import_replays(name, *args, **kwargs):
            if name.split(".")[0] == "fairseq":
                builtins.__import__ = real_import
                self.replay()
            return real_import(name, *args, **kwargs)

        builtins.__import__ = first_import_replays

    def replay(self) -> None:
        """What went to standard error, the held-back configuration, then the records where the
        configuration lets them through."""
        import logging

        os.write(2, self.stderr)
        # A command that imported the plugin first (its own) imports fairseq with basicConfig
        # doing nothing (fairseq_san.logging_left_to_the_program), as it would in a fresh process.
        if "fairseq_san" not in sys.modules:
            for config in self.configs:
                logging.basicConfig(**config)
        for record in self.records:
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                record.created = time.time()
                logger.handle(record)


def serve(address: str, scripts: Dict[str, str]) -> None:
    """Import what fairseq's commands import, then fork a supervisor per stand-in."""
    root = Path(address).parent
    sys.path[0] = os.path.dirname(sys.executable)  # a console script's first path entry
    fresh = start_up_environment(dict(os.environ))
    imports = Imports(root / "import-stderr")
    imported = sorted({name.split(".")[0] for name in sys.modules})
    (root / "environment.json").write_text(json.dumps([fresh, imports.environment, imported]))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    listener.settimeout(1.0)
    parent = os.getppid()
    (root / "ready").touch()
    while os.getppid() == parent:  # ends with the pytest process that started it
        try:
            connection, _ = listener.accept()
        except socket.timeout:
            continue
        connection.settimeout(None)
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _supervise(connection, scripts, imports)
        connection.close()


def _supervise(connection: socket.socket, scripts: Dict[str, str], imports: Imports) -> None:
    """Fork the runner, tell the stand-in its pid and then how it ended; kill it if the stand-in
    goes away first."""
    message, fds, _, _ = socket.recv_fds(connection, 8, MAX_FDS)
    size = int.from_bytes(message, "big")
    request = b""
    while len(request) < size:
        request += connection.recv(size - len(request))
    request = json.loads(request)
    request["env"] = {**imports.environment, **request["env"]}  # torch's TORCHINDUCTOR_CACHE_DIR
    runner = os.fork()
    if runner == 0:
        connection.close()
        raise BecomeTheCommand(request, fds, scripts, imports)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"{runner}\n".encode())
    connection.setblocking(False)
    while True:
        done, status = os.waitpid(runner, os.WNOHANG)
        if done:
            break
        try:
            if connection.recv(1) == b"":
                os.kill(runner, signal.SIGKILL)  # the stand-in died
        except BlockingIOError:
            pass
        time.sleep(0.05)
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
    connection.setblocking(True)
    try:
        connection.sendall(f"{how}\n".encode())
    except OSError:
        pass
    os._exit(0)


class BecomeTheCommand(Exception):
    """Raised in a runner to leave the server's stack: the command's entry point is then called
    from the module's top level, as a console script calls it, and the interpreter ends it
    (exit status, uncaught exceptions, threads, atexit), with the same stack depth for warnings."""

    def __init__(self, request: Dict[str, object], fds: List[int], scripts: Dict[str, str],
                 imports: Imports):  # fmt: skip
        super().__init__()
        self.request, self.fds, self.scripts, self.imports = request, fds, scripts, imports

    def place_fds(self) -> None:
        """Each received descriptor under the number it had in the stand-in: first all above
        those numbers, so that no placement closes one not yet placed."""
        above = max([*self.request["fds"], *self.fds]) + 1
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in self.fds]
        for fd in self.fds:
            os.close(fd)
        for target, fd in zip(self.request["fds"], moved):
            os.dup2(fd, target)
            os.close(fd)

    def entry_point(self):
        """Take the command's streams, directory, environment and argv; its entry point."""
        import importlib
        import random

        import numpy

        self.place_fds()
        for number in FORWARDED_SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(self.request["cwd"])
        os.environ.clear()
        os.environ.update(self.request["env"])
        sys.argv = list(self.request["argv"])
        sys.path[0] = os.path.dirname(sys.argv[0])
        sys.path[1:1] = python_path(os.environ)  # where the server has them too, twice is once
        random.seed()  # a fresh process draws its own
        numpy.random.seed()
        module, _, function = self.scripts[os.path.basename(sys.argv[0])].partition(":")
        if module.startswith("fairseq_san."):
            # The plugin registers with the server's fairseq as it is imported (fairseq_san's
            # doc), which is not an import of fairseq that a fresh process makes.
            importlib.import_module("fairseq_san")
        self.imports.replay_at_first_import()
        return getattr(importlib.import_module(module), function)


def exit_status(code: object) -> int:
    """The status a process ends with after ``SystemExit(code)`` (a code neither None nor an int
    the interpreter prints before it ends: status 1)."""
    if code is None:
        return 0
    return code & 0xFF if isinstance(code, int) else 1


def uncaught_status(error: Exception) -> int:
    """Print ``error`` as the interpreter does an uncaught exception (``sys.excepthook``) and
    give the status it then ends with: 1, or that of a SystemExit the hook raises (the plugin's
    for a reader that stopped: the status of SIGPIPE)."""
    try:
        sys.excepthook(type(error), error, error.__traceback__)
    except SystemExit as exit:
        return exit_status(exit.code)
    return 1


def end_without_teardown() -> None:
    """At exit, last (registered before anything else): end a runner whose command has an exit
    status there, its streams flushed, without the interpreter's teardown of every module,
    which writes to nearly every page the runner shares with the server (copy-on-write): 3.2 s
    of a 2-core VM per command, against 0.2 s. The command's own exit handlers have run and the
    interpreter has waited for its threads. Without a status (KeyboardInterrupt: the interpreter
    ends by the signal), or with a stream that cannot be flushed (the interpreter says so and
    exits 120), the interpreter goes on."""
    if exit_code is None:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None and not stream.closed:
                stream.flush()
    except OSError:
        return
    ctypes.CDLL(None).fflush(None)  # C's stdio buffers (extensions' printf), as exit() does
    os._exit(exit_code)


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    atexit.register(end_without_teardown)
    try:
        serve(sys.argv[2], json.loads(sys.argv[3]))
    except BecomeTheCommand as runner:
        command = runner  # called outside the except clause: no exception context to print
    else:
        sys.exit(0)  # the server, its pytest process gone
    try:
        status = command.entry_point()()
    except SystemExit as exit:
        exit_code = exit_status(exit.code)
        raise
    except Exception as error:
        exit_code = uncaught_status(error)
        raise SystemExit(exit_code) from None  # printed: nothing more to print
    exit_code = exit_status(status)
    sys.exit(status)
