"""What a command reports: a stage's or a run's summary, and, with --json, its figures as one
strict JSON document on stdout (the tables then go to stderr)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertcli.core import console, jsonout

if TYPE_CHECKING:  # the stage and run types only: this module stays free of torch
    from bertcli.config.stages import StageResult
    from bertcli.train.pipeline import PretrainResult


def show_stage(result: StageResult) -> dict:
    """Print a stage's summary; its figures, as --json reports them."""
    state = "reused" if result.reused else "built"
    console.summary(f"{result.name} ({state}): {result.path}", result.summary)
    return stage_figures(result)


def stage_figures(result: StageResult) -> dict:
    return {"stage": result.name, "path": result.path, "reused": result.reused, **dict(result.summary)}


def pretrain_figures(result: PretrainResult) -> dict:
    """What `pretrain --json` prints: the run's figures (its summary's, unformatted)."""
    keys = ("run_dir", "step", "max_steps", "tokens", "seconds", "train_seconds", "stage_seconds", "checkpoint",
            "resumed_from", "interrupted", "last", "last_val")
    return {**{k: getattr(result, k) for k in keys},
            "stages": [stage_figures(r) for r in result.stages]}


def _jsonable(value: object) -> object:
    """jsonout's fallback for what a command reports: paths as text, dataclasses as dicts."""
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return str(value)


@contextlib.contextmanager
def reporting(as_json: bool) -> Iterator[Callable[[Any], Any]]:
    """Run a command that reports figures. With --json its tables go to stderr and the last
    value given to `report` is printed, once the command has finished, as one JSON document
    on stdout (bertcli.core.jsonout, strict JSON)."""
    figures: list = []

    def report(value: Any) -> Any:
        figures.append(value)
        return value

    if not as_json:
        yield report
        return
    with console.tables_to_stderr():
        yield report
    if figures and not console.quiet():
        console.out.print(jsonout.dumps(figures[-1], indent=2, default=_jsonable), markup=False)
