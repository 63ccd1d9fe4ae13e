"""Which run a `bertcli pretrain` continues: the output directory checked against the recipe,
the checkpoint picked for `--resume`, and `ResumeState`, the one typed answer the pipeline
asks "are we resuming, from what, and may we?".

The state that crosses runs is the checkpoint's `TrainState` (bertcli.train.checkpoint), which
serializes itself torchtitan-style (`state_dict` / `load_state_dict`); `ResumeState` only reads
it, so there is one schema on disk and no second one to keep in step.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertcli.config.phases import Phase, budget_seconds, phase_of
from bertcli.config.recipe import Recipe, load_recipe
from bertcli.config.sections import TrainConfig
from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.train import checkpoint as ckpt_io
from bertcli.train import provenance
from bertcli.train.trackers import TRACKER_FILES

RUN_FILES = ("recipe.yaml", "metrics.jsonl", "checkpoints", "final", *TRACKER_FILES)
# Sections whose change makes another run (train keys listed below may change on --resume).
RUN_SECTIONS = ("seed", "corpus", "tokenizer", "data", "model", "train")
RESUMABLE_TRAIN_KEYS = {"max_steps", "max_time", "eval_every", "eval_batches", "max_bad_steps"}


# ----------------------------------------------------------------------- recipe comparison
def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """key path -> value of the fields that define a run (fields marked hash=False left out)."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            if f.metadata.get("hash", True) and not f.metadata.get("internal"):
                out.update(flatten(getattr(obj, f.name), f"{prefix}{f.name}."))
        return out
    if isinstance(obj, list):
        out = {}
        for i, x in enumerate(obj):
            out.update(flatten(x, f"{prefix[:-1]}[{i}]."))
        return out or {prefix[:-1]: []}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: obj}


def differences(old: Recipe, new: Recipe, sections: Sequence[str] = RUN_SECTIONS) -> list[tuple[str, Any, Any]]:
    """(key, old value, new value) for every run-defining key that differs."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    for s in sections:
        a.update(flatten(getattr(old, s), f"{s}.") if s != "seed" else {"seed": old.seed})
        b.update(flatten(getattr(new, s), f"{s}.") if s != "seed" else {"seed": new.seed})
    return [(k, a.get(k, "<absent>"), b.get(k, "<absent>")) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _describe(diffs: list[tuple[str, Any, Any]], limit: int = 6) -> str:
    shown = ", ".join(f"{k}: {o!r} -> {n!r}" for k, o, n in diffs[:limit])
    return shown + (f" (and {len(diffs) - limit} more)" if len(diffs) > limit else "")


def _saved_recipe(path: Path, what: str) -> Recipe:
    try:
        return load_recipe(str(path))
    except UserError as e:
        raise UserError(f"{what} has a recipe.yaml this bertcli cannot read ({e.what})", where=str(path),
                        fix="use another output_dir, or --force to start over there")


def check_compatible(saved: Recipe, recipe: Recipe, where: Path) -> None:
    """A checkpoint continues only under the same model, data and training settings (a longer
    max_steps, other evaluation settings and every machine setting may change)."""
    model = differences(saved, recipe, ("model",))
    if model:
        raise UserError(f"the recipe's model changed since the checkpoint: {_describe(model)}", where=str(where),
                        fix="restore those model keys to resume, or start a new run (--force or another output_dir)")
    data = differences(saved, recipe, ("seed", "corpus", "tokenizer", "data"))
    if data:
        raise UserError(f"the checkpoint was trained on other data: {_describe(data)}", where=str(where),
                        fix="restore those keys to resume, or start a new run (--force or another output_dir)")
    train = [d for d in differences(saved, recipe, ("train",)) if d[0].split(".", 1)[1] not in RESUMABLE_TRAIN_KEYS]
    if train:
        raise UserError(f"the training settings changed since the checkpoint: {_describe(train)}", where=str(where),
                        fix="only train.max_steps, max_time, eval_every, eval_batches, max_bad_steps and machine "
                            "settings may change on --resume; restore the others or start a new run")


# -------------------------------------------------------------------------- run directory
def _has_run(run_dir: Path) -> bool:
    return any((run_dir / name).exists() for name in RUN_FILES)


def _refuse_foreign_files(run_dir: Path) -> None:
    """UserError when the run directory holds a run file's name (metrics.jsonl, trackers.json,
    wandb/, ...) but no recipe.yaml: a run writes recipe.yaml before any of them (pipeline), so
    those are not a bertcli run's and are neither replaced nor removed, --force included."""
    if (run_dir / "recipe.yaml").is_file():
        return
    foreign = [name for name in RUN_FILES if (run_dir / name).exists()]
    if foreign:
        raise UserError(f"the output directory holds {', '.join(foreign)} but no recipe.yaml: not the files of a "
                        f"bertcli run, so they are neither replaced nor removed", where=str(run_dir),
                        fix="choose another output directory (--set output_dir=DIR), or move those files away")


def _refuse_another_run(run_dir: Path, recipe: Recipe) -> None:
    """UserError when the run directory holds the run of a recipe that differs from this one."""
    if not (run_dir / "recipe.yaml").is_file():
        return
    diffs = differences(_saved_recipe(run_dir / "recipe.yaml", "the output directory"), recipe)
    if diffs:
        raise UserError(f"the output directory holds the run of another recipe; differing keys: "
                        f"{_describe(diffs)}", where=str(run_dir),
                        fix="choose another output directory (--set output_dir=DIR), restore those keys, "
                            "or --force to replace that run")


