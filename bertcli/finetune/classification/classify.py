"""`bertcli finetune classify`: sentence (pair) classification or regression on your own files.

Files: `.csv` (standard quoting), `.tsv` (split on tabs only, no quote processing, as GLUE's
files), `.jsonl` (one object per line), `.parquet`, or a `datasets` save_to_disk directory
(one Dataset, or a DatasetDict whose split is taken by name: train / validation / test). Every
file needs the text column (and the pair column when given); train and dev need the label.

Labels are strings or ints; class ids follow the sorted training labels (numerically when they
are all numbers). `--regression` predicts a number instead (labels must all be numbers).
Metrics: accuracy, macro-F1 and MCC (classification), Pearson and Spearman (regression); the
best epoch is chosen by the first. Output (default runs/classify/<checkpoint name>/): the best
model (AutoModelForSequenceClassification, id2label), results.json, dev_predictions/dev.tsv and
test_predictions/test.tsv (`index<TAB>prediction`, labels spelled as in the files).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from bertcli import console
from bertcli.errors import UserError, closest
from bertcli.finetune import runner
from bertcli.finetune.classification.glue_data import Split, _Columns, tsv_rows
from bertcli.finetune.classification.labels import LabelSpec
from bertcli.finetune.classification.task import SequenceTask
from bertcli.finetune.task import TaskSplits, overlay

CLASSIFY_METRICS = ("accuracy", "macro_f1", "mcc")
REGRESSION_METRICS = ("pearson", "spearman")


# ------------------------------------------------------------------------------------ reading
def read_table(path: Path, split: str) -> tuple[_Columns, list[str]]:
    """The columns of one file, and where each row is (`file:line` / `file row i`) for messages."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"the {split} file {path} does not exist", fix=f"give --{split} an existing file")
    if path.is_dir():
        return _read_datasets(path, split)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            rows, where = [], []
            for fields in reader:
                if fields:
                    rows.append(fields)
                    where.append(f"{path}:{reader.line_num}")
        return _from_rows(path, header, rows, where)
    if suffix == ".tsv":
        lines = list(tsv_rows(path))
        header = lines[0][1] if lines else None
        return _from_rows(path, header, [f for _, f in lines[1:]], [f"{path}:{n}" for n, _ in lines[1:]])
    if suffix in (".jsonl", ".json"):
        rows, where = [], []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise UserError(f"not a JSON object: {e.msg}", where=f"{path}:{lineno}",
                                        fix="one JSON object per line (jsonl)")
                    if not isinstance(obj, dict):
                        raise UserError("not a JSON object", where=f"{path}:{lineno}")
                    rows.append(obj)
                    where.append(f"{path}:{lineno}")
        names = list(dict.fromkeys(k for r in rows for k in r))
        return _Columns(names, lambda n: [r.get(n) for r in rows], str(path)), where
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as e:
            raise UserError(f"cannot read the parquet file: {e}", where=str(path))
        return (_Columns(table.column_names, lambda n: table.column(n).to_pylist(), str(path)),
                [f"{path} row {i}" for i in range(table.num_rows)])
    raise UserError(f"{path.name}: unknown file kind {suffix or '(none)'}", where=str(path),
                    fix="give a .csv, .tsv, .jsonl or .parquet file, or a datasets save_to_disk directory")


def _from_rows(path: Path, header, rows: list[list[str]], where: list[str]):
    if not header:
        raise UserError(f"{path.name} is empty", where=str(path), fix="the first line names the columns")
    header = [h.strip() for h in header]
    for fields, w in zip(rows, where):
        if len(fields) != len(header):
            raise UserError(f"{len(fields)} fields where the header has {len(header)}", where=w,
                            fix="every row needs one value per column (quote text with commas in a csv)")
    return _Columns(header, lambda n: [r[header.index(n)] for r in rows], str(path)), where


def _read_datasets(folder: Path, split: str):
    import datasets

    try:
        ds = datasets.load_from_disk(str(folder))
    except FileNotFoundError:
        raise UserError(f"{folder} is not a datasets save_to_disk directory", where=str(folder))
    if isinstance(ds, datasets.DatasetDict):
        names = {"train": ("train",), "dev": ("validation", "dev", "valid"), "test": ("test",)}[split]
        key = next((k for k in names if k in ds), None)
        if key is None:
            raise UserError(f"the DatasetDict has no {split} split", where=str(folder),
                            fix=f"found splits: {', '.join(ds)}; expected {' or '.join(names)}")
        ds, source = ds[key], f"{folder}[{key}]"
    else:
        source = str(folder)
    return (_Columns(list(ds.column_names), lambda n: list(ds[n]), source),
            [f"{source} row {i}" for i in range(len(ds))])


