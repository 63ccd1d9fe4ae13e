"""Test-set prediction files in the form the GLUE server takes, and small atomic file writers.

Each file is `index<TAB>prediction` with that header, one line per test example in file order:
labels spelled as in the task's TSV files (MNLI/QNLI/RTE/AX: entailment, neutral, contradiction,
not_entailment; the binary tasks and WNLI: 0/1), STS-B scores clipped to [0, 5]. The folder
`submission/` then zips as it is (`cd submission && zip ../glue.zip *.tsv`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bertcli.core import jsonout
from bertcli.core.fs import write_text_atomic as write_text
from bertcli.finetune.classification.labels import LabelSpec


def prediction_strings(task: LabelSpec, predictions: np.ndarray) -> list[str]:
    """Class ids -> the task's label spellings; scores -> 3 decimals, clipped to the task's
    range where it has one (STS-B: [0, 5])."""
    if task.is_regression:
        values = np.asarray(predictions, dtype=np.float64)
        if task.score_range is not None:
            values = np.clip(values, *task.score_range)
        return [f"{v:.3f}" for v in values]
    assert task.labels is not None, "a classification task names its labels"
    return [task.labels[int(i)] for i in predictions]


def write_predictions(path: Path, ids: Sequence[str], values: Sequence[str]) -> Path:
    """Write `index<TAB>prediction` lines (with header) atomically."""
    if len(ids) != len(values):
        raise ValueError(f"{len(ids)} ids but {len(values)} predictions")  # a bug, not user input
    lines = ["index\tprediction"] + [f"{i}\t{v}" for i, v in zip(ids, values)]
    return write_text(path, "\n".join(lines) + "\n")


def write_json(path: Path, obj: object) -> Path:
    return write_text(path, jsonout.dumps(obj, indent=2, ensure_ascii=False) + "\n")
