"""Read a GLUE task from the original TSV files or from the `datasets` layout into one format.

Layouts of a task folder (found as `<data-dir>/<CoLA|SST-2|...|cola|sst2|...>`, or `--data-dir`
itself when it is one task's folder):
    tsv           train.tsv, dev.tsv (MNLI: dev_matched.tsv, dev_mismatched.tsv), test.tsv, as the
                  GLUE download script leaves them. Read with quote processing OFF: a `"` in a
                  sentence is text, as in the files (csv's default quoting corrupts MNLI and QQP).
    save_to_disk  a `datasets.DatasetDict` written by `save_to_disk` (dataset_dict.json).
    parquet       the hub's parquet files: `<split>-00000-of-00001.parquet` (nyu-mll/glue layout).
    hub           `datasets.load_dataset(NAME, task)` (`--hub`; needs the network or the cache).
Every layout ends as a `TaskData` of `Split`s: texts, label ids (float scores for STS-B) and
the ids the submission files are keyed by.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from bertcli.errors import UserError, require_finite
from bertcli.finetune.classification.glue import AX, AX_FOLDER, AX_HUB_CONFIG, TASKS, TaskSpec, normalize



@dataclass
class Split:
    name: str                      # train, dev, matched, mismatched, test, ax
    source: str                    # file or dataset split, for messages and results.json
    text_a: list[str]
    text_b: list[str] | None
    labels: np.ndarray | None      # int64 label ids, float32 scores (STS-B), None for test sets
    ids: list[str]                 # the `index` written in submission files

    def __len__(self) -> int:
        return len(self.text_a)

    def head(self, n: int) -> "Split":
        """The first `n` examples (finetune.max_train_examples)."""
        return Split(self.name, self.source, self.text_a[:n], self.text_b[:n] if self.text_b is not None else None,
                     self.labels[:n] if self.labels is not None else None, self.ids[:n])


@dataclass
class TaskData:
    task: TaskSpec
    layout: str
    source: str
    train: Split
    dev: list[Split]
    test: list[Split] = field(default_factory=list)   # absent test files: no submission
    skipped: dict[str, int] = field(default_factory=dict)  # malformed TSV rows left out, by file


# ------------------------------------------------------------------------------ finding tasks
def detect_layout(folder: Path) -> str | None:
    """tsv, save_to_disk or parquet, by the files in `folder`; None when it holds none of them."""
    if (folder / "train.tsv").is_file():
        return "tsv"
    if (folder / "dataset_dict.json").is_file():
        return "save_to_disk"
    if any(folder.glob("*.parquet")) or any(folder.glob("data/*.parquet")):
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


def tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each non-blank line, split on tabs only: no quote processing,
    no splitting on a stray carriage return; a byte-order mark at the start is dropped."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"not valid UTF-8 ({e.reason} at byte {e.start})", where=f"{path}:{lineno}")
            if lineno == 1:
                line = line.lstrip("\ufeff")
            line = line.rstrip("\n").rstrip("\r")
            if line.strip():
                yield lineno, line.split("\t")


def read_tsv_split(path: Path, task: TaskSpec, name: str, kind: str, skipped: dict | None = None) -> Split:
    """One GLUE TSV file. `kind` is train, dev or test (test files carry ids instead of labels).
    With a `skipped` dict, rows with the wrong number of fields are counted there, not fatal."""
    rows = tsv_rows(path)
    if task.headerless_train and kind != "test":      # CoLA train/dev: source, label, *, sentence
        a_col, label_col = task.headerless_train
        b_col = id_col = None
        width = 4
    else:
        first = next(rows, None)
        if first is None:
            raise UserError(f"{path.name} is empty", where=str(path))
        header = [h.strip() for h in first[1]]
        wanted = [task.tsv_a] + ([task.tsv_b] if task.tsv_b else [])
        wanted += [task.tsv_test_id] if kind == "test" else [task.tsv_label]
        missing = [c for c in wanted if c not in header]
        if missing:
            raise UserError(
                f"{path.name} lacks the column(s) {', '.join(missing)} of {task.glue_name}'s "
                f"{'test' if kind == 'test' else 'train/dev'} files",
                where=f"{path}:1",
                fix=f"expected a tab-separated header with {', '.join(wanted)}; found: {', '.join(header)}",
            )
        a_col = header.index(task.tsv_a)
        b_col = header.index(task.tsv_b) if task.tsv_b else None
        label_col = None if kind == "test" else header.index(task.tsv_label)
        id_col = header.index(task.tsv_test_id) if kind == "test" else None
        width = len(header)

    label_of = _label_parser(task, path)
    text_a, text_b, labels, ids = [], [] if b_col is not None else None, [], []
    for lineno, fields in rows:
        if len(fields) != width:
            if skipped is not None:
                skipped[str(path)] = skipped.get(str(path), 0) + 1
                continue
            raise UserError(
                f"{len(fields)} tab-separated fields where {task.glue_name}'s {path.name} has {width}",
                where=f"{path}:{lineno}",
                fix="keep the GLUE file's column layout (a tab inside a sentence or a cut line breaks it), "
                    "or --set finetune.bad_rows=skip to leave such rows out",
            )
        text_a.append(fields[a_col])
        if b_col is not None:
            text_b.append(fields[b_col])
        if label_col is not None:
            labels.append(label_of(fields[label_col].strip(), lineno))
        ids.append(fields[id_col].strip() if id_col is not None else str(len(ids)))
    if not text_a:
        raise UserError(f"{path.name} has no examples", where=str(path))
    return Split(name, str(path), text_a, text_b, _label_array(task, labels) if label_col is not None else None, ids)


def _label_parser(task: TaskSpec, path: Path) -> Callable[[str, int], float | int]:
    if task.is_regression:
        def score(text: str, lineno: int) -> float:
            try:
                value = float(text)
            except ValueError:
                raise UserError(f"{task.glue_name} score {text!r} is not a number", where=f"{path}:{lineno}")
            return require_finite(value, f"{task.glue_name} score {text!r}", f"{path}:{lineno}")
        return score
    index = {label: i for i, label in enumerate(task.labels)}

    def label(text: str, lineno: int) -> int:
        if text not in index:
            raise UserError(f"unknown {task.glue_name} label {text!r}", where=f"{path}:{lineno}",
                            fix=f"labels of {task.glue_name}: {', '.join(task.labels)}")
        return index[text]
    return label


def _label_array(task: TaskSpec, labels: Sequence) -> np.ndarray:
    return np.asarray(labels, dtype=np.float32 if task.is_regression else np.int64)


# ------------------------------------------------------------------------------ datasets layouts
class _Columns:
    """What a `datasets.Dataset` and a pyarrow Table have in common here."""

    def __init__(self, names: list[str], get: Callable[[str], list], source: str):
        self.names, self.get, self.source = names, get, source


def _load_datasets(task: TaskSpec, folder: Path, layout: str) -> TaskData:
    if layout == "save_to_disk":
        import datasets

        dd = datasets.load_from_disk(str(folder))
        if not isinstance(dd, datasets.DatasetDict):
            raise UserError(f"{folder} holds one dataset, not a DatasetDict with train/validation splits",
                            where=str(folder), fix="save the whole DatasetDict (load_dataset(...).save_to_disk(dir))")
        splits = {k: _dataset_columns(v, f"{folder}[{k}]") for k, v in dd.items()}
    else:
        splits = _parquet_splits(folder)
    ax = None
    if task.name == "mnli":
        ax_dir = folder.parent / AX_HUB_CONFIG
        if ax_dir.is_dir() and detect_layout(ax_dir) is not None:
            ax = _load_ax(ax_dir)
    return _from_columns(task, splits, layout, str(folder), ax)


def _load_ax(folder: Path) -> _Columns | None:
    if (folder / "dataset_dict.json").is_file():
        import datasets

        dd = datasets.load_from_disk(str(folder))
        return _dataset_columns(dd["test"], f"{folder}[test]") if "test" in dd else None
    return _parquet_splits(folder).get("test")


def _dataset_columns(ds, source: str) -> _Columns:
    return _Columns(list(ds.column_names), lambda name: list(ds[name]), source)


def _parquet_splits(folder: Path) -> dict[str, _Columns]:
    """`<split>-00000-of-00001.parquet` (or `<split>.parquet`) files, by split."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files: dict[str, list[Path]] = {}
    for path in sorted(list(folder.glob("*.parquet")) + list(folder.glob("data/*.parquet"))):
        split = path.stem.split("-")[0]
        files.setdefault(split, []).append(path)
    out = {}
    for split, paths in files.items():
        try:
            table = pa.concat_tables([pq.read_table(p) for p in paths])
        except (pa.ArrowInvalid, OSError) as e:
            raise UserError(f"cannot read parquet split {split}: {e}", where=str(paths[0]))
        out[split] = _Columns(table.column_names, lambda name, t=table: t.column(name).to_pylist(),
                              f"{folder}/{split}-*.parquet")
    return out