def _column(cols: _Columns, name: str, what: str) -> list:
    if name not in cols.names:
        hint = closest(name, cols.names)
        raise UserError(f"no {what} column {name!r}" + (f"; did you mean {hint}?" if hint else ""),
                        where=cols.source,
                        fix=f"the columns are: {', '.join(cols.names)}; choose one with --{what}-column")
    return cols.get(name)


# ------------------------------------------------------------------------------------ labels
def _number(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def label_names(values: list, where: list[str], regression: bool) -> tuple[str, ...] | None:
    """Class names in id order (None for regression)."""
    if regression:
        for v, w in zip(values, where):
            if _number(v) is None:
                raise UserError(f"label {v!r} is not a number, but --regression was asked for", where=w,
                                fix="regression needs numeric labels; drop --regression to classify")
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


def to_split(cols: _Columns, where: list[str], name: str, cfg, labels, labelled: bool) -> Split:
    text = [str(x) for x in _column(cols, cfg.text_column, "text")]
    pair = [str(x) for x in _column(cols, cfg.text_pair_column, "text-pair")] if cfg.text_pair_column else None
    ids = [str(x) for x in _column(cols, cfg.id_column, "id")] if cfg.id_column else [str(i) for i in range(len(text))]
    y = None
    if labelled:
        raw = _column(cols, cfg.label_column, "label")
        if labels is None:
            label_names(raw, where, regression=True)
            y = np.asarray([float(v) for v in raw], dtype=np.float32)
        else:
            index = {n: i for i, n in enumerate(labels)}
            y = np.empty(len(raw), dtype=np.int64)
            for i, (v, w) in enumerate(zip(raw, where)):
                if _spell(v) not in index:
                    raise UserError(f"{name} label {_spell(v)!r} never occurs in the training file", where=w,
                                    fix=f"training labels: {', '.join(labels)}")
                y[i] = index[_spell(v)]
    if not text:
        raise UserError(f"the {name} file has no rows", where=cols.source)
    return Split(name, cols.source, text, pair, y, ids)


def load_classify(cfg, train: Path, dev: Path, test: Path | None) -> tuple[LabelSpec, TaskSplits[Split]]:
    """Read and check all files before any model is loaded: the labels (from the training file)
    and the splits."""
    block = cfg.classify
    t_cols, t_where = read_table(train, "train")
    for name, what in ((block.text_column, "text"), (block.text_pair_column, "text-pair")):
        if name:
            _column(t_cols, name, what)          # the text columns are named first
    labels = label_names(_column(t_cols, block.label_column, "label"), t_where, block.regression)
    if labels is not None and len(labels) < 2:
        raise UserError(f"the training labels hold one class only ({labels[0]!r})", where=t_cols.source,
                        fix="a classifier needs at least two classes (or --regression for numbers)")
    spec = LabelSpec(labels, labels, REGRESSION_METRICS if labels is None else CLASSIFY_METRICS)
    train_split = to_split(t_cols, t_where, "train", block, labels, True)
    d_cols, d_where = read_table(dev, "dev")
    dev_split = to_split(d_cols, d_where, "dev", block, labels, True)
    tests = []
    if test is not None:
        x_cols, x_where = read_table(test, "test")
        tests.append(to_split(x_cols, x_where, "test", block, labels, labelled=False))
    if labels is not None and len(labels) > 0.5 * len(train_split) and all(_number(n) is not None for n in labels):
        console.log(f"warning: {len(labels):,} distinct numeric labels in {len(train_split):,} rows: "
                    "a regression task? (--regression)")
    return spec, TaskSplits(train_split, [dev_split], tests, "files", str(train), {"skipped_rows": {}})


class ClassifyTask(SequenceTask):
    """The classification task on your own files: labels from the training file."""

    def __init__(self, cfg, train: Path, dev: Path, test: Path | None = None):
        super().__init__("classify", overlay(cfg, cfg.classify))
        self.cfg, self.files = cfg, (train, dev, test)

    def read(self) -> TaskSplits[Split]:
        self.spec, splits = load_classify(self.cfg, *self.files)
        what = "regression" if self.spec.is_regression else f"{self.spec.num_labels} classes"
        console.log(f"classify: {what}" + (f" ({', '.join(self.spec.labels)})" if self.spec.labels else ""))
        return splits


def run_classify(recipe, checkpoint: Path, train: Path, dev: Path, test: Path | None = None,
                 out: Path | None = None, **columns) -> dict:
    """Fine-tune on your own files; `columns` override finetune.classify keys (the CLI flags)."""
    if columns:
        cfg = dataclasses.replace(recipe.finetune, classify=dataclasses.replace(recipe.finetune.classify, **columns))
        recipe = dataclasses.replace(recipe, finetune=cfg)       # the saved recipe.yaml shows them
    return runner.finetune(ClassifyTask(recipe.finetune, train, dev, test), recipe, checkpoint, out)
