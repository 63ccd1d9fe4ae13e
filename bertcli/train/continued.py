"""The run-side of continued pretraining (`model.init_from`): what the checkpoint was, its
step-0 figures, and the refusal to resume over a replaced one. `start_weights` gives the
pipeline one object for where the weights come from (`Continuation` or `FromScratch`), so
`pretrain` asks no "is this continued pretraining?" of its own.

    <run>/init_from.json   {"path", "sha256" (config.json + weights), "step0": validation record}

The step-0 record is the trainer's own validation (the same fixed rows, masks and loss as every
later `val_*` record) of the loaded weights, so "start -> end" compares like with like; it is also
the first line of metrics.jsonl (step 0).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bertcli.config.checkpoint import weights_sha256
from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.core.fs import write_text_atomic
from bertcli.model.heads import build_model
from bertcli.model.init_from import init_model
from bertcli.tokenization.extend import load_extension

if TYPE_CHECKING:
    import torch

    from bertcli.config.recipe import Recipe
    from bertcli.tokenization.load import TokenizerInfo
    from bertcli.train.loop import Trainer

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe

FILE = "init_from.json"


@dataclass
class InitReport:
    notes: list = field(default_factory=list)       # how the weights were made (heads, positions, vocabulary)
    record: dict = field(default_factory=dict)      # path, sha256, step0


def _read(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_source(recipe: Recipe, run_dir: Path, resuming: bool) -> dict:
    """The checkpoint's fingerprint; when resuming, a UserError if it is not the one the run
    started from (the same path holding other weights: `--resume` continues one run)."""
    assert recipe.model.init_from is not None, "check_source is continued pretraining: a recipe with model.init_from"
    path = Path(recipe.model.init_from)
    sha = weights_sha256(path)
    saved = _read(run_dir) if resuming else None
    if saved is not None and saved.get("sha256") not in (None, sha):
        raise UserError(f"model.init_from {path} holds other weights than the run started from "
                        f"(sha256 {saved['sha256'][:16]}..., now {sha[:16]}...)", where=str(Path(run_dir) / FILE),
                        fix="restore the original checkpoint to resume, or start a new run (--force or another "
                            "output_dir)")
    return {"path": str(path), "sha256": sha, **({"step0": saved["step0"]} if saved and "step0" in saved else {})}


def start_figures(trainer, record: dict, run_dir: Path, resuming: bool, main: bool) -> dict | None:
    """A new run: validate the loaded weights (step 0), log it, keep it in init_from.json, and
    return the metrics.jsonl record. A resumed run: None (its metrics.jsonl has it)."""
    if resuming:
        return None
    val = trainer.validate()
    record["step0"] = val
    if val:
        console.log(f"step 0, the weights of {record['path']}: val MLM loss {val['val_mlm_loss']:.4f}, "
                    f"MLM acc {val['val_mlm_acc']:.4f}")
    if main:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        write_text_atomic(Path(run_dir) / FILE, jsonout.dumps(record, indent=2) + "\n")
    return {"step": 0, **val} if val else None


def summary_rows(init: InitReport | None, run_dir: Path, last_val: dict, notes: list,
                 tokenizer_rows: Iterable[tuple[str, object]] = ()) -> list[tuple[str, object]]:
    """The start -> end rows of `pretrain`'s summary (with the adopt stage's vocabulary rows)."""
    record = (init.record if init is not None else None) or _read(run_dir) or {}
    rows: list[tuple[str, object]] = [("init_from", record.get("path", "-"))]
    rows += [("init", note) for note in notes[1:]]
    rows += [(k, v) for k, v in tokenizer_rows if k in ("tokens added", "tokens per word")]
    start = record.get("step0") or {}
    if start and last_val:
        rows.append(("val MLM loss (step 0 -> end)", f"{start['val_mlm_loss']:.4f} -> {last_val['val_mlm_loss']:.4f}"))
        rows.append(("val MLM acc (step 0 -> end)", f"{start['val_mlm_acc']:.4f} -> {last_val['val_mlm_acc']:.4f}"))
    return rows


# --------------------------------------------------------------------- where the weights start
class WeightsStart(Protocol):
    """Where a run's weights come from, as the pipeline uses it: build the model (after the
    seed is set), give the first metrics.jsonl record once the trainer exists, and add rows
    to the summary."""

    report: InitReport | None       # PretrainResult.init: set once the run trains

    def build(self, tok: TokenizerInfo, tokenizer_dir: Path) -> torch.nn.Module: ...

    def first_record(self, trainer: Trainer, main: bool) -> dict | None: ...

    def summary_rows(self, last_val: dict, tokenizer_rows: Iterable[tuple[str, object]]) -> list[tuple[str, object]]: ...


class FromScratch:
    """A new model, initialized from the seed."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.report: InitReport | None = None

    def build(self, tok: TokenizerInfo, tokenizer_dir: Path) -> torch.nn.Module:
        return build_model(self.recipe.model, tok.vocab_size, tok.pad_id)

    def first_record(self, trainer: Trainer, main: bool) -> dict | None:
        return None

    def summary_rows(self, last_val: dict, tokenizer_rows: Iterable[tuple[str, object]]) -> list[tuple[str, object]]:
        return []


class Continuation:
    """Continued pretraining from `model.init_from`. Made before the model: a resume over a
    replaced checkpoint is refused here (check_source)."""

    def __init__(self, recipe: Recipe, run_dir: Path, resuming: bool) -> None:
        self.recipe, self.run_dir, self.resuming = recipe, Path(run_dir), resuming
        self.record = check_source(recipe, run_dir, resuming)
        self.notes: list = []
        self.report: InitReport | None = None

    def build(self, tok: TokenizerInfo, tokenizer_dir: Path) -> torch.nn.Module:
        model, self.notes = init_model(self.recipe, tok, load_extension(tokenizer_dir))
        return model

    def first_record(self, trainer: Trainer, main: bool) -> dict | None:
        first = start_figures(trainer, self.record, self.run_dir, resuming=self.resuming, main=main)
        self.report = InitReport(self.notes, self.record)
        return first

    def summary_rows(self, last_val: dict, tokenizer_rows: Iterable[tuple[str, object]]) -> list[tuple[str, object]]:
        return summary_rows(self.report, self.run_dir, last_val, self.notes, tokenizer_rows)


def start_weights(recipe: Recipe, run_dir: Path, resuming: bool) -> WeightsStart:
    """Continuation when the recipe has model.init_from, else FromScratch."""
    if recipe.model.init_from is not None:
        return Continuation(recipe, run_dir, resuming)
    return FromScratch(recipe)
