"""Shared test helpers: run the real CLI in a subprocess, write small corpora, tiny recipes."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Tests never touch the network: hub look-ups fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# Every process of the suite runs one intra-op thread, unless a test is about threads: tiny models
# train faster on one, the suite's workers (pytest -n 2) each take a core, and on a loaded machine a
# second thread only stalls at OpenMP barriers. The environment carries it to every subprocess
# (run_cli, popen_cli, a test's own subprocess.run); this process's torch is set in pytest_configure.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

# A suite started in the background of a non-interactive shell (`cmd &`, nohup, some CI runners)
# inherits SIGINT ignored, and every process it starts would too: Python then installs no
# KeyboardInterrupt handler, and the Ctrl-C tests' processes wait at their pause points for ever.
# Python's own handler here means its children start with SIGINT at its default, as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)
    # xdist hands out files in collection order (pytest_collection_modifyitems below), not largest first
    if getattr(config.option, "loadscopereorder", None):
        config.option.loadscopereorder = False


@dataclass
class CliResult:
    rc: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


# A guard against a hung process only: far beyond what any test's command takes on a slow, loaded
# machine (the longest, the shared 1,000-step pretrain, takes minutes). Tests never rely on it.
HANG_GUARD_S = float(os.environ.get("BERTCLI_TEST_HANG_GUARD_S", 4 * 3600))


def _env(env: dict | None) -> dict:
    """The subprocess's environment: this one's (one thread) with `env` over it; a None value
    removes that variable (a thread test runs without OMP_NUM_THREADS)."""
    merged = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
    return {k: v for k, v in merged.items() if v is not None}


def run_cli_process(*args: str, cwd: Path | None = None, env: dict | None = None,
                    timeout: float | None = None) -> CliResult:
    """Run `python -m bertcli ARGS` in a new process, as a user would, capturing output: for the
    tests whose subject is the process itself (signals, start-up imports, locks between processes,
    torchrun, the interpreter's own environment such as PYTHONPATH or PYTHONHASHSEED). `timeout`
    is accepted for older callers and ignored: no test may have a wall-clock limit a loaded
    machine can reach."""
    try:
        proc = subprocess.run([sys.executable, "-m", "bertcli", *map(str, args)],
                              cwd=cwd, capture_output=True, text=True, timeout=HANG_GUARD_S, env=_env(env))
    except subprocess.TimeoutExpired:
        pytest.fail(f"bertcli {' '.join(map(str, args))} hung for {HANG_GUARD_S:.0f} s", pytrace=False)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float | None = None) -> CliResult:
    """Run `bertcli ARGS` in this process, through the entry point a user's command runs
    (`bertcli.cli.main`: the same parse, the same rendering of a UserError as exit 2), with what a
    subprocess would have had: `cwd`, the environment with `env` over it, sys.argv, stdout and
    stderr (both captured, Python's and the file descriptors'), plain 200-column consoles and the
    interpreter's default warning filters. Everything the command changes in this process is put
    back after it (cli_state_restored), so that a later test sees nothing of it. A process costs
    about 3 s of CPU (importing torch); this costs the command's own work only.
    Variables read only when an interpreter starts (PYTHON*, HF_*, ...) cannot be given here:
    such a test uses run_cli_process. BERTCLI_TEST_IN_PROCESS=0 runs every call in a process."""
    if os.environ.get("BERTCLI_TEST_IN_PROCESS") == "0":       # the old way, to compare or to time it
        return run_cli_process(*args, cwd=cwd, env=env)
    late = sorted(k for k, v in (env or {}).items() if k.startswith(STARTUP_ENV) and os.environ.get(k) != v)
    if late:
        raise ValueError(f"run_cli: {', '.join(late)} take effect when a process starts; use run_cli_process")
    merged = _env(env)
    argv = [str(a) for a in args]
    with cli_state_restored():
        os.environ.clear()
        os.environ.update(merged)
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = [str(REPO / "bertcli" / "__main__.py"), *argv]
        with _captured_output() as (out, err):
            code = _call_main(argv)
    return CliResult(code, out.getvalue(), err.getvalue())


def _call_main(argv: list[str]) -> int:
    """bertcli.cli.main(argv), ending as its process would: the exit status."""
    try:
        from bertcli.cli import main

        main(argv)
    except SystemExit as e:
        return _exit_code(e.code, sys.stderr)
    except Exception:                         # what Python does with an uncaught error: traceback, exit 1
        traceback.print_exc(file=sys.stderr)
        return 1
    return 0


# Environment variables read when an interpreter (or a library, at import) starts: an in-process
# run cannot honour a new value of theirs.
STARTUP_ENV = ("PYTHON", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "OMP_", "MKL_", "TORCH", "CUDA_", "RANK", "LOCAL_RANK",
               "WORLD_SIZE", "MASTER_")


def _exit_code(code: object, stderr) -> int:
    """The exit status of a process that raised SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)
    return 1


