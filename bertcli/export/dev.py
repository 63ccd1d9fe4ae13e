"""`bertcli export --dev`: the task metric of the exported graph on a labelled dev set, so the cost
of int8 quantization is a measured number.

Dev files are any file `predict` reads (.jsonl, .csv/.tsv, .parquet) with the task's fields and
a `label` column: label names (or ids) of the classifier for classification (metric: accuracy,
and macro-F1), numbers for regression (Pearson). Other tasks register a metric in METRICS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from bertcli.core.errors import UserError
from bertcli.export.inputs import read_records
from bertcli.io import records

LABEL = ("label", "labels", "gold_label")


def _classification_gold(labels: tuple[str, ...]):
    index = {name: i for i, name in enumerate(labels)}

    def gold(rec: dict, where: str):
        name = next((k for k in LABEL if k in rec), None)
        if name is None:
            raise UserError("the dev record has no label field", where=where,
                            fix=f"give each record a `label` (one of {', '.join(labels)})")
        value = records.label(rec, name, where, regression=len(labels) == 1)   # checked: no null, list, object
        if len(labels) == 1:
            return value
        key = str(value)
        if key in index:
            return index[key]
        if key.lstrip("-").isdigit() and 0 <= int(key) < len(labels):
            return int(key)
        raise UserError(f"dev label {value!r} is not one of the model's labels ({', '.join(labels)})", where=where,
                        fix="the --dev set does not match this classifier's task")
    return gold


def _classification_metric(labels: tuple[str, ...]):
    def metric(gold: list, preds: list[dict]) -> dict:
        if len(labels) == 1:
            y = np.array([p["score"] for p in preds])
            g = np.array(gold, dtype=np.float64)
            r = float(np.corrcoef(y, g)[0, 1]) if len(g) > 1 and g.std() > 0 and y.std() > 0 else 0.0
            return {"pearson": r}
        y = np.array([p["label_id"] for p in preds])
        g = np.array(gold)
        f1s = []
        for c in range(len(labels)):
            tp = int(((y == c) & (g == c)).sum())
            denom = int((y == c).sum() + (g == c).sum())
            f1s.append(2 * tp / denom if denom else 0.0)
        return {"accuracy": float((y == g).mean()), "macro_f1": float(np.mean(f1s))}
    return metric


# task -> factory(labels) -> (gold(rec, where), metric(gold, predictions))
METRICS: dict[str, Callable] = {
    "classification": lambda labels: (_classification_gold(labels), _classification_metric(labels)),
}


def load_dev(path: Path, task: str, labels) -> tuple[list, list, Callable]:
    """Read the dev set whole (it is small) and check that it matches the task: records, gold
    labels and the metric function."""
    if task not in METRICS:
        raise UserError(f"--dev is not supported for the task {task}", fix="tasks with a dev metric: " + ", ".join(METRICS))
    gold_of, metric = METRICS[task](labels)
    records, gold = [], []
    for where, rec in read_records(path):
        gold.append(gold_of(rec, where))
        records.append((where, rec))
    if not records:
        raise UserError("the --dev set is empty", where=str(path))
    return records, gold, metric


def evaluate(predictor, records, gold, metric) -> dict:
    return metric(gold, list(predictor.predict(records)))
