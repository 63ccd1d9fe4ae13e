"""`bertcli finetune classify`: sentence (pair) classification or regression on your own files.

Files: `.csv` (standard quoting), `.tsv` (split on tabs only, no quote processing, as GLUE's
files), `.jsonl` (one object per line), `.parquet`, or a `datasets` save_to_disk directory
(one Dataset, or a DatasetDict whose split is taken by name: train / validation / test). Every
file needs the text column (and the pair column when given); train and dev need the label; a
test file that has it is scored as well ("test" in results.json and the summary).

Labels are strings or ints; class ids follow the sorted training labels (numerically when they
are all numbers). `--regression` predicts a number instead (labels must all be numbers).
Metrics: accuracy, macro-F1 and MCC (classification), Pearson and Spearman (regression); the
best epoch is chosen by the first. Output (default runs/classify/<checkpoint name>/): the best
model (AutoModelForSequenceClassification, id2label), results.json, dev_predictions/dev.tsv and
test_predictions/test.tsv (`index<TAB>prediction`, labels spelled as in the files).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertcli.core import console
from bertcli.core.errors import UserError, closest
from bertcli.finetune import runner
from bertcli.finetune.classification.glue_data import SequenceSplit
from bertcli.finetune.classification.labels import LabelSpec
from bertcli.finetune.classification.task import SequenceTask
from bertcli.finetune.task import TaskSplits, overlay
from bertcli.io import records, tables
from bertcli.io.tables import Table
from bertcli.io.text import DEFAULT_MAX_LINE_BYTES, LineOptions, check_encoding

if TYPE_CHECKING:
    from bertcli.config.finetune_sections import ClassifyConfig, FinetuneConfig
    from bertcli.config.recipe import Recipe

CLASSIFY_METRICS = ("accuracy", "macro_f1", "mcc")
REGRESSION_METRICS = ("pearson", "spearman")


# ------------------------------------------------------------------------------------ reading
DICT_SPLITS = {"train": ("train",), "dev": ("validation", "dev", "valid"), "test": ("test",)}


def read_table(path: Path, split: str, opts: LineOptions = LineOptions()) -> Table:
    """One file (or save_to_disk directory) as a Table, by bertcli.io's rules."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"the {split} file {path} does not exist", fix=f"give --{split} an existing file")
    return tables.open_table(path, opts, split=DICT_SPLITS[split])


def _need_column(table: Table, name: str, what: str) -> None:
    if table.header is None:
        return                        # JSON: each record is checked, at its own line
    names = table.names()
    if name not in names:
        hint = closest(name, names)
        raise UserError(f"no {what} column {name!r}" + (f"; did you mean {hint}?" if hint else ""),
                        where=table.header,
                        fix=f"the columns are: {', '.join(map(str, names))}; choose one with --{what}-column")


def _read_rows(table: Table, cfg: ClassifyConfig, labelled: bool):
    """(texts, pairs, ids, raw labels, wheres) of every record, each value checked (bertcli.io.records)."""
    for name, what in ((cfg.text_column, "text"), (cfg.text_pair_column, "text-pair"), (cfg.id_column, "id")) + \
            (((cfg.label_column, "label"),) if labelled else ()):
        if name:
            _need_column(table, name, what)
    text: list[str] = []
    pair: list[str] | None = [] if cfg.text_pair_column else None
    ids: list[str] = []
    raw: list = []
    where: list[str] = []
    for w, rec in table.records():
        text.append(records.text(rec, cfg.text_column, w, "--text-column"))
        if pair is not None and cfg.text_pair_column:     # a list exactly when the column is named
            pair.append(records.text(rec, cfg.text_pair_column, w, "--text-pair-column"))
        ids.append(records.optional_text(rec, cfg.id_column, w, str(len(ids))))
        if labelled:
            raw.append(records.label(rec, cfg.label_column, w, cfg.regression, "--label-column"))
        where.append(w)
    if not text:
        raise UserError(f"{Path(table.source).name} has no rows", where=table.source,
                        fix="give at least one example after the header")
    return text, pair, ids, raw, where


