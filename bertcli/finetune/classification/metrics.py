"""Classification and regression metrics, computed as GLUE reports them (numpy only: no scikit-learn at run time).

All values are fractions (0.873, not 87.3); tables show them x100 as the leaderboard does.
Degenerate cases follow scikit-learn's conventions: F1 is 0 with no true and no predicted
positives, Matthews correlation is 0 when a class is never true or never predicted; a Pearson
or Spearman correlation with a constant side is undefined and reported as 0 (scipy: nan).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bertcli.finetune.classification.glue import GLUE_ORDER, TaskSpec
from bertcli.finetune.classification.labels import LabelSpec


def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    return float(np.mean(np.asarray(pred) == np.asarray(gold)))


def f1_binary(pred: np.ndarray, gold: np.ndarray, positive: int = 1) -> float:
    """F1 of the positive class (MRPC: equivalent, QQP: duplicate)."""
    p, g = np.asarray(pred) == positive, np.asarray(gold) == positive
    tp = float(np.sum(p & g))
    denom = 2 * tp + float(np.sum(p & ~g)) + float(np.sum(~p & g))
    return 2 * tp / denom if denom else 0.0


def f1_macro(pred: np.ndarray, gold: np.ndarray) -> float:
    """Unweighted mean of the per-class F1 over the classes that occur in gold or predictions
    (scikit-learn's average="macro")."""
    pred, gold = np.asarray(pred), np.asarray(gold)
    classes = np.unique(np.concatenate([gold, pred]))
    return float(np.mean([f1_binary(pred, gold, positive=c) for c in classes]))


def matthews(pred: np.ndarray, gold: np.ndarray) -> float:
    """Matthews correlation (Gorodkin's multi-class form; the usual one for two classes)."""
    pred, gold = np.asarray(pred), np.asarray(gold)
    classes, idx = np.unique(np.concatenate([gold, pred]), return_inverse=True)
    k = len(classes)
    conf = np.zeros((k, k), dtype=np.float64)
    np.add.at(conf, (idx[: len(gold)], idx[len(gold):]), 1.0)   # rows: gold, columns: predicted
    t, p = conf.sum(axis=1), conf.sum(axis=0)
    n, correct = conf.sum(), np.trace(conf)
    cov_tp = correct * n - t @ p
    cov_pp, cov_tt = n * n - p @ p, n * n - t @ t
    denom = np.sqrt(cov_tt * cov_pp)
    return float(cov_tp / denom) if denom else 0.0


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    denom = np.sqrt((dx @ dx) * (dy @ dy))
    return float(np.clip((dx @ dy) / denom, -1.0, 1.0)) if denom else 0.0


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n; tied values share the mean of the ranks they span (scipy's 'average')."""
    x = np.asarray(x)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    # Boundaries of runs of equal values in sorted order.
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    mean_rank = (starts + ends + 1) / 2.0          # mean of ranks starts+1 .. ends
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(average_ranks(x), average_ranks(y))


METRICS = {"accuracy": accuracy, "f1": f1_binary, "macro_f1": f1_macro, "mcc": matthews, "pearson": pearson,
           "spearman": spearman}
LABELS = {"accuracy": "acc", "f1": "F1", "macro_f1": "macro-F1", "mcc": "MCC", "pearson": "Pearson",
          "spearman": "Spearman"}


def compute(task: LabelSpec, pred: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """The task's metrics on one dev set."""
    return {name: METRICS[name](pred, gold) for name in task.metrics}


def task_score(task: LabelSpec | TaskSpec, dev_metrics: dict[str, dict[str, float]]) -> float:
    """One number per task, as the leaderboard forms it: the unweighted mean of all its metrics
    over all its dev sets (MNLI: mean of matched and mismatched accuracy)."""
    values = [v for metrics in dev_metrics.values() for v in metrics.values()]
    return float(np.mean(values))


def glue_average(scores: dict[str, float]) -> float | None:
    """The GLUE score: the mean of the task scores (None when no task was run)."""
    values = [scores[t] for t in GLUE_ORDER if t in scores]
    return float(np.mean(values)) if values else None


def format_metrics(task: LabelSpec | TaskSpec, dev_metrics: dict[str, dict[str, float]]) -> str:
    """`88.1/84.0` (F1/acc), `84.2/84.9` (MNLI m/mm): x100 in the task's metric order."""
    return "/".join(f"{100 * v:.1f}" for metrics in dev_metrics.values() for v in metrics.values())


def metric_header(task: LabelSpec | TaskSpec, dev_names: Sequence[str] | None = None) -> str:
    """`F1/acc`, `Pearson/Spearman`, `acc-m/acc-mm`: what format_metrics shows. `dev_names`:
    the dev splits (default: a GLUE TaskSpec's)."""
    short = {"matched": "m", "mismatched": "mm"}
    if dev_names is not None:
        names = list(dev_names)
    else:
        assert isinstance(task, TaskSpec), "a LabelSpec has no dev splits of its own: pass dev_names"
        names = [s.name for s in task.dev]
    spec = task.label if isinstance(task, TaskSpec) else task
    if len(names) > 1:
        return "/".join(f"{LABELS[m]}-{short.get(n, n)}" for n in names for m in spec.metrics)
    return "/".join(LABELS[m] for m in spec.metrics)


__all__ = ["accuracy", "f1_binary", "f1_macro", "matthews", "pearson", "spearman", "average_ranks",
           "compute", "task_score", "glue_average", "format_metrics", "metric_header"]
