"""Paths bertcli writes: checked before any work starts, and disk-full turned into one message.

    check_output_dir(path, what, key)   before work: the directory exists or can be made, and
                                        a file can be created in it (UserError otherwise)
    check_output_file(path, what, key)  the same for a file that will be written
    check_recipe_outputs(recipe)        output_dir and cache_dir of a recipe (every stage command)
    saving(path, what, needed=None)     context: ENOSPC / EDQUOT / EROFS while writing `path` ->
                                        one UserError naming the path, the space needed and free
    check_space(path, needed, what)     before a large write: refuse when the disk has less free

Writability is probed by creating (and removing) a temporary file in the nearest existing
directory, not by permission bits: root ignores the bits, a read-only mount or a full quota
does not, and the probe sees them all the way the real write will.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

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


def check_output_dir(path: Path | str, what: str = "the output", key: str | None = None) -> Path:
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


def check_output_file(path: Path | str, what: str = "the output file", key: str | None = None) -> Path:
    """A file that will be written at `path`: not a directory, and its directory writable."""
    path = Path(path)
    if path.is_dir():
        raise _refuse(path, what, "it is a directory", key)
    check_output_dir(path.parent, what, key)
    return path


def check_recipe_outputs(recipe) -> None:
    """Every directory a recipe's stages and run write: output_dir and cache_dir."""
    check_output_dir(recipe.out, "the run directory", "output_dir")
    if recipe.cache_dir:
        check_output_dir(recipe.cache, "the stage cache", "cache_dir")


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
    """runs/<kind>/<checkpoint name>; `final` and `step-N` are named with their run too."""
    path = Path(checkpoint).resolve()
    name = path.name
    if name == "final" or name.startswith("step"):
        name = f"{path.parent.name}-{name}"
    return Path("runs") / kind / name
