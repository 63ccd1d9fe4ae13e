"""The scorecard: each task's figures per checkpoint, and each pair of checkpoints tested on each
task's score, as one JSON-able dict that the table, the markdown and `--json` all print.

The rules, so that a figure means what it says:
- A cell is the median over the seeds of the chosen learning rate (as the sweep reports), with
  its spread: sd (ddof 1), n, min-max. Runs that diverged or ended at chance are left out and
  counted (n ok of the rate's runs).
- A pair is tested on the task's score only: Welch's two-sided t-test over the per-seed scores
  (bertcli.core.stats.welch). The difference shown is that of the medians; a difference smaller
  than the seeds' spread (the larger sd of the two) is said to be within it, never a win.
- The p-values of all pairs x tasks are Holm-corrected together (or labelled uncorrected). A
  pair where an arm has fewer than 2 seeds, or neither arm varies, is not testable: p is None
  and the reason is given.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import Any

from bertcli.compare.summaries import Summary, TaskRuns
from bertcli.core.errors import UserError
from bertcli.core.paths import checkpoint_name
from bertcli.core.stats import holm, summarize, welch

ALPHA = 0.05
FEW_SEEDS = 5        # below this many seeds per arm the test has little power
SCOPE = ("A difference here holds for these checkpoints; it says nothing about the recipes that made them unless "
         "several pretraining seeds of each recipe are compared.")


def names(summaries: list[Summary]) -> list[str]:
    """A column name per run: its checkpoint's folder name (`<run>-final` for a pretraining run's
    final), with the run directory where two would read alike."""
    base = [checkpoint_name(Path(s.checkpoint)) or s.checkpoint for s in summaries]
    return [b if base.count(b) == 1 else f"{b} ({s.directory})" for b, s in zip(base, summaries)]


def scorecard(summaries: list[Summary], correct: bool = True) -> dict:
    """Everything compare prints, for runs that share at least one task."""
    cols = names(summaries)
    common = [t for t in summaries[0].tasks if all(t in s.tasks for s in summaries)]
    if not common:
        listed = "; ".join(f"{n}: {', '.join(s.tasks)}" for n, s in zip(cols, summaries))
        raise UserError("the runs have no task in common, so there is nothing to compare", where=listed,
                        fix="give runs of the same fine-tuning task (or GLUE runs sharing a task)")
    tasks = [_task(t, {n: s.tasks[t] for n, s in zip(cols, summaries)}) for t in common]
    pairs = [p for t in tasks for p in t["pairs"] if p["p"] is not None]
    adjusted = holm([p["p"] for p in pairs]) if correct else [p["p"] for p in pairs]
    for p, q in zip(pairs, adjusted):
        p["p_adjusted"] = q
        p["verdict"] = _verdict(p)
    left_out = sorted({t for s in summaries for t in s.tasks} - set(common))
    few = sorted({min(p["n_a"], p["n_b"]) for p in pairs if min(p["n_a"], p["n_b"]) < FEW_SEEDS})
    notes = []
    if few:
        notes.append(f"warning: fewer than {FEW_SEEDS} seeds per arm (as few as {few[0]}): the test has little power, "
                     "so 'no significant difference' does not mean the checkpoints are equal; run more seeds "
                     f"(--seeds {FEW_SEEDS} or more)")
    if left_out:
        notes.append(f"not compared (not in every run): {', '.join(left_out)}")
    notes.append(SCOPE)
    glue = {n: s.glue_average for n, s in zip(cols, summaries)}
    return {
        "statistic": "median",
        "alpha": ALPHA,
        "correction": "holm" if correct else "none",
        "tests": len(pairs),
        "columns": [{"name": n, "directory": s.directory, "checkpoint": s.checkpoint, "kind": s.kind,
                     "command": s.command, "seeds": s.seeds} for n, s in zip(cols, summaries)],
        "tasks": tasks,
        "glue_dev_average": ({"values": glue, "rule": next(s.glue_rule for s in summaries if s.glue_rule)}
                             if any(s.glue_rule for s in summaries) else None),
        "notes": notes,
    }


def _task(name: str, arms: dict[str, TaskRuns]) -> dict:
    """A task's rows (its score first, then each dev metric) and its pairs."""
    score_name = next((a.score_name for a in arms.values() if a.score_name), None)
    scores = {n: _cell(a, a.score) for n, a in arms.items()}
    rows: list[dict[str, Any]] = [{"metric": "score", "name": score_name, "split": None, "cells": scores}]
    keys = list(dict.fromkeys(k for a in arms.values() for k in a.dev))
    for split, metric in keys:
        rows.append({"metric": metric, "name": metric, "split": split,
                     "cells": {n: _cell(a, a.dev[(split, metric)]) if (split, metric) in a.dev else None
                               for n, a in arms.items()}})
    pairs = [_pair(a, b, arms[a], arms[b], scores[a], scores[b]) for a, b in combinations(arms, 2)]
    return {"task": name, "score": score_name, "from_mnli": {n: a.from_mnli for n, a in arms.items()},
            "splits": sorted({s for s, _ in keys}), "rows": rows, "pairs": pairs}


def _cell(arm: TaskRuns, values: list[float]) -> dict:
    return {"lr": arm.lr, "runs": arm.runs, "failed": arm.failed, **summarize(values)}


def _pair(a: str, b: str, arm_a: TaskRuns, arm_b: TaskRuns, cell_a: dict, cell_b: dict) -> dict:
    """Arm a against arm b on the task's score (diff = a - b)."""
    test = welch(arm_a.score, arm_b.score)
    both = cell_a["median"] is not None and cell_b["median"] is not None
    diff = cell_a["median"] - cell_b["median"] if both else None
    sds = [c["sd"] for c in (cell_a, cell_b) if c["sd"] is not None]
    spread = max(sds) if len(sds) == 2 else None
    return {"a": a, "b": b, "n_a": cell_a["n"], "n_b": cell_b["n"], "diff": diff, "spread": spread,
            "within_spread": None if diff is None or spread is None else abs(diff) < spread,
            "mean_diff": test.diff, "t": test.t, "df": test.df, "p": test.p, "p_adjusted": None, "reason": test.reason,
            "verdict": f"not testable: {test.reason}" if test.p is None else None}


def _verdict(p: dict) -> str:
    if p["within_spread"]:
        return "within the seeds' spread"
    if p["p_adjusted"] < ALPHA:
        return f"{p['a'] if p['t'] > 0 else p['b']} higher"       # the side the test found (its means)
    return "no significant difference"
