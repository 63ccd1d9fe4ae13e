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
import time
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
    extra = {"versions": versions, "inputs": inputs}
    if stage != "corpus" and recipe.model.init_from is not None:
        # an adopted tokenizer (and the data built with it): keyed by the checkpoint's tokenizer files
        from bertcli.model.init_from import tokenizer_fingerprint

        extra["adopted"] = tokenizer_fingerprint(Path(recipe.model.init_from))
    return recipe.section_hash(*STAGE_SECTIONS[stage], extra=extra)


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


@dataclass
class StageResult:
    """What a stage produced: where, whether it was reused from the cache, and summary rows."""

    name: str
    path: Path
    reused: bool
    summary: list[tuple[str, object]] = field(default_factory=list)
