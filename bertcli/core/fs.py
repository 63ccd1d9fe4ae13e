"""Files that are complete or absent: written under a temporary name next to the final one and
renamed into place, so an interrupted write never leaves a half-written file or directory under
the real name (stage outputs, checkpoints, metrics, fine-tuning results)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from bertcli.core.outputs import TEMP_TAG, install, temporary_dir


class Saves(Protocol):
    """What `building` records in a finished directory (a Recipe: its resolved recipe.yaml)."""

    def save(self, directory: Path) -> object: ...


@contextlib.contextmanager
def building(final: Path, recipe: Saves) -> Iterator[Path]:
    """Yield a marked temporary directory next to `final`; on success save the resolved recipe
    into it and put it in place (`outputs.install`: an earlier copy is replaced only file by file
    as its marker lists them, and a directory bertcli did not write is refused, never replaced);
    on failure or Ctrl-C remove it (a process killed outright leaves a temporary that names its
    PID and host). bertcli's temporaries left next to it by dead processes are removed first
    (`outputs.remove_stale_temporaries`: nothing else is touched)."""
    tmp = temporary_dir(final)
    try:
        yield tmp
        recipe.save(tmp)
        install(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_atomic(path: Path, write) -> Path:
    """`write(tmp)` to a temporary name next to `path`, then rename it to `path`: a half-written
    file never exists under the real name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_file(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def temporary_file(path: Path) -> Path:
    """The temporary name a file is written under before its rename: bertcli's tag, the PID."""
    path = Path(path)
    return path.with_name(f".{path.name}{TEMP_TAG}{os.getpid()}")