# ------------------------------------------------------------------------------------ labels
def _number(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def label_names(values: list, regression: bool) -> tuple[str, ...] | None:
    """Class names in id order (None for regression)."""
    if regression:
        return None
    names = sorted({_spell(v) for v in values})
    if all(_number(n) is not None for n in names):
        names.sort(key=float)
    return tuple(names)


def _spell(value) -> str:
    """A label as text: ints and integral floats as ints (1 and 1.0 and "1" are one class)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def to_split(table: Table, name: str, cfg: ClassifyConfig, labels, labelled: bool, rows=None) -> SequenceSplit:
    text, pair, ids, raw, where = rows if rows is not None else _read_rows(table, cfg, labelled)
    y = None
    if labelled:
        if labels is None:
            y = np.asarray(raw, dtype=np.float32)
        else:
            index = {n: i for i, n in enumerate(labels)}
            y = np.empty(len(raw), dtype=np.int64)
            for i, (v, w) in enumerate(zip(raw, where)):
                if _spell(v) not in index:
                    raise UserError(f"{name} label {_spell(v)!r} never occurs in the training file", where=w,
                                    fix=f"training labels: {', '.join(labels)}")
                y[i] = index[_spell(v)]
    return SequenceSplit(name, table.source, text, pair, y, ids)


def load_classify(cfg: FinetuneConfig, train: Path, dev: Path, test: Path | None, encoding: str | None = None,
                  max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> tuple[LabelSpec, TaskSplits[SequenceSplit]]:
    """Read and check all files before any model is loaded (lines bounded by corpus.max_line_bytes):
    the labels (from the training file) and the splits."""
    block = cfg.classify
    opts = LineOptions(max_line_bytes=max_line_bytes, encoding=check_encoding(encoding))
    t_table = read_table(train, "train", opts)
    t_rows = _read_rows(t_table, block, labelled=True)
    labels = label_names(t_rows[3], block.regression)
    if labels is not None:
        records.check_classes(labels, t_table.source)
    spec = LabelSpec(labels, labels, REGRESSION_METRICS if labels is None else CLASSIFY_METRICS)
    train_split = to_split(t_table, "train", block, labels, True, rows=t_rows)
    dev_split = to_split(read_table(dev, "dev", opts), "dev", block, labels, True)
    tests = []
    if test is not None:
        # a test file with the label column is scored too (run_glue's --do_predict with labels)
        t = read_table(test, "test", opts)
        tests.append(to_split(t, "test", block, labels, labelled=block.label_column in t.names()))
    if labels is not None and len(labels) > 0.5 * len(train_split) and all(_number(n) is not None for n in labels):
        console.log(f"warning: {len(labels):,} distinct numeric labels in {len(train_split):,} rows: "
                    "a regression task? (--regression)")
    return spec, TaskSplits(train_split, [dev_split], tests, "files", str(train), {"skipped_rows": {}})


class ClassifyTask(SequenceTask):
    """The classification task on your own files: labels from the training file."""

    def __init__(self, cfg: FinetuneConfig, train: Path, dev: Path, test: Path | None = None, encoding: str | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES):
        super().__init__("classify", overlay(cfg, cfg.classify))
        self.cfg, self.files = cfg, (train, dev, test)
        self.encoding, self.max_line_bytes = encoding, max_line_bytes

    def read(self) -> TaskSplits[SequenceSplit]:
        self.spec, splits = load_classify(self.cfg, *self.files, self.encoding, self.max_line_bytes)
        what = "regression" if self.spec.is_regression else f"{self.spec.num_labels} classes"
        console.log(f"classify: {what}" + (f" ({', '.join(self.spec.labels)})" if self.spec.labels else ""))
        return splits


def run_classify(recipe: Recipe, checkpoint: Path, train: Path, dev: Path, test: Path | None = None,
                 out: Path | None = None, encoding: str | None = None, **columns) -> dict:
    """Fine-tune on your own files; `columns` override finetune.classify keys (the CLI flags)."""
    if columns:
        cfg = dataclasses.replace(recipe.finetune, classify=dataclasses.replace(recipe.finetune.classify, **columns))
        recipe = dataclasses.replace(recipe, finetune=cfg)       # the saved recipe.yaml shows them
    task = ClassifyTask(recipe.finetune, train, dev, test, encoding, recipe.corpus.max_line_bytes)
    return runner.finetune_task(task, recipe, checkpoint, out)