def _load_hub(task: TaskSpec, name: str) -> TaskData:
    import datasets

    def load(config: str):
        from bertcli.hub import load_hub

        return load_hub(name, config, where=f"--hub {name}", local_hint="download the data and pass --data-dir")

    dd = load(task.name)
    splits = {k: _dataset_columns(v, f"{name}/{task.name}[{k}]") for k, v in dd.items()}
    ax = None
    if task.name == "mnli":
        try:
            ax = _dataset_columns(datasets.load_dataset(name, AX_HUB_CONFIG)["test"], f"{name}/ax[test]")
        except Exception:  # the diagnostic set is optional
            ax = None
    return _from_columns(task, splits, "hub", f"{name}/{task.name}", ax)


def _from_columns(task: TaskSpec, splits: dict[str, _Columns], layout: str, source: str,
                  ax: _Columns | None) -> TaskData:
    def need(split: str) -> _Columns:
        if split not in splits:
            raise UserError(f"{task.name}: split {split!r} is missing", where=source,
                            fix=f"found splits: {', '.join(sorted(splits)) or 'none'}")
        return splits[split]

    train = _columns_split(need("train"), task, "train", labeled=True)
    dev = [_columns_split(need(s.hub_split), task, s.name, labeled=True) for s in task.dev]
    test = [_columns_split(splits[s.hub_split], task, s.name, labeled=False) for s in task.test if s.hub_split in splits]
    if ax is not None:
        test.append(_columns_split(ax, task, AX.name, labeled=False, ax=True))
    return TaskData(task, layout, source, train, dev, test)