@contextlib.contextmanager
def _captured_output():
    """sys.stdout / sys.stderr into strings, and file descriptors 1 / 2 (what C++ libraries write)
    into files appended to them at the end; bertcli's consoles plain (no colour, soft wrap, as in
    a pipe) at the width COLUMNS gives."""
    from bertcli.core import console

    out, err = io.StringIO(), io.StringIO()
    saved_consoles = [(c, c._width, c.soft_wrap, c._color_system, c._force_terminal) for c in (console.out, console.err)]
    sys.stdout.flush(), sys.stderr.flush()
    saved_fds = [(fd, os.dup(fd), tempfile.TemporaryFile()) for fd in (1, 2)]
    for fd, _, f in saved_fds:
        os.dup2(f.fileno(), fd)
    saved_streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        for c in (console.out, console.err):
            c._width = int(os.environ.get("COLUMNS", "200"))
            c.soft_wrap, c._color_system, c._force_terminal = True, None, None
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved_streams
        for c, width, soft_wrap, colors, force in saved_consoles:
            c._width, c.soft_wrap, c._color_system, c._force_terminal = width, soft_wrap, colors, force
        for (fd, dup, f), text in zip(saved_fds, (out, err)):
            os.dup2(dup, fd)
            os.close(dup)
            f.seek(0)
            text.write(f.read().decode("utf-8", "replace"))
            f.close()


@dataclass
class CliState:
    """What a command may change in the process that runs it, as far as a later test could see it."""
    environ: dict
    cwd: str
    argv: list
    threads: int
    interop_threads: int
    torch_rng: object
    python_rng: object
    numpy_rng: object
    torch_flags: tuple
    signals: dict
    loggers: dict
    warning_filters: list
    umask: int

    @classmethod
    def now(cls) -> CliState:
        import random

        import numpy as np
        import torch

        umask = os.umask(0)
        os.umask(umask)
        return cls(dict(os.environ), os.getcwd(), list(sys.argv), torch.get_num_threads(),
                   torch.get_num_interop_threads(), torch.get_rng_state(), random.getstate(), np.random.get_state(),
                   _torch_flags(), {s: signal.getsignal(s) for s in _signals()}, _loggers(), list(warnings.filters),
                   umask)

    def differences(self, other: CliState) -> list[str]:
        """The names of the fields that differ from `other`'s."""
        import numpy as np
        import torch

        def same(a, b):
            if isinstance(a, torch.Tensor):
                return torch.equal(a, b)
            if isinstance(a, tuple) and a and isinstance(a[0], str) and isinstance(a[1], np.ndarray):  # numpy's state
                return a[0] == b[0] and np.array_equal(a[1], b[1]) and a[2:] == b[2:]
            return a == b
        mine = {**vars(self), "loggers": self.loggers}
        theirs = {**vars(other), "loggers": {k: other.loggers.get(k) for k in self.loggers}}  # new ones: imports
        return [f for f in mine if not same(mine[f], theirs[f])]

    def restore(self) -> None:
        import random

        import numpy as np
        import torch

        os.chdir(self.cwd)
        sys.argv = list(self.argv)
        torch.set_num_threads(self.threads)
        if torch.get_num_interop_threads() != self.interop_threads:   # settable once per process only: fail loudly
            torch.set_num_interop_threads(self.interop_threads)
        torch.set_rng_state(self.torch_rng)
        random.setstate(self.python_rng)
        np.random.set_state(self.numpy_rng)
        _set_torch_flags(self.torch_flags)
        for s, handler in self.signals.items():
            if handler is not None and signal.getsignal(s) != handler:
                signal.signal(s, handler)
        _set_loggers(self.loggers)
        warnings.filters[:] = self.warning_filters
        warnings._filters_mutated()  # type: ignore[attr-defined]  # so that each run warns afresh
        os.umask(self.umask)
        os.environ.clear()                  # last: the steps above may import what sets a variable
        os.environ.update(self.environ)