def _readable(path: Path) -> bool:
    try:
        ckpt_io.read(path)
        return True
    except UserError:
        return False


def prepare_run(recipe: Recipe, resume: str | None, force: bool) -> ckpt_io.Checkpoint | None:
    """Check the output directory against the recipe and pick the checkpoint to resume from.
    Raises UserError (before anything is written) for another recipe's run, a damaged or
    foreign checkpoint, or a model changed since the checkpoint."""
    run_dir = recipe.out
    if resume in (None, "auto"):       # an explicit checkpoint directory is checked as one (ckpt_io.read)
        _refuse_foreign_files(run_dir)
    if resume and force:
        raise UserError("--resume and --force contradict each other",
                        fix="--resume continues the run, --force starts it over: give one")
    if force:
        return None
    if resume is None:
        if not _has_run(run_dir):
            return None
        _refuse_another_run(run_dir, recipe)
        last = ckpt_io.latest(run_dir)
        if last is None:
            return None  # a run of this recipe killed before its first checkpoint: start over
        at = f" (checkpoint at step {ckpt_io.read(last).step:,} of {recipe.train.max_steps:,})" \
            if _readable(last) else ""
        raise UserError(f"the output directory already holds this recipe's run{at}", where=str(run_dir),
                        fix="--resume auto continues it; --force starts it over")
    if resume == "auto":
        # the newest checkpoint that reads back complete; damaged newer ones are set aside (ResumeState)
        ck = ckpt_io.resumable(run_dir, require=ckpt_io.TrainState.required_keys())
        if ck is None:
            _refuse_another_run(run_dir, recipe)
            console.log(f"no checkpoint in {run_dir}: starting from scratch")
            return None
    else:
        ck = ckpt_io.read(Path(resume), require=ckpt_io.TrainState.required_keys())
    check_compatible(_saved_recipe(ck.recipe_yaml, "the checkpoint"), recipe, ck.path)
    return ck


def clear_run(run_dir: Path) -> None:
    """--force: remove the run's own files (RUN_FILES), never the cached stages beside them."""
    for name in RUN_FILES:
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


# ---------------------------------------------------------------------------- resume state
@dataclass(frozen=True)
class ResumeState:
    """Where this run starts: from scratch (`checkpoint` None) or from a checkpoint, whose
    `TrainState` says how far the run got. Every question the pipeline asks about resuming
    is a method here, so a fresh run is not a special case at each of them."""

    checkpoint: ckpt_io.Checkpoint | None = None

    @classmethod
    def pick(cls, recipe: Recipe, resume: str | None, force: bool) -> ResumeState:
        """The state `prepare_run` picks (UserError before anything is written)."""
        return cls(prepare_run(recipe, resume, force))

    @property
    def resuming(self) -> bool:
        return self.checkpoint is not None

    @property
    def path(self) -> Path | None:
        return self.checkpoint.path if self.checkpoint is not None else None

    @property
    def step(self) -> int:
        """Updates already done (0 for a new run)."""
        return self.checkpoint.step if self.checkpoint is not None else 0

    @property
    def threads(self) -> int | None:
        """The thread count the run trained at (a resume reuses it: the same reduction order)."""
        return self.checkpoint.state.threads if self.checkpoint is not None else None

    @property
    def elapsed_s(self) -> float:
        """Training seconds of the runs before this one (a time budget's clock)."""
        return float(self.checkpoint.state.elapsed_s) if self.checkpoint is not None else 0.0

    @property
    def tokens(self) -> int:
        return int(self.checkpoint.state.tokens) if self.checkpoint is not None else 0

    def in_phase(self, phases: list[Phase], start_phase: Phase) -> bool:
        """Whether the checkpoint's last update is in the phase the run starts in (False at a
        phase boundary, where the next phase's data starts, and for a new run)."""
        return self.checkpoint is not None and phase_of(phases, max(1, self.step)) is start_phase

    def check_inputs(self, hashes: dict[str, str], tokenizer_dir: Path, data_dir: Path, train_rows: int,
                     same_phase: bool) -> None:
        """UserError when the tokenizer or data differ from what the checkpoint trained on. At a
        phase boundary the data is the next phase's: only the tokenizer must be the same."""
        ck = self.checkpoint
        if ck is None:
            return
        provenance.check_same_inputs(ck.state, hashes, ck.path, tokenizer_dir, data_dir,
                                     compare=("tokenizer_sha256", "data_sha256") if same_phase else ("tokenizer_sha256",))
        if same_phase and ck.state.train_rows not in (None, train_rows):
            raise UserError(f"the checkpoint was trained on {ck.state.train_rows:,} rows, the data has "
                            f"{train_rows:,}", where=str(ck.path), fix="rebuild the same data or start a new run")

    def set_aside_damaged(self) -> None:
        """Rename the damaged checkpoints newer than the one resumed (the main process only)."""
        if self.checkpoint is not None:
            ckpt_io.set_aside_damaged(self.checkpoint)

    def announce(self) -> None:
        if self.checkpoint is not None:
            console.log(f"resuming from {self.checkpoint.path} (step {self.step:,}, "
                        f"{self.checkpoint.state.consumed_samples:,} samples)")

    def complete(self, train: TrainConfig) -> bool:
        """The checkpoint already reached train.max_steps, or spent train.max_time."""
        budget = budget_seconds(train)
        return self.checkpoint is not None and (self.step >= train.max_steps
                                                or (budget is not None and self.elapsed_s >= budget))
