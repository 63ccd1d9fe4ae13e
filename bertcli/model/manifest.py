"""The integrity manifest of a checkpoint directory: the size and sha256 of every file, written
last, so that a checkpoint whose weights were cut, rewritten or swapped is never trusted.

    write_manifest(directory)     bertcli-manifest.json: {"format", "version", "files": {relative
                                  path: {"size", "sha256"}}}, written atomically after every
                                  other file of the checkpoint
    verify_checkpoint(directory)  before a checkpoint is resumed, exported, fine-tuned or run:
                                  with a manifest, every listed file must be there with its size
                                  and hash; without one (a transformers directory), every
                                  safetensors file of the directory (and of trainer_state/) must
                                  have a readable header whose tensors end exactly where the
                                  file does. UserError naming the file otherwise.

A verification is remembered per process for the same files (path, size, mtime), so the several
readers of one command hash a checkpoint once.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable
from pathlib import Path

from bertcli.core import jsonout
from bertcli.core.errors import UserError
from bertcli.core.fs import write_text_atomic

MANIFEST = "bertcli-manifest.json"
FORMAT = "bertcli-checkpoint-manifest"
VERSION = 1
MAX_HEADER = 100 << 20   # safetensors' own limit on the JSON header (100 MB)
_verified: set[tuple] = set()


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _files(directory: Path) -> list[Path]:
    """Every regular file under `directory` but the manifest and hidden temporaries, sorted."""
    out = []
    for p in sorted(Path(directory).rglob("*")):
        rel = p.relative_to(directory)
        if p.is_file() and rel.as_posix() != MANIFEST and not any(part.startswith(".") for part in rel.parts):
            out.append(p)
    return out


def write_manifest(directory: Path, names: Iterable[str] | None = None) -> Path:
    """Hash every file of `directory` (or only `names`, the files the caller wrote, when the
    directory may hold others) into bertcli-manifest.json; call it after the last write."""
    directory = Path(directory)
    paths = _files(directory) if names is None else [directory / n for n in sorted(set(names))]
    files = {p.relative_to(directory).as_posix(): {"size": p.stat().st_size, "sha256": sha256_of(p)}
             for p in paths}
    body = jsonout.dumps({"format": FORMAT, "version": VERSION, "files": files}, indent=1, sort_keys=True) + "\n"
    return write_text_atomic(directory / MANIFEST, body)


def _damaged(directory: Path, name: str, what: str) -> UserError:
    return UserError(f"checkpoint file {name} {what}", where=str(Path(directory) / name),
                     fix="the checkpoint is damaged (a cut copy, a full disk, an edit): copy it again from its "
                         "source, use another checkpoint, or delete bertcli-manifest.json if you changed the file "
                         "on purpose")


def read_manifest(directory: Path) -> dict[str, dict] | None:
    """The manifest's files (None when the directory has none); UserError when it is malformed."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise _damaged(directory, MANIFEST, f"is unreadable ({str(e)[:200]})") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(files, dict):
        raise _damaged(directory, MANIFEST, "is not a bertcli checkpoint manifest")
    if not isinstance(data.get("version"), int) or data["version"] > VERSION:
        raise UserError(f"{MANIFEST} has version {data.get('version')!r}; this bertcli reads version {VERSION}",
                        where=str(path), fix="upgrade bertcli")
    for name, entry in files.items():
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts or not name:
            raise _damaged(directory, MANIFEST, f"lists {name!r}, a path outside the checkpoint")
        ok = isinstance(entry, dict) and isinstance(entry.get("size"), int) and not isinstance(entry["size"], bool) \
            and entry["size"] >= 0 and isinstance(entry.get("sha256"), str) and len(entry["sha256"]) == 64
        if not ok:
            raise _damaged(directory, MANIFEST, f"has a malformed entry for {name!r} (want size and sha256)")
    return files


def check_safetensors(path: Path, directory: Path) -> None:
    """A safetensors file whose header parses and whose last tensor ends at the end of the file
    (what can be checked without a manifest: a cut or padded file fails)."""
    name = Path(path).relative_to(directory).as_posix() if Path(path).is_relative_to(directory) else str(path)
    try:
        size = Path(path).stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise _damaged(directory, name, f"is cut short ({size:,} bytes, no safetensors header)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or 8 + n > size:
                raise _damaged(directory, name, f"is cut short or not safetensors (header of {n:,} bytes claimed, "
                                                f"file of {size:,})")
            header = json.loads(f.read(n))
    except OSError as e:
        raise _damaged(directory, name, f"cannot be read ({e.strerror})") from None
    except (ValueError, UnicodeDecodeError):
        raise _damaged(directory, name, "has an unreadable safetensors header") from None
    if not isinstance(header, dict):
        raise _damaged(directory, name, "has an unreadable safetensors header")
    end = 0
    for key, t in header.items():
        if key == "__metadata__":
            continue
        offsets = t.get("data_offsets") if isinstance(t, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise _damaged(directory, name, f"has a malformed header entry for tensor {key!r}")
        end = max(end, offsets[1])
    if 8 + n + end != size:
        raise _damaged(directory, name, f"is {size:,} bytes but its header describes {8 + n + end:,} "
                                        "(cut short or padded)")


def _stamp(directory: Path) -> tuple:
    return tuple((p.relative_to(directory).as_posix(), st.st_size, st.st_mtime_ns)
                 for p in _files(directory) + [directory / MANIFEST] if p.exists() for st in [p.stat()])


def verify_checkpoint(directory: Path) -> bool:
    """UserError naming the first file that fails (see the module doc). True when a manifest
    vouched for every listed file, False when only the safetensors headers could be checked."""
    directory = Path(directory)
    key = (str(directory.resolve()), _stamp(directory))
    files = read_manifest(directory)
    if key in _verified:
        return files is not None
    if files is None:   # the weights a load reads, and a training checkpoint's state
        for p in sorted(directory.glob("*.safetensors")) + sorted((directory / "trainer_state").glob("*.safetensors")):
            if p.is_file():
                check_safetensors(p, directory)
    else:
        for name, entry in sorted(files.items()):
            p = directory / name
            if not p.is_file():
                raise _damaged(directory, name, f"is missing (listed in {MANIFEST})")
            size = p.stat().st_size
            if size != entry["size"]:
                raise _damaged(directory, name, f"is {size:,} bytes, {entry['size']:,} when it was written "
                                                "(cut short or changed)")
            if sha256_of(p) != entry["sha256"]:
                raise _damaged(directory, name, "does not match its sha256 in the manifest (changed since it "
                                                "was written)")
    _verified.add(key)
    return files is not None
