"""Reading what `bertcli compare` compares: a fine-tuning run directory's results.json, either a
sweep's summary (its "sweep" object: seeds x learning rates, written by `--seeds` / an `--lr`
list) or one plain run's (one seed: n = 1, shown but never tested).

What is kept of a task is the per-seed figures at its chosen learning rate, the runs that
diverged or ended at chance left out and counted. Every field read is checked: a missing one, a
null or a wrong type is one message naming the file and the field, never a guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertcli.core.errors import UserError
from bertcli.io.records import json_type
from bertcli.io.tables import parse_json
from bertcli.io.text import read_all

RESULTS = "results.json"
STATUSES = ("ok", "diverged", "chance")
FIX_DAMAGED = "the file is damaged or was not written by bertcli: run the fine-tuning again into that folder"


@dataclass
class TaskRuns:
    """One task of one run directory, at its chosen learning rate. `score` and each `dev` list
    hold one figure per seed that finished ok, in the same order."""

    score_name: str | None                    # the metric score() uses; a plain run does not record it
    lr: float | None                          # None: no rate chosen (each rate's median run failed)
    runs: int                                 # runs at that rate (all rates' when none is chosen), failed included
    failed: dict[str, int]                    # "diverged" / "chance" -> how many of `runs`
    score: list[float]
    dev: dict[tuple[str, str], list[float]]   # (dev split, metric) -> per-seed figures
    from_mnli: bool = False


@dataclass
class Summary:
    """One run directory as compare reads it."""

    directory: str                            # as given on the command line
    checkpoint: str
    kind: str                                 # "sweep" or "single run"
    seeds: list[int]
    tasks: dict[str, TaskRuns]
    glue_average: float | None = None         # the GLUE-dev average of a `finetune glue` sweep
    glue_rule: str | None = None
    command: str | None = None


def read_runs(directories: list[Path]) -> list[Summary]:
    """The summaries of two or more distinct run directories, in the order given."""
    if len(directories) < 2:
        raise UserError(f"compare needs at least two run directories, got {len(directories)}",
                        fix="e.g. bertcli compare runs/classify/base runs/classify/continued")
    seen: dict[Path, Path] = {}
    for d in directories:
        key = Path(d).resolve()
        if key in seen:
            raise UserError(f"{d} is given twice (also as {seen[key]})", where=str(d),
                            fix="give each run directory once")
        seen[key] = Path(d)
    return [read(d) for d in directories]


def read(directory: Path | str) -> Summary:
    """The summary in `directory` (a sweep's or a fine-tuning run's --out)."""
    d = Path(directory)
    if not d.exists():
        raise UserError(f"run directory {d} does not exist", where=str(d),
                        fix="give the --out folders of fine-tuning runs (finetune ... --seeds N writes a summary there)")
    if not d.is_dir():
        raise UserError(f"{d} is a file, not a run directory", where=str(d),
                        fix=f"give the folder that holds {RESULTS} (a fine-tuning run's --out)")
    path = d / RESULTS
    if not path.is_file():
        glue = " (a GLUE run without seeds writes glue_results.json: run it with --seeds N to compare it)" \
            if (d / "glue_results.json").is_file() else ""
        raise UserError(f"no {RESULTS} in {d}{glue}", where=str(d),
                        fix="give the --out folder of a finished fine-tuning run or sweep")
    try:
        text = read_all(path)
    except OSError as e:
        raise UserError(f"cannot read {RESULTS}: {e.strerror or e}", where=str(path), fix=FIX_DAMAGED) from None
    data = parse_json(text, str(path), FIX_DAMAGED)
    if not isinstance(data, dict) or not ("sweep" in data or ("task" in data and "dev" in data)):
        raise UserError(f"{RESULTS} is not a bertcli fine-tuning summary (neither a sweep's nor a run's)",
                        where=str(path), fix="give the --out folder of a `bertcli finetune` (or distill) run")
    if "sweep" in data:
        return _sweep(str(directory), _object(data["sweep"], f"{path}: sweep"), f"{path}: sweep")
    return _single(str(directory), data, str(path))


def _sweep(directory: str, s: dict, where: str) -> Summary:
    version = _get(s, "version", int, where)
    if version != 1:
        raise UserError(f"sweep summary version {version}, but this bertcli reads version 1", where=f"{where}.version",
                        fix="compare it with the bertcli that wrote it, or run the sweep again")
    statistic = _get(s, "statistic", str, where)
    if statistic != "median":
        raise UserError(f"the sweep's statistic is {statistic!r}; compare reads median summaries", where=f"{where}.statistic",
                        fix=FIX_DAMAGED)
    tasks = _object(_get(s, "tasks", dict, where), f"{where}.tasks")
    if not tasks:
        raise UserError("the sweep summary lists no task", where=f"{where}.tasks", fix=FIX_DAMAGED)
    seeds = _get(s, "seeds", list, where)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds):
        raise UserError("the seeds are not all integers", where=f"{where}.seeds", fix=FIX_DAMAGED)
    out = Summary(directory, _get(s, "checkpoint", str, where), "sweep", seeds,
                  {name: _sweep_task(_object(t, f"{where}.tasks.{name}"), f"{where}.tasks.{name}")
                   for name, t in tasks.items()},
                  command=_get(s, "command", str, where))
    if "glue" in s:
        glue = _object(s["glue"], f"{where}.glue")
        out.glue_average = _number(glue, "dev_average", f"{where}.glue", nullable=True)
        out.glue_rule = _get(glue, "rule", str, f"{where}.glue")
    return out


def _sweep_task(t: dict, where: str) -> TaskRuns:
    chosen = _number(t, "chosen_lr", where, nullable=True)
    runs = []
    for i, r in enumerate(_get(t, "runs", list, where)):
        at = f"{where}.runs[{i}]"
        r = _object(r, at)
        status = _get(r, "status", str, at)
        if status not in STATUSES:
            raise UserError(f"run status {status!r} is not one of {', '.join(STATUSES)}", where=f"{at}.status",
                            fix=FIX_DAMAGED)
        # no rate chosen: every run failed, and all of them are counted
        if chosen is None or _number(r, "lr", at) == chosen:
            runs.append((status, r, at))
    ok = [(r, at) for status, r, at in runs if status == "ok"]
    if chosen is not None and not ok:
        raise UserError(f"the chosen learning rate {chosen:g} has no run that finished ok", where=f"{where}.chosen_lr",
                        fix=FIX_DAMAGED)
    # No rate chosen while some runs finished ok: every rate's median run diverged or ended at
    # chance (the sweep never chooses such a rate). The task then has no figure: the ok runs'
    # scores alone would hide the failed majority, so they are counted, not summarized.
    figures = ok if chosen is not None else []
    return TaskRuns(_get(t, "score", str, where), chosen, len(runs),
                    {s: sum(status == s for status, _, _ in runs) for s in STATUSES[1:]},
                    [_number(r, "score", at) for r, at in figures], _dev_figures(figures),
                    from_mnli=_get(t, "from_mnli", bool, where))


def _single(directory: str, r: dict, where: str) -> Summary:
    """A plain run's results.json: one seed. A run that ended at chance counts as failed; one
    that was interrupted is not finished."""
    if "interrupted" in r:
        raise UserError("this run was interrupted: its figures are those of an unfinished run", where=where,
                        fix="run it again to the end before comparing it")
    task = _get(r, "task", str, where)
    lr = _number(_object(_get(r, "learning_rate", dict, where), f"{where}: learning_rate"), "value",
                 f"{where}: learning_rate")
    chance = r.get("chance") is not None
    ok = [] if chance else [(r, where)]
    runs = TaskRuns(None, lr, 1, {"diverged": 0, "chance": int(chance)}, [_number(r, "score", where)] if ok else [],
                    _dev_figures(ok))
    return Summary(directory, _get(r, "checkpoint", str, where), "single run", [_get(r, "seed", int, where)],
                   {task: runs})


def _dev_figures(ok: list[tuple[dict, str]]) -> dict[tuple[str, str], list[float]]:
    """(split, metric) -> one figure per run; every run must hold the same splits and metrics."""
    figures: dict[tuple[str, str], list[float]] = {}
    for i, (r, at) in enumerate(ok):
        keys = []
        for split, metrics in _get(r, "dev", dict, at).items():
            for metric in _object(metrics, f"{at}.dev.{split}"):
                keys.append((split, metric))
                figures.setdefault((split, metric), []).append(_number(metrics, metric, f"{at}.dev.{split}"))
        if i and sorted(keys) != sorted(figures):
            raise UserError("this run's dev metrics differ from the other seeds' of its learning rate",
                            where=f"{at}.dev", fix=FIX_DAMAGED)
    return figures


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise UserError(f"expected a JSON object, found {json_type(value)}", where=where, fix=FIX_DAMAGED)
    return value


def _get(obj: dict, key: str, kind: type, where: str) -> Any:
    """obj[key], present, not null and of JSON type `kind` (a boolean is not an integer)."""
    if key not in obj:
        raise UserError(f"no field {key!r}", where=where, fix=FIX_DAMAGED)
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        want = {int: "an integer", str: "a string", list: "an array", dict: "an object", bool: "a boolean"}[kind]
        raise UserError(f"field {key!r} is {json_type(value)}, not {want}", where=where, fix=FIX_DAMAGED)
    return value


def _number(obj: dict, key: str, where: str, nullable: bool = False) -> Any:
    """A finite JSON number (None only where `nullable`)."""
    if key not in obj:
        raise UserError(f"no field {key!r}", where=where, fix=FIX_DAMAGED)
    value = obj[key]
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"field {key!r} is {value!r}, not a finite number", where=where, fix=FIX_DAMAGED)
    return float(value)
