"""What bertcli may delete, and when: output markers, temporaries, outputs that are not inputs.

    check_output_dir(out, force, inputs, key)    before work: a directory output is new, empty, or
                                                 bertcli's own (marked) and --force is given; it
                                                 neither is nor holds an input
    check_output_file(out, force, inputs, ...)   the same for a file output (predict, features)
    writing(out, force, inputs, key)             context of a directory-writing command: the checks,
                                                 the run-directory lock, and the marker written
                                                 last (listing what this run wrote)
    temporary_dir(final) / install(tmp, final)   build under a marked temporary next to `final`, then
                                                 put it in place, removing only listed files
    remove_stale_temporaries(parent)             bertcli's temporaries whose process is dead
    removing_on_signal(*temporaries)             SIGTERM raises SystemExit(143), so that `finally`
                                                 clauses remove a temporary as on Ctrl-C; the
                                                 temporary files named go on any exception

The marker `.bertcli-output.json` (command, time, version, files) is written last into every
directory bertcli makes: it says the directory is bertcli's and which files in it bertcli wrote.
A non-empty directory without it is never written into; with it, only the listed files are ever
removed or replaced, so a user's file put beside them survives every command.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import NoReturn

from bertcli.core import jsonout, paths
from bertcli.core.errors import UserError
from bertcli.core.locks import _alive as alive
from bertcli.core.locks import lock_path, run_lock
from bertcli.core.version import __version__

MARKER = ".bertcli-output.json"
TEMP_MARKER = ".bertcli-temporary.json"
TEMP_TAG = ".bertcli-tmp-"      # in the names of temporaries: `.<final>.bertcli-tmp-<pid>-<ns>`
TRASH_TAG = ".bertcli-old-"     # an earlier output moved aside while its successor moves in
COMPLETE_LAST = ("recipe.yaml",)  # stage directories' completeness marker: moved in last
# A cache folder `<stage>-<12 hex>` with recipe.yaml, as bertcli made them before markers existed.
LEGACY_STAGE = re.compile(r"(corpus|tokenizer|data)(-[a-z0-9_]+)?-[0-9a-f]{12}")


def command_name() -> str:
    """`finetune classify`, `export`, ...: the words of the command line before its options."""
    words = []
    for a in sys.argv[1:3]:
        if a.startswith("-"):
            break
        words.append(a)
    return " ".join(words) or "python"


# ------------------------------------------------------------------------------------ markers
def _files_under(directory: Path, skip: Iterable[str] = (MARKER, TEMP_MARKER)) -> list[str]:
    """Relative POSIX paths of every file (and symlink) under `directory`."""
    out = []
    for root, dirs, files in os.walk(directory):
        base = Path(root).relative_to(directory)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            rel = (base / name).as_posix()
            if rel not in skip:
                out.append(rel)
    return sorted(out)


def listed_files(directory: Path) -> set[str] | None:
    """The files bertcli wrote into `directory`, as its marker lists them; None when the
    directory is not bertcli's. An export bundle made before markers existed lists its files in
    export_info.json ("files"), which is read as its marker."""
    directory = Path(directory)
    marker = directory / MARKER
    for path, key in ((marker, "files"), (directory / "export_info.json", "files")):
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        files = data.get(key) if isinstance(data, dict) else None
        if path == marker:
            if not isinstance(files, list):
                raise UserError(f"the output marker {MARKER} is damaged", where=str(path),
                                fix="check that directory's content yourself, then remove the marker (or the "
                                    "directory) and run again; bertcli removes nothing it cannot prove it wrote")
            return {str(f) for f in files}
        names = set(files) if isinstance(files, (dict, list)) else set()
        return {str(f) for f in names} | {"export_info.json"}
    if LEGACY_STAGE.fullmatch(directory.name) and (directory / "recipe.yaml").is_file():
        return set(_files_under(directory))        # a stage folder of a bertcli before markers
    return None


def marker_info(directory: Path) -> dict:
    try:
        data = json.loads((Path(directory) / MARKER).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_marker(directory: Path, files: Iterable[str], command: str | None = None) -> None:
    """The marker, written atomically: the directory is bertcli's and holds these files."""
    directory = Path(directory)
    data = {"command": command or command_name(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "version": __version__, "pid": os.getpid(), "host": socket.gethostname(),
            "files": sorted(set(files) - {MARKER, TEMP_MARKER})}
    tmp = directory / f"{MARKER}{TEMP_TAG}{os.getpid()}"
    tmp.write_text(jsonout.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, directory / MARKER)


# ------------------------------------------------------------------------------- before work
def _resolved(p) -> Path:
    return Path(p).expanduser().resolve()


def _inside(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def check_not_input(out: Path, inputs: Iterable, key: str = "--out", file_output: bool = False,
                    model_dirs: Iterable = ()) -> None:
    """An output is never an input: a directory output may not be or hold an input (or the
    checkpoint); a file output may not be an input nor lie inside the checkpoint / bundle."""
    target = _resolved(out)
    for given in [p for p in inputs if p is not None]:
        src = _resolved(given)
        clash = target == src if file_output else _inside(src, target)
        if clash:
            what = "is" if target == src else "holds"
            raise UserError(f"{key} {out} {what} the input {given}: writing there would replace what the "
                            "command reads", where=str(out),
                            fix=f"choose another {key} (outside the inputs and the checkpoint)")
    for given in [p for p in model_dirs if p is not None]:
        src = _resolved(given)
        directory = src.parent if src.is_file() else src
        if _inside(target, directory):
            raise UserError(f"{key} {out} lies inside the model directory {directory}: it could replace a "
                            "file of the model", where=str(out), fix=f"choose another {key}, outside {directory}")


def check_work_dir(out: Path, inputs: Iterable, key: str, checkpoints: Iterable = ()) -> None:
    """A directory a command fills with its stages or its run (a cache, pretrain's output_dir) is
    no input and lies inside none: its corpus-*/, tokenizer-*/ and data-*/ folders would become
    part of the checkpoint, or of a corpus folder read the next time. Nor does it hold a
    checkpoint the command reads (pretrain --force replaces final/ and checkpoints/ there)."""
    check_not_input(out, checkpoints, key)
    target = _resolved(out)
    for given in [p for p in (*inputs, *checkpoints) if p is not None]:
        src = _resolved(given)
        if target == src or (src.is_dir() and _inside(target, src)):
            how = "is" if target == src else "lies inside"
            raise UserError(f"{key} {out} {how} the input {given}: the command would write its stages into what "
                            "it reads", where=str(out), fix=f"choose another {key}, outside the inputs")


def check_recipe_work_dirs(recipe: paths.RecipeDirs, out_key: str = "output_dir", cache_key: str = "cache_dir") -> None:
    """check_work_dir for a recipe's output_dir and cache_dir, against its corpus sources and
    model.init_from (`out_key` / `cache_key`: the names the command gives them, e.g. --cache)."""
    init = [recipe.model.init_from] if recipe.model.init_from else []
    check_work_dir(recipe.out, recipe.corpus_paths(), out_key, init)
    if recipe.cache != recipe.out:
        check_work_dir(recipe.cache, recipe.corpus_paths(), cache_key, init)


def check_output_dir(out: Path, force: bool, inputs: Iterable = (), key: str = "--out",
                     what: str = "the output directory") -> Path:
    """Before any work: `out` is a new or empty directory, or one an earlier bertcli run marked
    as its own and --force is given; it is no input; it can be written (paths.check_writable_dir)."""
    out = Path(out)
    paths.check_writable_dir(out, what, key)      # creatable and writable
    check_not_input(out, inputs, key)
    if not out.is_dir():
        return out
    entries = sorted((p.name for p in out.iterdir()), key=lambda n: (n.startswith("."), n))  # a visible one first
    if not entries:
        return out
    listed = listed_files(out)
    if listed is None:
        raise UserError(f"{key} {out} is a non-empty directory that bertcli did not write (it holds "
                        f"{entries[0]}{f' and {len(entries) - 1} more' if len(entries) > 1 else ''}); "
                        "bertcli never writes into it", where=str(out / entries[0]),
                        fix=f"choose a new or empty {key}")
    if not force:
        info = marker_info(out)
        earlier = f" (bertcli {info.get('command', '?')}, {info.get('time', '?')})" if info else ""
        raise UserError(f"{key} {out} already holds an earlier result{earlier}", where=str(out),
                        fix=f"add --force to replace it (only the {len(listed)} files bertcli wrote there are "
                            f"removed), or choose another {key}")
    return out


def check_output_file(out: Path, force: bool, inputs: Iterable = (), model_dirs: Iterable = (),
                      key: str = "--out", what: str = "the output file") -> Path:
    """Before any work: a file output is no input, not inside the model, not a directory, and
    an existing file is replaced only with --force."""
    out = Path(out)
    check_not_input(out, inputs, key, file_output=True, model_dirs=model_dirs)
    paths.check_writable_file(out, what, key)
    if (out.exists() or out.is_symlink()) and not force:
        raise UserError(f"{key} {out} already exists", where=str(out),
                        fix=f"add --force to replace it, or choose another {key}")
    return out


@contextlib.contextmanager
def writing(out: Path, force: bool, inputs: Iterable = (), key: str = "--out") -> Iterator[Path]:
    """Around a command that writes the directory `out`: the checks, then the run-directory lock
    (a second writer fails at once naming the holder), then the marker written last, listing
    every file this run left in `out` that was not someone else's before it started."""
    out = Path(out)
    check_output_dir(out, force, inputs, key)
    made = [p for p in _absolute(out).parents if not p.exists()]     # for the lock file; nearest first
    try:
        with _locked_writing(out, force, inputs, key, run_lock):
            yield out
    finally:
        if made and not out.exists():   # nothing was written: the folders made for the lock go again
            lock_path(out).unlink(missing_ok=True)
            for d in made:
                with contextlib.suppress(OSError):
                    d.rmdir()


@contextlib.contextmanager
def _locked_writing(out: Path, force: bool, inputs, key: str, run_lock) -> Iterator[Path]:
    with run_lock(out):
        check_output_dir(out, force, inputs, key)       # again, now that nobody else writes it
        before = set(_files_under(out)) if out.is_dir() else set()
        foreign = before - (listed_files(out) or set()) if out.is_dir() else set()
        try:
            yield out
        finally:                                        # also after a failure: what is there is ours
            if out.is_dir() and set(_files_under(out)) - foreign:
                write_marker(out, set(_files_under(out)) - foreign)


# ------------------------------------------------------------------------------- temporaries
def temporary_name(final: Path) -> Path:
    final = Path(final)
    return final.with_name(f".{final.name}{TEMP_TAG}{os.getpid()}-{time.monotonic_ns()}")


def _mark_temporary(directory: Path) -> None:
    (directory / TEMP_MARKER).write_text(jsonout.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                     "time": time.time()}) + "\n", encoding="utf-8")