def _columns_split(cols: _Columns, task: TaskSpec, name: str, labeled: bool, ax: bool = False) -> Split:
    a, b = ("premise", "hypothesis") if ax else (task.hub_a, task.hub_b)
    wanted = [a] + ([b] if b else []) + (["label"] if labeled else [])
    missing = [c for c in wanted if c not in cols.names]
    if missing:
        raise UserError(f"{task.name} split {name}: column(s) {', '.join(missing)} missing", where=cols.source,
                        fix=f"expected the `datasets` GLUE columns {', '.join(wanted)} (+ idx); found: "
                            f"{', '.join(cols.names)}")
    text_a = [str(x) for x in cols.get(a)]
    text_b = [str(x) for x in cols.get(b)] if b else None
    ids = [str(x) for x in cols.get("idx")] if "idx" in cols.names else [str(i) for i in range(len(text_a))]
    labels = None
    if labeled:
        labels = _label_array(task, cols.get("label"))
        for i in np.flatnonzero(~np.isfinite(labels))[:1] if task.is_regression else ():
            require_finite(float(labels[i]), f"{task.name} split {name}: the label at row {i} (idx {ids[i]})", cols.source)
        if not task.is_regression:
            bad = np.flatnonzero((labels < 0) | (labels >= task.num_labels))
            if bad.size:
                i = int(bad[0])
                raise UserError(f"{task.name} split {name}: label {int(labels[i])} at row {i} (idx {ids[i]}) "
                                f"is not one of 0..{task.num_labels - 1}", where=cols.source,
                                fix="labels must be the `datasets` GLUE class ids (-1 only in test splits)")
    if not text_a:
        raise UserError(f"{task.name} split {name} has no examples", where=cols.source)
    return Split(name, cols.source, text_a, text_b, labels, ids)
