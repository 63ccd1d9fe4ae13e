"""Files that are complete or absent: written under a temporary name next to the final one and
renamed into place, so an interrupted write never leaves a half-written file or directory under
the real name (stage outputs, checkpoints, metrics, fine-tuning results)."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Iterator, Protocol


class Saves(Protocol):
    """What `building` records in a finished directory (a Recipe: its resolved recipe.yaml)."""

    def save(self, directory: Path) -> object: ...


@contextlib.contextmanager
def building(final: Path, recipe: Saves) -> Iterator[Path]:
    """Yield a temporary directory next to `final`; on success save the resolved recipe into it
    and rename it to `final` (replacing an older copy); on failure remove it. Temporaries that
    killed runs left next to it over a day ago are removed first."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(final.parent)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")
    tmp.mkdir()
    try:
        yield tmp
        recipe.save(tmp)
        if final.exists():
            trash = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, trash)
            os.replace(tmp, final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise



def write_atomic(path: Path, write) -> Path:
    """`write(tmp)` to a temporary name next to `path`, then rename it to `path`: a half-written
    file never exists under the real name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def remove_stale_temporaries(parent: Path, max_age_s: float = 24 * 3600) -> None:
    """Remove temporary stage directories left by killed runs (older than `max_age_s`)."""
    if not parent.is_dir():
        return
    now = time.time()
    for p in parent.iterdir():
        if p.name.startswith(".") and (".tmp-" in p.name or ".old-" in p.name):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > max_age_s:
                    shutil.rmtree(p, ignore_errors=True)
