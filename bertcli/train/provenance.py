"""What a run was trained on, by content: the sha256 of the tokenizer (tokenizer.json) and of the
built data (its Arrow files), recorded in every checkpoint and compared on `--resume`.

The row count alone cannot tell a rebuilt data stage (another corpus file, another bertcli)
from the original; the content hash can. Hashing a large data stage takes a while, so the
result is remembered in the stage directory (`.content-sha256.json`, keyed by every file's size
and mtime): a second start reads it back instead of hashing again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from bertcli.core import jsonout
from bertcli.core.errors import UserError
from bertcli.core.fs import write_text_atomic

CACHE = ".content-sha256.json"


def _files(directory: Path, patterns: Iterable[str]) -> list[Path]:
    found = {p for pat in patterns for p in directory.rglob(pat) if p.is_file()}
    return sorted(found, key=lambda p: p.relative_to(directory).as_posix())


def content_sha256(directory: Path | str, patterns: Iterable[str]) -> str:
    """sha256 over the relative names and bytes of the files matching `patterns` (recursive)."""
    directory = Path(directory)
    files = _files(directory, patterns)
    manifest = {p.relative_to(directory).as_posix(): [p.stat().st_size, p.stat().st_mtime_ns] for p in files}
    cache = directory / CACHE
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        saved = json.loads(cache.read_text(encoding="utf-8"))
        if saved["manifest"] == manifest:
            return saved["sha256"]
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(directory).as_posix().encode() + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    digest = h.hexdigest()
    with contextlib.suppress(OSError):  # a read-only shared cache: hash again next time
        write_text_atomic(cache, jsonout.dumps({"manifest": manifest, "sha256": digest}))
    return digest


def inputs_sha256(tokenizer_dir: Path, data_dir: Path) -> dict[str, str]:
    """The hashes a checkpoint records (TrainState.tokenizer_sha256 / data_sha256)."""
    return {"tokenizer_sha256": content_sha256(tokenizer_dir, ["tokenizer.json"]),
            "data_sha256": content_sha256(data_dir, ["*.arrow"])}


def check_same_inputs(state, now: dict[str, str], checkpoint: Path, tokenizer_dir: Path, data_dir: Path,
                      compare: Iterable[str] = ("tokenizer_sha256", "data_sha256")) -> None:
    """UserError when the tokenizer or the data differs from what the checkpoint was trained on
    (the keys in `compare`). Checkpoints written before the hashes were recorded (None) are not
    compared."""
    problems = []
    for key, what, path in (("tokenizer_sha256", "tokenizer", Path(tokenizer_dir) / "tokenizer.json"),
                            ("data_sha256", "data", Path(data_dir))):
        saved = getattr(state, key, None) if key in compare else None
        if saved is not None and saved != now[key]:
            problems.append(f"{what}: the checkpoint was trained on sha256 {saved}, {path} has sha256 {now[key]}")
    if not problems:
        return
    raise UserError(
        "the tokenizer or data stage was rebuilt since the checkpoint, with other content; " + "; ".join(problems),
        where=str(checkpoint),
        fix=f"get the original back: restore those stage directories from a backup, or rebuild them from the "
            f"exact corpus files and bertcli version of the run (the checkpoint's tokenizer files are in "
            f"{checkpoint}; its recipe.yaml names the settings); else start a new run with --force")
