"""Read a GLUE task from the original TSV files or from the `datasets` layout into one format.

Layouts of a task folder (found as `<data-dir>/<CoLA|SST-2|...|cola|sst2|...>`, or `--data-dir`
itself when it is one task's folder):
    tsv           train.tsv, dev.tsv (MNLI: dev_matched.tsv, dev_mismatched.tsv), test.tsv, as the
                  GLUE download script leaves them. Read with quote processing OFF: a `"` in a
                  sentence is text, as in the files (csv's default quoting corrupts MNLI and QQP).
    save_to_disk  a `datasets.DatasetDict` written by `save_to_disk` (dataset_dict.json).
    parquet       the hub's parquet files: `<split>-00000-of-00001.parquet` (nyu-mll/glue layout).
    hub           `datasets.load_dataset(NAME, task)` (`--hub`; needs the network or the cache).
Every layout ends as a `TaskData` of `SequenceSplit`s: texts, label ids (float scores for STS-B) and
the ids the submission files are keyed by.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bertcli.core.errors import UserError, require_finite
from bertcli.finetune.classification.glue import AX, AX_FOLDER, AX_HUB_CONFIG, TASKS, TaskSpec, normalize
from bertcli.io import records, tables
from bertcli.io.tables import Table
from bertcli.io.text import NO_ENCODING_FLAG


@dataclass
class SequenceSplit:
    name: str                      # train, dev, matched, mismatched, test, ax
    source: str                    # file or dataset split, for messages and results.json
    text_a: list[str]
    text_b: list[str] | None
    labels: np.ndarray | None      # int64 label ids, float32 scores (STS-B), None for test sets
    ids: list[str]                 # the `index` written in submission files

    def __len__(self) -> int:
        return len(self.text_a)

    def head(self, n: int) -> SequenceSplit:
        """The first `n` examples (finetune.max_train_examples)."""
        return SequenceSplit(self.name, self.source, self.text_a[:n], self.text_b[:n] if self.text_b is not None else None,
                     self.labels[:n] if self.labels is not None else None, self.ids[:n])


@dataclass
class TaskData:
    task: TaskSpec
    layout: str
    source: str
    train: SequenceSplit
    dev: list[SequenceSplit]
    test: list[SequenceSplit] = field(default_factory=list)   # absent test files: no submission
    skipped: dict[str, int] = field(default_factory=dict)  # malformed TSV rows left out, by file


# ------------------------------------------------------------------------------ finding tasks
def detect_layout(folder: Path) -> str | None:
    """tsv, save_to_disk or parquet, by the files in `folder`; None when it holds none of them."""
    if (folder / "train.tsv").is_file():
        return "tsv"
    if (folder / "dataset_dict.json").is_file():
        return "save_to_disk"
    if tables.has_parquet(folder):
        return "parquet"
    return None


def find_tasks(data_dir: Path) -> dict[str, Path]:
    """Task name -> its folder, for every GLUE task folder directly under `data_dir`."""
    found: dict[str, Path] = {}
    if not data_dir.is_dir():
        raise UserError(f"GLUE data directory {data_dir} does not exist",
                        fix="pass --data-dir pointing at the folder with CoLA/, SST-2/, ... (or --hub nyu-mll/glue)")
    for child in sorted(data_dir.iterdir()):
        key = normalize(child.name)
        if child.is_dir() and key in TASKS and key not in found:
            found[key] = child
    return found


def task_folder(data_dir: Path, task: TaskSpec) -> Path:
    """The folder holding `task`'s data, or a UserError naming what was found instead."""
    data_dir = Path(data_dir)
    folders = find_tasks(data_dir)
    if task.name in folders:
        return folders[task.name]
    if detect_layout(data_dir) is not None:       # --data-dir is the task's own folder
        return data_dir
    seen = sorted(p.name for p in data_dir.iterdir() if p.is_dir()) if data_dir.is_dir() else []
    raise UserError(
        f"no {task.glue_name} folder in {data_dir}",
        where=str(data_dir),
        fix=(f"found: {', '.join(seen) or 'no folders'}; expected {task.glue_name}/ (GLUE download) or "
             f"{task.name}/ (datasets layout), or point --data-dir at the task's own folder"),
    )


# ------------------------------------------------------------------------------ loading
def load_task(task: TaskSpec, data_dir: Path | None = None, hub: str | None = None,
              bad_rows: str = "error") -> TaskData:
    """All splits of one task (MNLI's AX diagnostic set included when present). `bad_rows`
    "skip" leaves out TSV rows with the wrong number of fields instead of stopping."""
    if hub:
        return _load_hub(task, hub)
    assert data_dir is not None, "the runner gives data_dir when there is no hub"
    folder = task_folder(Path(data_dir), task)
    layout = detect_layout(folder)
    if layout is None:
        raise UserError(f"{folder} holds no GLUE data",
                        where=str(folder),
                        fix="expected train.tsv (GLUE download), dataset_dict.json (save_to_disk) or "
                            "<split>-*.parquet files (the hub's layout)")
    if layout == "tsv":
        return _load_tsv(task, folder, bad_rows == "skip")
    return _load_datasets(task, folder, layout)


