"""Cached stage outputs: `<cache>/<stage>-<hash>/`, written under a temporary name and renamed
when complete, so an interrupted stage never looks finished.

The key (`stage_key`, the one helper every stage uses) covers the recipe sections the stage
depends on (tokenizer <- corpus + tokenizer; data <- corpus + tokenizer + data), the code
versions of the stage and the stages before it, and a fingerprint of the corpus files (path,
size, mtime), so editing a corpus file or upgrading a stage rebuilds what depends on it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from bertcli.recipe import Recipe

# The recipe sections (and top-level fields) each stage's output depends on. Tokenizer training
# draws nothing at random, so only the data stage depends on the seed.
STAGE_SECTIONS = {
    "corpus": ("corpus",),
    "tokenizer": ("corpus", "tokenizer"),
    "data": ("corpus", "tokenizer", "data", "seed"),
}
# Each stage's code version, in pipeline order. A change to how a stage builds its output bumps
# its number; a stage's key holds its own version and every earlier stage's, so the bump
# rebuilds that stage and all that descend from it (the one invalidation scheme of every stage).
STAGE_VERSIONS = {
    "corpus": 3,     # 2: a lone document always goes to train; 3: Chinese splitting and line joins
    "tokenizer": 2,  # 2: reproducible training (bertcli/reproducible.py)
    "data": 3,       # 2: special-token text in the corpus is encoded as text; 3: n-grams fit short runs
}
COMPLETE_MARKER = "recipe.yaml"  # written last, just before the rename


def stage_key(recipe: Recipe, stage: str, inputs=None) -> str:
    """The cache key of `stage`: the recipe sections it reads, the code versions of it and of
    the stages before it, and `inputs` (the fingerprint of the corpus files)."""
    order = list(STAGE_VERSIONS)
    versions = {s: STAGE_VERSIONS[s] for s in order[:order.index(stage) + 1]}
    return recipe.section_hash(*STAGE_SECTIONS[stage], extra={"versions": versions, "inputs": inputs})


def stage_dir(recipe: Recipe, stage: str, inputs=None) -> Path:
    """The directory a stage's output lives in (it may not exist yet). `inputs`: the corpus
    files' fingerprint every stage descends from (default: taken now; pass it when the sources
    are already resolved)."""
    if inputs is None:
        from bertcli.corpus import corpus_fingerprint  # the files, not a later stage's code

        inputs = corpus_fingerprint(recipe.corpus)
    return recipe.cache / f"{stage}-{stage_key(recipe, stage, inputs)}"


def is_complete(path: Path) -> bool:
    return path.is_dir() and (path / COMPLETE_MARKER).is_file()


@contextlib.contextmanager
def building(final: Path, recipe: Recipe) -> Iterator[Path]:
    """Yield a marked temporary directory next to `final`; on success save the resolved recipe
    into it and put it in place (`outputs.install`: an earlier copy is replaced only file by file
    as its marker lists them, and a directory bertcli did not write is refused, never replaced);
    on failure or Ctrl-C remove it (a process killed outright leaves a temporary that names its
    PID and host). bertcli's temporaries left next to it by dead
    processes are removed first (`outputs.remove_stale_temporaries`: nothing else is touched)."""
    from bertcli.outputs import install, temporary_dir

    tmp = temporary_dir(final)
    try:
        yield tmp
        recipe.save(tmp)
        install(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def stage_guard(path: Path, name: str) -> Iterator[None]:
    """Around checking and building the stage `name` at `path`: hold its lock (another process
    building the same stage is waited for; its result is then found complete), and on Ctrl-C
    say what was interrupted. Use: `with stage_guard(path, "tokenizer"): reuse or build`."""
    from bertcli import console
    from bertcli.locks import stage_lock
    from bertcli.testhooks import pause_point

    try:
        with stage_lock(path, f"the {name} stage"):
            pause_point(f"build-{name}")  # tests hold the build here, holding the lock
            yield
    except KeyboardInterrupt:
        console.log(f"interrupted while building the {name} stage ({path}): nothing of it was kept, "
                    "the next run builds that stage again")
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
    from bertcli.outputs import TEMP_TAG

    path = Path(path)
    return path.with_name(f".{path.name}{TEMP_TAG}{os.getpid()}")


def remove_stale_temporaries(parent: Path) -> None:
    """bertcli's temporaries left in `parent` by dead processes (see bertcli/outputs.py)."""
    from bertcli.outputs import remove_stale_temporaries as remove

    remove(parent)


@dataclass
class StageResult:
    """What a stage produced: where, whether it was reused from the cache, and summary rows."""

    name: str
    path: Path
    reused: bool
    summary: list[tuple[str, object]] = field(default_factory=list)