def _signals() -> list[signal.Signals]:
    return [s for s in signal.valid_signals() if isinstance(s, signal.Signals) and s not in (signal.SIGKILL, signal.SIGSTOP)]


def _torch_flags() -> tuple:
    import torch

    return (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.get_default_dtype(), torch.is_grad_enabled(), torch.is_anomaly_enabled(),
            torch.get_float32_matmul_precision(), torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
            torch.backends.mkldnn.enabled, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)


def _set_torch_flags(flags: tuple) -> None:
    import torch

    (deterministic, warn_only, dtype, grad, anomaly, matmul, cudnn_deterministic, cudnn_benchmark, mkldnn,
     matmul_tf32, cudnn_tf32) = flags
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.set_default_dtype(dtype)
    torch.set_grad_enabled(grad)
    torch.set_anomaly_enabled(anomaly)
    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn_deterministic, cudnn_benchmark
    torch.backends.mkldnn.enabled = mkldnn
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul_tf32, cudnn_tf32


def _loggers() -> dict:
    """Every logger's level, handlers, propagation and disabled flag, and logging.disable's level."""
    loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger))]
    state: dict = {lg.name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in loggers}
    state[None] = logging.root.manager.disable
    return state


def _set_loggers(state: dict) -> None:
    for name, v in state.items():
        if name is None:
            logging.disable(v)
            continue
        lg = logging.getLogger(name if name != "root" else None)
        lg.level, lg.handlers[:], lg.propagate, lg.disabled = v[0], v[1], v[2], v[3]


# The interpreter's default warning filters (CPython, no -W): what `python -m bertcli` starts with.
_DEFAULT_WARNINGS = (("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, ""),
                     ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""),
                     ("ignore", ResourceWarning, ""))


def _warning_to_stderr(message, category, filename, lineno, file=None, line=None) -> None:
    """A new interpreter's way of showing a warning: formatted, on stderr."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def cli_state_restored():
    """Run a command in this process: the warning filters and display a fresh interpreter has
    while it runs; afterwards the process state of CliState put back as it was (environment,
    working directory, argv, torch's threads, RNGs and global flags, Python's and numpy's RNGs,
    signal handlers, loggers, warning filters, umask)."""
    before = CliState.now()
    saved_showwarning = warnings.showwarning
    try:
        warnings.resetwarnings()
        for action, category, module in reversed(_DEFAULT_WARNINGS):
            warnings.filterwarnings(action, category=category, module=module)
        warnings.showwarning = _warning_to_stderr      # not to pytest's record of the test's warnings
        # no handler on the root logger (pytest's capture hangs there): a record reaches stderr as in a new process
        logging.root.handlers[:] = []
        logging.root.setLevel(logging.WARNING)
        yield before
    finally:
        warnings.showwarning = saved_showwarning
        before.restore()


def popen_cli(*args: str, cwd: Path, pause: str | None = None, env: dict | None = None) -> subprocess.Popen:
    """Start `python -m bertcli ARGS` in its own process group (so that a signal can reach its
    DataLoader workers too, as from SLURM). With `pause`, the process holds at that pause point
    (bertcli/core/testhooks.py) until the test signals it; `wait_paused(proc)` waits for that."""
    extra = dict(env or {})
    if pause is not None:
        marker = Path(cwd) / f".paused-{pause}-{time.monotonic_ns()}"
        extra.update(BERTCLI_TEST_PAUSE=pause, BERTCLI_TEST_PAUSED_FILE=str(marker),
                     BERTCLI_TEST_RELEASE_FILE=str(marker) + ".release")
    proc = subprocess.Popen([sys.executable, "-m", "bertcli", *map(str, args)], cwd=cwd, env=_env(extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    proc.paused_marker = marker if pause is not None else None  # type: ignore[attr-defined]
    return proc


def wait_paused(proc: subprocess.Popen) -> None:
    """Wait until `proc` holds at its pause point. No deadline: the process either gets there
    or exits (then the test fails with its output)."""
    marker: Path = proc.paused_marker  # type: ignore[attr-defined]
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the process exited ({proc.returncode}) before its pause point:\n{_tail(out + err)}",
                        pytrace=False)
        time.sleep(0.02)
    marker.unlink()


def release(proc: subprocess.Popen) -> None:
    """Let a process held at its pause point go on."""
    Path(str(proc.paused_marker) + ".release").touch()  # type: ignore[attr-defined]


def finish(proc: subprocess.Popen) -> CliResult:
    """Wait for a started process to end (hang guard only) and collect its output."""
    try:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the process hung for {HANG_GUARD_S:.0f} s:\n{_tail(out + err)}", pytrace=False)
    return CliResult(proc.returncode, out, err)


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


@pytest.fixture
def cli(tmp_path):
    """`cli(*args)` runs the CLI (in this process: run_cli) with the test's tmp_path as working directory."""

    def _run(*args, **kw):
        kw.setdefault("cwd", tmp_path)
        return run_cli(*args, **kw)

    return _run