def temporary_dir(final: Path) -> Path:
    """A new, marked temporary directory next to `final` (its parent is created); bertcli's
    temporaries of dead processes next to it are removed first."""
    final = _absolute(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(final.parent)
    tmp = temporary_name(final)
    tmp.mkdir()
    _mark_temporary(tmp)
    return tmp


def _absolute(p: Path) -> Path:
    # `.` or `..` as an output names the directory itself (Path(".").name is empty)
    return Path(os.path.abspath(Path(p).expanduser()))


def _alive(pid: int) -> bool:
    return alive(pid)


def remove_stale_temporaries(parent: Path) -> list[Path]:
    """Remove the temporary directories bertcli left in `parent` when killed: only those with
    bertcli's own name tag and temporary marker, recorded on this host by a process that no
    longer runs. Anything else, whatever its name or age, is left alone. Returns what went."""
    parent = Path(parent)
    gone: list[Path] = []
    if not parent.is_dir():
        return gone
    host = socket.gethostname()
    for p in parent.iterdir():
        if not (p.name.startswith(".") and (TEMP_TAG in p.name or TRASH_TAG in p.name)):
            continue
        with contextlib.suppress(OSError, ValueError, TypeError, OverflowError):
            if p.is_symlink() or not p.is_dir():
                continue
            mark = json.loads((p / TEMP_MARKER).read_text(encoding="utf-8"))
            pid = mark.get("pid") if isinstance(mark, dict) else None
            if mark.get("host") != host or not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**31:
                continue
            if pid != os.getpid() and not _alive(pid):
                shutil.rmtree(p)
                gone.append(p)
    return gone


# ------------------------------------------------------------------------------------ install
def _remove_listed(directory: Path, files: Iterable[str]) -> None:
    """Remove the listed files (never anything else), then the directories they leave empty."""
    parents: set[Path] = set()
    for rel in sorted(files, key=lambda r: (r not in COMPLETE_LAST, r)):   # completeness first
        p = directory / rel
        if directory.resolve() not in p.resolve().parents and not p.is_symlink():
            continue                                   # a listed path must lie inside
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
            p.unlink()
        parents.update(q for q in (directory / rel).parents if directory in q.parents)
    for d in sorted(parents, key=lambda q: len(q.parts), reverse=True):
        with contextlib.suppress(OSError):
            d.rmdir()                                  # only when empty


def drop_files(directory: Path, files: Iterable[str]) -> list[str]:
    """Remove those of `files` (relative paths) that `directory`'s marker lists as bertcli's, and
    rewrite the marker without them; a file the marker does not list stays. Returns what went
    (a sweep keeping the weights of its best runs only)."""
    directory = Path(directory)
    listed = listed_files(directory)
    if listed is None:
        return []
    gone = sorted(set(files) & listed)
    if gone:
        _remove_listed(directory, gone)     # first: a marker listing a file gone is harmless, the reverse is not
        write_marker(directory, listed - set(gone), marker_info(directory).get("command"))
    return gone


def claim(directory: Path, parts: Iterable[Path]) -> None:
    """Add every file under `parts` (paths inside `directory`, written by this command) to
    `directory`'s marker, now rather than when the command ends: a long command killed outright
    (a sweep between its runs) leaves a directory whose marker lists what it finished."""
    directory = Path(directory)
    files = set(listed_files(directory) or set())
    for part in parts:
        part = Path(part)
        if part.is_dir():
            files |= {(part.relative_to(directory) / f).as_posix() for f in _files_under(part, skip=())}
        elif part.is_file():
            files.add(part.relative_to(directory).as_posix())
    write_marker(directory, files)


def install(tmp: Path, final: Path, command: str | None = None) -> Path:
    """Put the finished temporary `tmp` in place as `final`, writing its marker.

    - `final` absent: one rename, so it appears complete or not at all.
    - `final` holds only files its marker lists: swapped in by two renames, the old one removed.
    - `final` also holds files bertcli did not write: the listed ones are removed and the new ones
      moved in (the stage marker recipe.yaml last, the output marker after it); the others stay.
    A non-empty `final` without a marker is refused: bertcli never writes into it."""
    tmp, final = Path(tmp), _absolute(final)
    new_files = _files_under(tmp)
    (tmp / TEMP_MARKER).unlink(missing_ok=True)
    write_marker(tmp, new_files, command)
    if not final.exists() and not final.is_symlink():
        os.replace(tmp, final)
        return final
    if not final.is_dir():
        raise UserError(f"cannot write {final}: it is a file", where=str(final), fix="choose another output path")
    present = set(_files_under(final))
    listed = listed_files(final)
    if listed is None and present | {p.name for p in final.iterdir()}:
        kept = final.with_name(final.name + ".bertcli-new")
        if not kept.exists():
            os.replace(tmp, kept)
        raise UserError(f"{final} is a non-empty directory that bertcli did not write, so it was not replaced",
                        where=str(final), fix=f"the new result is kept in {kept if kept.exists() else tmp}; "
                                              "move it where you want it")
    listed = listed or set()
    cwd = Path.cwd().resolve()
    if present <= listed and not _inside(cwd, final.resolve()) and not _dirs_only_foreign(final, listed):
        trash = final.with_name(f".{final.name}{TRASH_TAG}{os.getpid()}-{time.monotonic_ns()}")
        os.replace(final, trash)
        os.replace(tmp, final)
        with contextlib.suppress(OSError):
            _mark_temporary(trash)
        shutil.rmtree(trash, ignore_errors=True)
        return final
    clash = sorted(f for f in new_files if f in present - listed)
    if clash:
        raise UserError(f"{final / clash[0]} is not bertcli's, and this run would write a file of that name",
                        where=str(final / clash[0]),
                        fix=f"move that file away and run again (the new result is in {tmp})")
    write_marker(final, listed | set(new_files), command)    # a superset while both are there
    _remove_listed(final, listed - set(new_files))
    entries = sorted((p for p in tmp.iterdir() if p.name != MARKER), key=lambda p: p.name in COMPLETE_LAST)
    for src in entries:
        _merge(src, final / src.name)
    write_marker(final, new_files, command)
    shutil.rmtree(tmp, ignore_errors=True)
    return final


def _dirs_only_foreign(final: Path, listed: set[str]) -> bool:
    """An empty directory a user made inside `final` is theirs too: keep it (no swap)."""
    for root, dirs, _ in os.walk(final):
        for d in dirs:
            rel = (Path(root) / d).relative_to(final).as_posix()
            if not any(f.startswith(rel + "/") for f in listed) and not os.listdir(Path(root) / d):
                return True
    return False


def _merge(src: Path, dst: Path) -> None:
    if src.is_dir() and not src.is_symlink():
        if dst.is_dir() and not dst.is_symlink():
            for child in src.iterdir():
                _merge(child, dst / child.name)
            return
    os.replace(src, dst)


# ------------------------------------------------------------------------------------ signals
@contextlib.contextmanager
def removing_on_signal(*temporaries: Path) -> Iterator[None]:
    """Inside: SIGTERM raises SystemExit(143) (Ctrl-C already raises KeyboardInterrupt), so the
    writer's `finally` removes its temporary; the previous handler is restored after.

    `temporaries`: this process's temporary file names (`fs.temporary_file`, PID-tagged, so no
    other process writes them), given before they exist. They are removed on any exception,
    wherever it struck: also between a file's creation and the `try` of the writer that owns it,
    where a signal is most likely on a busy machine (the writer is descheduled as `open` returns)."""
    def _raise(signum: int, frame: FrameType | None) -> NoReturn:
        raise SystemExit(128 + signum)

    installed = False
    with contextlib.suppress(ValueError):              # not the main thread: nothing to install
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_DFL:                 # someone's own handler (pretraining's) stays
            signal.signal(signal.SIGTERM, _raise)
            installed = True
    try:
        yield
    except BaseException:
        for tmp in temporaries:
            with contextlib.suppress(OSError):         # the run's own error is the one to report
                Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous)
