"""Cached stage outputs: `<cache>/<stage>-<hash>/`, written under a temporary name and renamed
when complete, so an interrupted stage never looks finished.

The key (`stage_key`, the one helper every stage uses) covers the recipe sections the stage
depends on (tokenizer <- corpus + tokenizer; data <- corpus + tokenizer + data), the code
versions of the stage and the stages before it, and a fingerprint of the corpus files (path,
size, mtime), so editing a corpus file or upgrading a stage rebuilds what depends on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bertcli.config.checkpoint import tokenizer_fingerprint
from bertcli.config.recipe import Recipe
from bertcli.core import console
from bertcli.core.locks import stage_lock
from bertcli.core.testhooks import pause_point

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
    "tokenizer": 2,  # 2: reproducible training (bertcli/tokenization/reproducible.py)
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
        extra["adopted"] = tokenizer_fingerprint(Path(recipe.model.init_from))
    return recipe.section_hash(*STAGE_SECTIONS[stage], extra=extra)


def stage_dir(recipe: Recipe, stage: str, inputs) -> Path:
    """The directory a stage's output lives in (it may not exist yet). `inputs`: the corpus
    files' fingerprint every stage descends from (`bertcli.corpus.build.corpus_fingerprint`)."""
    return recipe.cache / f"{stage}-{stage_key(recipe, stage, inputs)}"


def is_complete(path: Path) -> bool:
    return path.is_dir() and (path / COMPLETE_MARKER).is_file()


@contextlib.contextmanager
def stage_guard(path: Path, name: str) -> Iterator[None]:
    """Around checking and building the stage `name` at `path`: hold its lock (another process
    building the same stage is waited for; its result is then found complete), and on Ctrl-C
    say what was interrupted. Use: `with stage_guard(path, "tokenizer"): reuse or build`."""
    try:
        with stage_lock(path, f"the {name} stage"):
            pause_point(f"build-{name}")  # tests hold the build here, holding the lock
            yield
    except KeyboardInterrupt:
        console.log(f"interrupted while building the {name} stage ({path}): nothing of it was kept, "
                    "the next run builds that stage again")
        raise


@dataclass
class StageResult:
    """What a stage produced: where, whether it was reused from the cache, and summary rows."""

    name: str
    path: Path
    reused: bool
    summary: list[tuple[str, object]] = field(default_factory=list)