def _load_tsv(task: TaskSpec, folder: Path, skip_bad: bool = False) -> TaskData:
    def need(name: str) -> Path:
        path = folder / name
        if not path.is_file():
            present = ", ".join(sorted(p.name for p in folder.iterdir())) or "nothing"
            raise UserError(f"{task.glue_name}: {name} is missing", where=str(folder),
                            fix=f"found: {present}; the GLUE download has {', '.join(_tsv_names(task))}")
        return path

    skipped: dict[str, int] = {}
    read = lambda path, name, kind: read_tsv_split(path, task, name, kind, skipped if skip_bad else None)  # noqa: E731
    train = read(need("train.tsv"), "train", "train")
    dev = [read(need(s.tsv), s.name, "dev") for s in task.dev]
    test = [read(folder / s.tsv, s.name, "test") for s in task.test if (folder / s.tsv).is_file()]
    if task.name == "mnli":
        for ax in (folder.parent / AX_FOLDER / AX.tsv, folder / AX.tsv):
            if ax.is_file():
                test.append(read(ax, AX.name, "test"))
                break
    return TaskData(task, "tsv", str(folder), train, dev, test, skipped)


def _tsv_names(task: TaskSpec) -> list[str]:
    return ["train.tsv"] + [s.tsv for s in task.dev] + [s.tsv for s in task.test]


def read_tsv_split(path: Path, task: TaskSpec, name: str, kind: str, skipped: dict | None = None) -> SequenceSplit:
    """One GLUE TSV file (bertcli.io's TSV rule: tabs only, no quote processing). `kind` is train,
    dev or test (test files carry ids instead of labels). With a `skipped` dict, rows with the
    wrong number of fields are counted there, not fatal."""
    def skip(where: str) -> None:
        assert skipped is not None, "skip is only passed on when skipped is a dict"
        skipped[str(path)] = skipped.get(str(path), 0) + 1

    label_col: str | None
    if task.headerless_train and kind != "test":      # CoLA train/dev: source, label, *, sentence
        a_col, label_col = (str(i) for i in task.headerless_train)
        b_col = id_col = None
        header = ["0", "1", "2", "3"]
    else:
        a_col, b_col, header = task.tsv_a, task.tsv_b, None
        label_col = None if kind == "test" else task.tsv_label
        id_col = task.tsv_test_id if kind == "test" else None
    table = tables.open_table(path, NO_ENCODING_FLAG, fmt="tsv", header=header,
                              on_bad_width=skip if skipped is not None else None,
                              width_fix=f"keep {task.glue_name}'s column layout, or --set finetune.bad_rows=skip to "
                                        "leave such rows out")
    if header is None:
        found = table.names()
        wanted = [c for c in (a_col, b_col, id_col, label_col) if c]
        missing = [c for c in wanted if c not in found]
        if missing:
            raise UserError(
                f"{path.name} lacks the column(s) {', '.join(missing)} of {task.glue_name}'s "
                f"{'test' if kind == 'test' else 'train/dev'} files",
                where=f"{path}:1",
                fix=f"expected a tab-separated header with {', '.join(wanted)}; found: {', '.join(found)}",
            )

    label_of = _label_parser(task, path)
    text_a: list[str] = []
    text_b: list[str] | None = [] if b_col is not None else None
    labels: list[float | int] = []
    ids: list[str] = []
    for where, rec in table.records():
        text_a.append(rec[a_col])
        if b_col is not None and text_b is not None:
            text_b.append(rec[b_col])
        if label_col is not None:
            labels.append(label_of(rec[label_col].strip(), where))
        ids.append(rec[id_col].strip() if id_col is not None else str(len(ids)))
    if not text_a:
        raise UserError(f"{path.name} has no examples", where=str(path))
    return SequenceSplit(name, str(path), text_a, text_b, _label_array(task, labels) if label_col is not None else None, ids)


def _label_parser(task: TaskSpec, path: Path) -> Callable[[str, str], float | int]:
    if task.label.is_regression:
        def score(text: str, where: str) -> float:
            try:
                value = float(text)
            except ValueError:
                raise UserError(f"{task.glue_name} score {text!r} is not a number", where=where)
            return require_finite(value, f"{task.glue_name} score {text!r}", where)
        return score
    names = task.label.labels
    assert names is not None, "labels is None only for regression tasks, handled above"
    index = {label: i for i, label in enumerate(names)}

    def label(text: str, where: str) -> int:
        if text not in index:
            raise UserError(f"unknown {task.glue_name} label {text!r}", where=where,
                            fix=f"labels of {task.glue_name}: {', '.join(names)}")
        return index[text]
    return label


