"""`bertcli export --dev`: the task metric of the exported graph on a labelled dev set, so the cost
of int8 quantization is a measured number.

Dev files are any file `predict` reads (.jsonl, .csv/.tsv, .parquet) with the task's fields and
a `label` column; the gold labels and the metric are the head kind's own (`HeadKind.dev_metric`,
bertcli.tasks.heads): classification's accuracy and macro-F1, or Pearson for regression.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bertcli.core.errors import UserError
from bertcli.export.inputs import read_records
from bertcli.tasks.heads import HEADS, head_kind


def load_dev(path: Path, task: str, labels) -> tuple[list, list, Callable]:
    """Read the dev set whole (it is small) and check that it matches the task: records, gold
    labels and the metric function."""
    kind = head_kind(task)
    if kind.dev_metric is None:
        raise UserError(f"--dev is not supported for the task {kind.name}",
                        fix="tasks with a dev metric: " + ", ".join(k.name for k in HEADS.values() if k.dev_metric))
    gold_of, metric = kind.dev_metric(labels)
    records, gold = [], []
    for where, rec in read_records(path):
        gold.append(gold_of(rec, where))
        records.append((where, rec))
    if not records:
        raise UserError("the --dev set is empty", where=str(path))
    return records, gold, metric


def evaluate(predictor, records, gold, metric) -> dict:
    return metric(gold, list(predictor.predict(records)))
