"""Exclusive locks on run and stage directories, so two processes never write one directory.

A lock is `fcntl.flock` on a file next to the directory (`<parent>/.<name>.lock`) that holds
the holder's PID and host, removed by the holder when it lets go. The kernel drops a flock when
its process dies, however it dies, so a lock left by a killed process is free at once: the next process takes it over (and says so
when the file still names a process that no longer runs on this host). Nothing is ever deleted
on a guess about whether its owner is alive.

- `run_lock(dir)`: a second run on the same output directory fails at once (UserError, exit 2)
  naming the holder.
- `stage_lock(dir, what)`: a second build of the same stage (e.g. two users sharing a
  cache_dir) waits for the first, then finds its result complete and reuses it.

Locks on network filesystems follow what their flock implementation does.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from bertcli.core import console
from bertcli.core.errors import UserError


def lock_path(directory: Path) -> Path:
    directory = Path(os.path.abspath(directory))   # `.` names the working directory (its name is empty)
    return directory.with_name(f".{directory.name}.lock")


PID_MAX = 1 << 22  # Linux's largest pid_max: a larger number was never a process


def _holder(f) -> tuple[int | None, str]:
    """The PID and host a lock file names; (None, "?") for anything else (a huge or negative
    number, text, binary junk): the flock decides who holds the lock, the file only informs."""
    f.seek(0)
    try:
        parts = f.read(4096).split()
    except (OSError, ValueError):
        parts = []
    first = parts[0] if parts else ""
    pid = int(first) if first.isascii() and first.isdigit() and len(first) <= 7 and 0 < int(first) <= PID_MAX else None
    host = parts[1] if pid is not None and len(parts) > 1 and parts[1].isprintable() else "?"
    return pid, host[:255]


def _who(pid: int | None, host: str) -> str:
    return f"PID {pid}, host {host}" if pid is not None else "its lock file names no valid PID"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    return True


@contextlib.contextmanager
def _lock(directory: Path, wait: bool, what: str) -> Iterator[None]:
    path = lock_path(directory)
    f = _acquire(path, directory, wait, what)
    with f:
        pid, host = _holder(f)
        if pid is not None and pid != os.getpid() and host == socket.gethostname() and not _alive(pid):
            console.log(f"took over the lock of {what} left by PID {pid} (no longer running)")
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()} {socket.gethostname()}\n")
        f.flush()
        try:
            yield
        finally:
            # The holder removes the file it holds before letting go, so a free lock leaves
            # nothing behind; a process that was waiting on the removed file sees that its
            # file is no longer the one at `path` and takes the lock anew (_acquire).
            with contextlib.suppress(OSError):
                path.unlink()
            fcntl.flock(f, fcntl.LOCK_UN)


def _acquire(path: Path, directory: Path, wait: bool, what: str):
    """The lock file at `path`, open and flocked by this process: the file that is at `path` now
    (not one a releasing holder removed while this process waited for it)."""
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            f = open(path, "a+", encoding="utf-8", errors="replace")  # a garbled holder line is read, not fatal
        except OSError as e:
            raise UserError(f"cannot create the lock file for {what}: {e.strerror}", where=str(path),
                            fix="make the directory writable, or choose another output_dir / cache_dir") from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, host = _holder(f)
            if not wait:
                f.close()
                raise UserError(f"{what} is in use by another bertcli process ({_who(pid, host)})",
                                where=str(directory),
                                fix="wait for that run to finish or stop it, or choose another output_dir") from None
            holder = f"PID {pid} on {host}" if pid is not None else "another process (its lock file names no valid PID)"
            console.log(f"waiting for {holder}, which is building {what} ({directory})")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(f.fileno()).st_ino:
            return f
        f.close()                                  # the holder removed it as we waited: again


def run_lock(directory: Path) -> contextlib.AbstractContextManager:
    """Hold the run directory for this process; fail at once when another one holds it."""
    return _lock(directory, wait=False, what="the run directory")


def stage_lock(directory: Path, what: str) -> contextlib.AbstractContextManager:
    """Hold a stage directory while checking and building it; wait while another process does."""
    return _lock(directory, wait=True, what=what)
