"""Paths bertcli writes: checked before any work starts, and disk-full turned into one message.

    check_writable_dir(path, what, key)   before work: the directory exists or can be made, and
                                          a file can be created in it (UserError otherwise);
                                          bertcli.core.outputs.check_output_dir adds the rules
                                          of what an output may replace
    check_writable_file(path, what, key)  the same for a file that will be written
    check_recipe_outputs(recipe)        output_dir and cache_dir of a recipe (every stage command)
    saving(path, what, needed=None)     context: ENOSPC / EDQUOT / EROFS while writing `path` ->
                                        one UserError naming the path, the space needed and free
    check_space(path, needed, what)     before a large write: refuse when the disk has less free
    resolve_checkpoint(path)            what `-c path` means: a checkpoint directory, or a run
                                        directory's final/ or newest complete checkpoint
    checkpoint_problem(path)            why `path` is not a checkpoint directory (None: it is)

Writability is probed by creating (and removing) a temporary file in the nearest existing
directory, not by permission bits: root ignores the bits, a read-only mount or a full quota
does not, and the probe sees them all the way the real write will.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from bertcli.core import console
from bertcli.core.errors import UserError

SPACE_ERRORS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded",
                errno.EFBIG: "the file is larger than the file system allows"}


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"  # not reached


def _refuse(path: Path, what: str, reason: str, key: str | None, fix: str | None = None) -> UserError:
    where = f"{key} = {path}" if key else str(path)
    if fix is None:
        other = (f"another {key} (--set {key}=DIR)" if not key.startswith("-") else f"another {key}") if key \
            else "another path"
        fix = f"choose {other}, or make this path a writable directory"
    return UserError(f"cannot write {what} at {path}: {reason}", where=where, fix=fix)


def _probe(directory: Path) -> str | None:
    """None when a file can be created in `directory`, else why not."""
    try:
        fd, name = tempfile.mkstemp(prefix=".bertcli-write-probe-", dir=directory)
    except OSError as e:
        return e.strerror.lower() if e.strerror else str(e)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return None


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_writable_dir(path: Path | str, what: str = "the output", key: str | None = None) -> Path:
    """The directory `path` exists (or can be created) and is writable; UserError naming
    `what` and the recipe key / option `key` otherwise. Creates nothing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise _refuse(path, what, "it exists and is a regular file, not a directory", key)
    base = _nearest_existing(path.absolute())
    if not base.is_dir():
        raise _refuse(path, what, f"{base} is a regular file, so no directory can be made under it", key)
    reason = _probe(base)
    if reason is not None:
        made = "" if base == path.absolute() else f" (its nearest existing parent {base} is not writable)"
        raise _refuse(path, what, f"{reason}{made}", key)
    return path


def check_writable_file(path: Path | str, what: str = "the output file", key: str | None = None) -> Path:
    """A file that will be written at `path`: not a directory, and its directory writable."""
    path = Path(path)
    if path.is_dir():
        raise _refuse(path, what, "it is a directory", key)
    check_writable_dir(path.parent, what, key)
    return path


class _InitFrom(Protocol):
    @property
    def init_from(self) -> str | None: ...


class RecipeDirs(Protocol):
    """What the checks of a recipe's write paths read of it: a bertcli.config.recipe.Recipe, which
    core (the lowest layer) does not import."""

    @property
    def cache_dir(self) -> str | None: ...
    @property
    def out(self) -> Path: ...
    @property
    def cache(self) -> Path: ...
    @property
    def model(self) -> _InitFrom: ...

    def corpus_paths(self) -> list[Path]: ...


def check_recipe_outputs(recipe: RecipeDirs) -> None:
    """Every directory a recipe's stages and run write: output_dir and cache_dir."""
    check_writable_dir(recipe.out, "the run directory", "output_dir")
    if recipe.cache_dir:
        check_writable_dir(recipe.cache, "the stage cache", "cache_dir")


def free_bytes(path: Path | str) -> int:
    """Free bytes on the file system that holds `path` (or its nearest existing parent)."""
    return shutil.disk_usage(_nearest_existing(Path(path).absolute())).free


def _space_error(path: Path, what: str, reason: str, needed: int | None) -> UserError:
    free = free_bytes(path)
    need = f"; it needs at least {human_bytes(needed)}, {human_bytes(free)} are free" if needed else \
        f"; {human_bytes(free)} are free"
    return UserError(f"cannot write {what}: {reason}{need}", where=str(path),
                     fix="free some space (or move output_dir / cache_dir to a larger disk) and run again; "
                         "nothing half-written was left under the real name")


def check_space(path: Path | str, needed: int, what: str) -> None:
    """Refuse before writing `needed` bytes under `path` when the disk has less free."""
    path = Path(path)
    if needed > free_bytes(path):
        raise _space_error(path, what, "not enough free space", needed)