def _label_array(task: TaskSpec, labels: Sequence) -> np.ndarray:
    return np.asarray(labels, dtype=np.float32 if task.label.is_regression else np.int64)


# ------------------------------------------------------------------------------ datasets layouts
def _load_datasets(task: TaskSpec, folder: Path, layout: str) -> TaskData:
    splits = tables.saved_splits(folder) if layout == "save_to_disk" else tables.parquet_splits(folder)
    ax = None
    if task.name == "mnli":
        ax_dir = folder.parent / AX_HUB_CONFIG
        if ax_dir.is_dir() and detect_layout(ax_dir) is not None:
            ax = (tables.saved_splits(ax_dir) if (ax_dir / "dataset_dict.json").is_file()
                  else tables.parquet_splits(ax_dir)).get("test")
    return _from_columns(task, splits, layout, str(folder), ax)


def _load_hub(task: TaskSpec, name: str) -> TaskData:
    hint = "download the data and pass --data-dir"
    splits = tables.hub_splits(name, task.name, local_hint=hint)
    ax = None
    if task.name == "mnli":
        try:
            ax = tables.hub_splits(name, AX_HUB_CONFIG, local_hint=hint)["test"]
        except (UserError, KeyError):  # the diagnostic set is optional
            ax = None
    return _from_columns(task, splits, "hub", f"{name}/{task.name}", ax)


def _from_columns(task: TaskSpec, splits: dict[str, Table], layout: str, source: str,
                  ax: Table | None) -> TaskData:
    def need(split: str) -> Table:
        if split not in splits:
            raise UserError(f"{task.name}: split {split!r} is missing", where=source,
                            fix=f"found splits: {', '.join(sorted(splits)) or 'none'}")
        return splits[split]

    train = _columns_split(need("train"), task, "train", labeled=True)
    dev = [_columns_split(need(s.hub_split), task, s.name, labeled=True) for s in task.dev]
    test = [_columns_split(splits[s.hub_split], task, s.name, labeled=_gold(splits[s.hub_split]))
            for s in task.test if s.hub_split in splits]
    if ax is not None:
        test.append(_columns_split(ax, task, AX.name, labeled=False, ax=True))
    return TaskData(task, layout, source, train, dev, test)


def _gold(cols: Table) -> bool:
    """A test split with real labels (the `datasets` GLUE test splits hold -1 everywhere): it is
    scored as well as predicted."""
    if "label" not in cols.names():
        return False
    raw = cols.column("label")
    return bool(raw) and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v != -1 for v in raw)


def _columns_split(cols: Table, task: TaskSpec, name: str, labeled: bool, ax: bool = False) -> SequenceSplit:
    a, b = ("premise", "hypothesis") if ax else (task.hub_a, task.hub_b)
    wanted = [a] + ([b] if b else []) + (["label"] if labeled else [])
    names = cols.names()
    missing = [c for c in wanted if c not in names]
    if missing:
        raise UserError(f"{task.name} split {name}: column(s) {', '.join(missing)} missing", where=cols.source,
                        fix=f"expected the `datasets` GLUE columns {', '.join(wanted)} (+ idx); found: "
                            f"{', '.join(names)}")
    text_a = records.text_column(cols.column(a), a, cols.source)
    text_b = records.text_column(cols.column(b), b, cols.source) if b else None
    ids = [str(x) for x in cols.column("idx")] if "idx" in names else [str(i) for i in range(len(text_a))]
    labels = None
    if labeled:
        raw = cols.column("label")
        for i, v in enumerate(raw):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise UserError(f"{task.name} split {name}: the label at row {i} is {records.json_type(v)} "
                                f"({v!r}), not a number", where=f"{cols.source} row {i}",
                                fix="labels must be the `datasets` GLUE class ids (or STS-B scores)")
        labels = _label_array(task, raw)
        for i in np.flatnonzero(~np.isfinite(labels))[:1] if task.label.is_regression else ():
            require_finite(float(labels[i]), f"{task.name} split {name}: the label at row {i} (idx {ids[i]})", cols.source)
        if not task.label.is_regression:
            bad = np.flatnonzero((labels < 0) | (labels >= task.label.num_labels))
            if bad.size:
                i = int(bad[0])
                raise UserError(f"{task.name} split {name}: label {int(labels[i])} at row {i} (idx {ids[i]}) "
                                f"is not one of 0..{task.label.num_labels - 1}", where=cols.source,
                                fix="labels must be the `datasets` GLUE class ids (-1 only in test splits)")
    if not text_a:
        raise UserError(f"{task.name} split {name} has no examples", where=cols.source)
    return SequenceSplit(name, cols.source, text_a, text_b, labels, ids)