def write_documents(path: Path, documents: list[list[str]]) -> Path:
    """Write documents in Google BERT format: one sentence per line, blank line between documents."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return path


def assert_user_error(result: CliResult, *needles: str) -> None:
    """A user mistake: exit code 2, one message naming the problem, no traceback."""
    assert result.rc == 2, f"expected exit code 2, got {result.rc}\n{result.output}"
    assert "Traceback" not in result.output, result.output
    assert "error:" in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"


# The quickstart's job, shortened to fit the suite: the real `bertcli pretrain --recipe bert-tiny`
# on the built-in corpus, two thirds of the steps and half the masked copies (3.5 minutes on two
# cores). 500 steps would save 1.5 minutes but leave features too weak for the probe's margin.
QUICK_PRETRAIN = ("--set", "train.max_steps=1000", "--set", "train.warmup_steps=100", "--set", "data.dupe_factor=5",
                  "--set", "train.eval_every=500", "--set", "train.save_every=500")


_SHARED: dict[str, object] = {}
_SHARED_FAILURES: dict[str, str] = {}


def shared_once(name: str, make):
    """`make()` once per session for every test that needs it. When it fails, the first test
    errs with one short message (the command's last lines) and the later ones are skipped
    pointing at it, instead of every test repeating the same long traceback."""
    if name in _SHARED:
        return _SHARED[name]
    if name in _SHARED_FAILURES:
        pytest.skip(f"{name} failed in an earlier test: {_SHARED_FAILURES[name]}")
    try:
        _SHARED[name] = make()
        return _SHARED[name]
    except (Exception, pytest.fail.Exception) as e:  # a failed command, an assertion, a bug: once, below
        message = str(e).strip() or type(e).__name__
    _SHARED_FAILURES[name] = message.splitlines()[0]
    pytest.fail(f"{name}: {message}", pytrace=False)


def shared_dir(tmp_path_factory) -> Path:
    """A directory every worker of this pytest session sees: the session's base temporary
    directory (under xdist each worker's basetemp is a popen-gwN folder inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(shared: Path, name: str, key: str, build) -> Path:
    """`build(directory)` once per session across the xdist workers (`shared`: shared_dir(...)):
    the first worker to ask builds `<shared>/<name>-<hash of key>/` holding its lock (bertcli's
    own stage lock), the others wait on it and reuse the result. A failed build leaves its message in FAILED, which
    the waiters raise instead of building again. `key` names the content (the command line)."""
    from bertcli.core.locks import stage_lock

    root = shared / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    done, failed = root / "DONE", root / "FAILED"
    with stage_lock(root, name):
        if failed.is_file():
            raise RuntimeError(failed.read_text())
        if not done.is_file():
            if root.exists():                         # a worker killed mid-build: start it over
                import shutil

                shutil.rmtree(root)
            root.mkdir(parents=True)
            try:
                build(root)
            except (Exception, pytest.fail.Exception) as e:
                failed.write_text(str(e).strip() or type(e).__name__)
                raise
            done.touch()
    return root


@pytest.fixture
def pretrained_tiny(tmp_path_factory) -> Path:
    """The `final/` checkpoint of a shortened quickstart run, shared by every test that needs a
    pretrained model (run once per session, whatever the number of workers); its run directory
    (metrics.jsonl) is the parent. BERTCLI_TEST_PRETRAINED=DIR reuses an existing checkpoint
    instead (e.g. the full quickstart's runs/bert-tiny/final)."""
    if os.environ.get("BERTCLI_TEST_PRETRAINED"):
        return Path(os.environ["BERTCLI_TEST_PRETRAINED"])

    def make() -> Path:
        prebuild = _PREBUILDS.get("pretrain")
        if prebuild is not None:
            prebuild.join()              # started at collection (below); its outcome is read from the files
        return _pretrained_tiny(tmp_path_factory)

    return shared_once("pretrained_tiny", make)


_PREBUILDS: dict[str, threading.Thread] = {}
_BUILDING: list[subprocess.Popen] = []


def _pretrained_tiny(tmp_path_factory) -> Path:
    def build(root: Path) -> None:
        proc = popen_cli("pretrain", "--recipe", "bert-tiny", "--set", f"output_dir={root / 'run'}", *QUICK_PRETRAIN,
                         cwd=root)
        _BUILDING.append(proc)
        r = finish(proc)
        if r.rc != 0:
            raise RuntimeError(f"the shared bert-tiny pretrain exited {r.rc}:\n{_tail(r.output)}")

    return built_once(shared_dir(tmp_path_factory), "pretrain", " ".join(QUICK_PRETRAIN), build) / "run" / "final"


def pytest_collection_modifyitems(config, items):
    """The files whose tests need the shared pretrain run last (each file whole, in its order),
    so that the background build (pytest_collection_finish) overlaps the rest of the suite
    instead of a worker waiting for it at the start."""
    if os.environ.get("BERTCLI_TEST_PRETRAINED"):
        return
    needs = {item.nodeid.split("::")[0] for item in items if "pretrained_tiny" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: item.nodeid.split("::")[0] in needs)     # stable: the rest keep their order


def pytest_collection_finish(session):
    """The shared pretrain takes minutes: when a collected test needs it, start it now, in the
    background, so that the tests before the first one that needs it run meanwhile instead of a
    worker waiting idle for it later. Under xdist every worker starts one; the stage lock lets
    one build and the other wait."""
    if os.environ.get("BERTCLI_TEST_PRETRAINED") or session.config.option.collectonly:
        return
    if not any("pretrained_tiny" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    factory = session.config._tmp_path_factory

    def prebuild():
        try:
            _pretrained_tiny(factory)
        except BaseException:            # left in FAILED (built_once); the first test that needs it reports it
            pass

    thread = threading.Thread(target=prebuild, name="prebuild-pretrain", daemon=True)
    _PREBUILDS["pretrain"] = thread
    thread.start()


def pytest_sessionfinish(session, exitstatus):
    """A session stopped early (-x, Ctrl-C) kills a background build instead of leaving it
    running; otherwise it waits for it, since another worker may be waiting on it."""
    stopped = exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop or session.shouldfail
    for proc in _BUILDING:
        if stopped and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for thread in _PREBUILDS.values():
        thread.join()


@pytest.fixture
def one_thread():
    """One intra-op thread for the test, restored after it, whatever an earlier test left: tiny
    models gain nothing from two, and on a busy machine OpenMP's spinning threads make them many
    times slower. A module of tiny-model tests takes it for every test with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """{(family, task): (checkpoint, bundle)} for every family and kind, exported once through
    run_export (its own verification on) and shared by the export and predict tests, once per
    session whatever the number of xdist workers (built_once); the tests only read them."""
    import torch
    from helpers.export import FAMILIES, KINDS, NER_LABELS, make_checkpoint

    from bertcli.export.run import run_export

    def build(root: Path) -> None:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for family in FAMILIES:
                for task, head in KINDS.items():
                    labels = NER_LABELS if head == "token" else ("negative", "positive")
                    ckpt = root / f"{family}-{head}-0"
                    if not ckpt.exists():
                        make_checkpoint(root, family, head, labels=labels)
                    result = run_export(ckpt, root / "bundles" / f"{family}-{task}", task=task)
                    assert result.passed, result.info["verification"]
        finally:
            torch.set_num_threads(before)

    root = built_once(shared_dir(tmp_path_factory), "exported", f"{FAMILIES} {KINDS} {NER_LABELS}", build)
    return {(family, task): (root / f"{family}-{head}-0", root / "bundles" / f"{family}-{task}")
            for family in FAMILIES for task, head in KINDS.items()}