@contextlib.contextmanager
def saving(path: Path | str, what: str, needed: int | None = None) -> Iterator[None]:
    """Turn a full disk (or quota, or a read-only file system) while writing `path` into one
    UserError naming the path and the space needed. The writer's own temporary-name-and-rename
    keeps the previous complete copy; this only gives the message."""
    try:
        yield
    except OSError as e:
        if e.errno in SPACE_ERRORS:
            raise _space_error(Path(path), what, SPACE_ERRORS[e.errno], needed) from e
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise UserError(f"cannot write {what}: {(e.strerror or str(e)).lower()}", where=str(e.filename or path),
                            fix="make the directory writable or choose another output_dir") from e
        raise
    except Exception as e:  # safetensors' writer reports a full disk as a SafetensorError's text
        text = str(e)
        if "No space left" in text or "os error 28" in text:
            raise _space_error(Path(path), what, SPACE_ERRORS[errno.ENOSPC], needed) from e
        if "Disk quota" in text or "os error 122" in text:
            raise _space_error(Path(path), what, SPACE_ERRORS[errno.EDQUOT], needed) from e
        raise


def default_out(checkpoint: Path, kind: str) -> Path:
    """runs/<kind>/<checkpoint name>."""
    return Path("runs") / kind / checkpoint_name(Path(checkpoint).resolve())


def checkpoint_name(path: Path) -> str:
    """A checkpoint's folder name; `final` and `step-N` are named with their run too (every
    pretraining run has a `final`), as `<run>-final`."""
    name = path.name
    if (name == "final" or name.startswith("step")) and path.parent.name:
        name = f"{path.parent.name}-{name}"
    return name


# ---------------------------------------------------------------------------- checkpoints (-c)
# A pretraining run directory holds final/ (the finished model) and checkpoints/step-N (saved
# during training; trainer_state/state.json is written last, so its presence marks one complete).
STEP_DIR = re.compile(r"^step-(\d{7,})$")


def run_checkpoints(run_dir: Path) -> list[Path]:
    """The complete step checkpoints of a run directory, oldest first (no torch needed)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name))
             and (p / "trainer_state" / "state.json").is_file() and (p / "config.json").is_file()]
    return [p for _, p in sorted(found)]


def _resume_command(run_dir: Path) -> str:
    """The command that finishes the run in `run_dir`: its own resolved recipe.yaml, whose
    output_dir is this directory (the same recipe, so the run's checks accept it)."""
    recipe = run_dir / "recipe.yaml"
    if not recipe.is_file():
        return "bertcli pretrain -r RECIPE --resume auto (the run's recipe and --set items)"
    command = f"bertcli pretrain -r {recipe} --resume auto"
    try:
        import yaml

        data = yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}
        # output_dir null means runs/NAME, from the directory the command runs in
        out = data.get("output_dir") or Path("runs") / str(data.get("name"))
    except Exception:  # an unreadable recipe.yaml: pretrain itself will say what is wrong with it
        out = None
    if out is None or Path(str(out)).absolute() != run_dir.absolute():
        command += f" --set output_dir={run_dir}"
    return command


def checkpoint_problem(path: Path, flag: str = "-c") -> UserError | None:
    """Why `path` is not a checkpoint directory (None: it has a config.json), naming what is
    there instead: a file, a run directory's final/ or newest step checkpoint, the resume command."""
    path = Path(path)
    generic = "give a checkpoint directory (config.json + model.safetensors: a run's final/ or " \
              "checkpoints/step-N, or transformers' save_pretrained)"
    if path.is_file():
        parent_ok = (path.parent / "config.json").is_file()
        return UserError(f"{flag} {path} is a file, not a checkpoint directory", where=str(path),
                         fix=f"give the directory that holds it: {flag} {path.parent}" if parent_ok else generic)
    if path.is_dir() and (path / "config.json").is_file():
        return None
    run = path.parent if path.name == "final" else path
    steps = run_checkpoints(run)
    if steps:
        what = (f"{path} does not exist: the run did not finish" if not path.exists() else
                f"{path} is a run directory without final/: the run did not finish")
        return UserError(f"{what}; its newest complete checkpoint is {steps[-1]}", where=str(path),
                         fix=f"finish the run with `{_resume_command(run)}` (it writes {run / 'final'}), or use the "
                             f"checkpoint as it is: {flag} {steps[-1]}")
    if not path.exists():
        return UserError(f"checkpoint directory {path} does not exist", where=str(path), fix=generic)
    return UserError(f"no config.json in {path}", where=str(path),
                     fix=f"{generic}; a pretraining run directory has final/ and checkpoints/ in it")


def resolve_checkpoint(path: str | os.PathLike[str], flag: str = "-c") -> Path:
    """The checkpoint directory that `-c path` means: a checkpoint directory itself; a run
    directory's final/, or, when the run did not finish, its newest complete step checkpoint
    (saying which and how to finish the run). Anything else is one UserError naming what is
    there (a file, a missing final/ beside checkpoints: the newest one and the resume command)."""
    path = Path(path)
    if path.is_dir() and not (path / "config.json").is_file():
        if (path / "final" / "config.json").is_file():
            console.log(f"{flag} {path}: a run directory; using its final model {path / 'final'}")
            return path / "final"
        steps = run_checkpoints(path)
        if steps:
            console.log(f"{flag} {path}: the run has no final/ (it did not finish); using its newest complete "
                        f"checkpoint {steps[-1]}; `{_resume_command(path)}` finishes the run")
            return steps[-1]
    problem = checkpoint_problem(path, flag)
    if problem is not None:
        raise problem
    return path
