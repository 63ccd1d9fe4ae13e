"""Files and datasets to records: the one table reader of every command.

A `Table` is the records of one file or dataset split, streamed, each with where it came from
(`file:line` for line-based files, `source row i` for parquet and datasets, 0-based as
`ds[i]`). Formats, by suffix (compressed .gz / .bz2 / .xz text files too):

    .txt        one record per non-blank line: {"text": line}
    .csv        a header row, then rows; csv's standard quoting (RFC 4180: a field in double
                quotes may hold commas, newlines and doubled quotes "")
    .tsv        a header row, then rows split on tabs ONLY, with no quote processing: a `"` is
                text, as in the GLUE files (csv's quoting corrupts MNLI and QQP sentences, and
                `"quoted" start` would lose its quotes). This is the one TSV rule: training,
                `predict`, `features` and `export --dev` all read a .tsv this way.
    .jsonl      one JSON object per line (a key given twice in one object is refused)
    .json       JSON lines, an array of objects, or an object holding one list of objects
    .parquet    one record per row, read in record batches
    directory   a `datasets` save_to_disk directory (one Dataset, or a DatasetDict's split)
    hub name    `datasets.load_dataset(name)` (through bertcli.core.hub)

Rules shared by every format: a header naming one column twice is refused; a row with another
number of fields than the header is an error (or skipped and counted, when the caller asks);
lines are bounded by `max_line_bytes` and csv's field limit is raised to the same bound; bytes
that do not decode are one message (see text.py). Values are returned as the file holds them;
records.py checks them.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bertcli.core.errors import UserError
from bertcli.core.hub import load_hub
from bertcli.io.records import json_type
from bertcli.io.text import LineOptions, ReadStats, read_all, read_lines, suffix

FORMATS = {".txt": "text", ".text": "text", ".raw": "text", ".jsonl": "jsonl", ".ndjson": "jsonl",
           ".json": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "tsv"}
JSON_MAX_BYTES = 256 * 1024 * 1024  # .json documents are parsed whole; bigger ones must be .jsonl
BATCH = 1024
NOT_A_DICT_FIX = "save the whole DatasetDict (load_dataset(...).save_to_disk(dir))"


def file_format(path: Path) -> str | None:
    """text, csv, tsv, jsonl, json or parquet by the file's suffix; None for another suffix."""
    return FORMATS.get(suffix(Path(path))[0])


@dataclass
class Table:
    """The records of one file or dataset split. `names()` are its columns (for JSON: the keys of
    its first record); `records()` streams (where, record); `column(name)` reads one whole
    column (fast for parquet and datasets). `header`: where the column names are declared for
    the whole table (`file:1` of a csv, the parquet schema); None for JSON, whose records each
    name their own fields (a missing field is then reported at its record's line)."""

    source: str
    _names: Callable[[], list[str]]
    _records: Callable[[], Iterator[tuple[str, dict]]]
    _column: Callable[[str], list] | None = None
    header: str | None = None

    def names(self) -> list[str]:
        return self._names()

    def records(self) -> Iterator[tuple[str, dict]]:
        return self._records()

    def column(self, name: str) -> list:
        if self._column is not None:
            return self._column(name)
        return [rec.get(name) for _, rec in self.records()]

    def wheres(self) -> list[str]:
        return [w for w, _ in self.records()]


def _refuse_duplicates(names: list[str], where: str) -> list[str]:
    seen: dict[str, int] = {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
    dup = [n for n, k in seen.items() if k > 1]
    if dup:
        raise UserError(f"the column name {dup[0]!r} appears {seen[dup[0]]} times in the header", where=where,
                        fix="give every column its own name (which of the two was meant cannot be guessed)")
    return names


# ------------------------------------------------------------------------------ delimited
def delimited_rows(path: Path, fmt: str, opts: LineOptions = LineOptions(),
                   stats: ReadStats | None = None) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each non-blank row of a .csv (standard quoting; the line number
    is the row's last line) or .tsv (split on tabs only, no quote processing)."""
    path = Path(path)
    lines = read_lines(path, opts, stats, what="row")
    if fmt == "tsv":
        for lineno, line in lines:
            if line.strip():
                yield lineno, line.split("\t")
        return
    csv.field_size_limit(max(opts.max_line_bytes, 128 * 1024))
    last = [0]

    def feed() -> Iterator[str]:
        for lineno, line in lines:
            last[0] = lineno
            yield line + "\n"          # csv needs the newlines back to parse quoted fields that span lines

    reader = csv.reader(feed())
    try:
        for row in reader:
            if row:
                yield last[0], row
    except csv.Error as e:
        big = "larger than field limit" in str(e)
        raise UserError(f"a field longer than corpus.max_line_bytes ({opts.max_line_bytes:,} bytes)" if big
                        else f"malformed CSV: {e}", where=f"{path}:{last[0]}",
                        fix=opts.limit_fix if big else
                        "check the quoting on that line: a field that starts with a double quote must end "
                        "with one (a literal quote inside it is doubled: \"\")") from None


def _delimited_table(path: Path, fmt: str, opts: LineOptions, stats: ReadStats | None,
                     header: list[str] | None, on_bad_width: Callable[[str], None] | None,
                     width_fix: str | None) -> Table:
    source = str(path)
    cache: dict[str, list[str]] = {}

    def head() -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
        rows = delimited_rows(path, fmt, opts, stats)
        if header is not None:
            return list(header), rows
        first = next(rows, None)
        if first is None:
            raise UserError(f"{path.name} is empty", where=source, fix="the first line names the columns")
        return _refuse_duplicates([h.strip() for h in first[1]], f"{path}:{first[0]}"), rows

    def names() -> list[str]:
        if "names" not in cache:
            cache["names"] = head()[0]
        return cache["names"]

    def records() -> Iterator[tuple[str, dict]]:
        cols, rows = head()
        for lineno, fields in rows:
            where = f"{path}:{lineno}"
            if len(fields) != len(cols):
                if on_bad_width is not None:
                    on_bad_width(where)
                    continue
                sep = "tab-separated " if fmt == "tsv" else ""
                raise UserError(f"{len(fields)} {sep}fields where the header has {len(cols)}", where=where,
                                fix="every row needs one value per column (" +
                                    ("a tab inside a text or a cut line breaks a .tsv row; .tsv has no quoting"
                                     if fmt == "tsv" else "quote a text holding commas: \"a, b\"") + ")" +
                                    (f"; {width_fix}" if width_fix else ""))
            yield where, dict(zip(cols, fields))

    return Table(source, names, records, header=f"{path}:1")


# ------------------------------------------------------------------------------ json
def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


class _DuplicateKey(Exception):
    pass


def parse_json(text: str, where: str, fix: str):
    """json.loads with one message for bad JSON and for a key given twice in one object."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        line = f" (line {e.lineno}, column {e.colno})" if "\n" in text.strip() else f" (column {e.colno})"
        raise UserError(f"not valid JSON: {e.msg}{line}", where=where, fix=fix) from None
    except _DuplicateKey as e:
        raise UserError(f"the key {e.args[0]!r} is given twice in one JSON object", where=where,
                        fix="give every field once (which value was meant cannot be guessed)") from None


def _object(rec, where: str) -> dict:
    if not isinstance(rec, dict):
        raise UserError(f"expected a JSON object, got {json_type(rec)}", where=where,
                        fix='each record is one object, e.g. {"text": "...", "label": "..."}')
    return rec


def _jsonl_records(path: Path, opts: LineOptions, stats: ReadStats | None) -> Iterator[tuple[str, dict]]:
    for lineno, line in read_lines(path, opts, stats, what="record"):
        if line.strip():
            where = f"{path}:{lineno}"
            yield where, _object(parse_json(line, where, "a .jsonl file holds one JSON object per line"), where)


def _is_json_lines(path: Path, opts: LineOptions, key: str | None) -> bool:
    """Whether a .json file is JSON lines: its first line is a whole object holding `key` (no key
    given: and a second line follows, so a one-line document is not taken for one record)."""
    lines = read_lines(path, opts, what="record")
    try:
        rec = json.loads(next(lines, (0, ""))[1])
        more = key is not None or any(line.strip() for _, line in lines)
    except (json.JSONDecodeError, UserError):
        return False
    finally:
        lines.close()
    return isinstance(rec, dict) and (key is None or key in rec) and more


def _json_records(path: Path, opts: LineOptions, stats: ReadStats | None, key: str | None):
    if _is_json_lines(path, opts, key):
        yield from _jsonl_records(path, opts, stats)
        return
    obj = parse_json(read_all(path, opts, JSON_MAX_BYTES, stats), str(path),
                     "a .json file holds an array of objects (or give JSON lines as .jsonl)")
    if isinstance(obj, dict):
        lists = [v for v in obj.values() if isinstance(v, list)]
        obj = lists[0] if len(lists) == 1 and (key is None or key not in obj) else [obj]
    if not isinstance(obj, list):
        obj = [obj]
    for i, rec in enumerate(obj):
        where = f"{path}: record {i}"
        yield where, _object(rec, where)


def _first_keys(records: Callable[[], Iterator[tuple[str, dict]]]) -> Callable[[], list[str]]:
    def names() -> list[str]:
        first = next(records(), None)
        return list(first[1]) if first else []
    return names


# ------------------------------------------------------------------------------ parquet
def _parquet_table(paths: list[Path], source: str) -> Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        files = [pq.ParquetFile(p) for p in paths]
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError for a file that is not Parquet
        raise UserError(f"not a readable Parquet file ({e})", where=str(paths[0])) from None
    names = _refuse_duplicates(list(files[0].schema_arrow.names), str(paths[0]))

    def records() -> Iterator[tuple[str, dict]]:
        n = 0
        for f in files:
            for batch in f.iter_batches(batch_size=BATCH):
                for rec in batch.to_pylist():
                    yield f"{source} row {n}", rec
                    n += 1

    def column(name: str) -> list:
        try:
            return pa.concat_tables([f.read(columns=[name]) for f in files]).column(0).to_pylist()
        except (pa.ArrowInvalid, KeyError, OSError) as e:
            raise UserError(f"cannot read column {name!r}: {e}", where=source) from None

    return Table(source, lambda: names, records, column, header=source)


def parquet_splits(folder: Path) -> dict[str, Table]:
    """`<split>-00000-of-00001.parquet` (or `<split>.parquet`) files of a folder (or its data/),
    by split: the hub's layout."""
    files: dict[str, list[Path]] = {}
    for path in sorted(list(folder.glob("*.parquet")) + list(folder.glob("data/*.parquet"))):
        files.setdefault(path.stem.split("-")[0], []).append(path)
    return {split: _parquet_table(paths, f"{folder}/{split}-*.parquet") for split, paths in files.items()}


def has_parquet(folder: Path) -> bool:
    return any(folder.glob("*.parquet")) or any(folder.glob("data/*.parquet"))


# ------------------------------------------------------------------------------ datasets
def dataset_table(ds, source: str) -> Table:
    """A `datasets.Dataset` as a Table."""
    names = list(ds.column_names)

    def records() -> Iterator[tuple[str, dict]]:
        n = 0
        for batch in ds.iter(batch_size=BATCH):
            for i in range(len(batch[names[0]]) if names else 0):
                yield f"{source} row {n}", {k: batch[k][i] for k in names}
                n += 1

    return Table(source, lambda: names, records, lambda name: list(ds[name]), header=source)


def load_saved(folder: Path):
    """What `save_to_disk` wrote in `folder`: a Dataset or a DatasetDict."""
    import datasets

    try:
        return datasets.load_from_disk(str(folder))
    except FileNotFoundError:
        raise UserError(f"{folder} is not a datasets save_to_disk directory", where=str(folder),
                        fix="give a file (.csv, .tsv, .jsonl, .parquet) or a directory written by save_to_disk") from None


def dict_splits(dd, source: str) -> dict[str, Table]:
    """The splits of a DatasetDict as Tables; one Dataset is refused (a task needs its splits)."""
    import datasets

    if not isinstance(dd, datasets.DatasetDict):
        raise UserError(f"{source} holds one dataset, not a DatasetDict with train/validation splits",
                        where=source, fix=NOT_A_DICT_FIX)
    return {k: dataset_table(v, f"{source}[{k}]") for k, v in dd.items()}


def saved_splits(folder: Path) -> dict[str, Table]:
    return dict_splits(load_saved(folder), str(folder))


def hub_splits(name: str, config: str | None = None, local_hint: str = "use local files") -> dict[str, Table]:
    return dict_splits(load_hub(name, config, where=f"--hub {name}", local_hint=local_hint),
                       f"{name}/{config}" if config else name)


def hub_table(name: str, config: str | None, split: str, where: str, local_hint: str) -> Table:
    return dataset_table(load_hub(name, config, split=split, where=where, local_hint=local_hint),
                         f"{name} ({split})")


def pick_split(splits: dict[str, Table], wanted: tuple[str, ...], source: str, what: str = "") -> Table:
    """The first of `wanted` present in `splits`."""
    for w in wanted:
        if w in splits:
            return splits[w]
    raise UserError(f"{what}split {wanted[0]!r} is missing" + (f" (also looked for {', '.join(wanted[1:])})"
                                                             if len(wanted) > 1 else ""),
                    where=source, fix=f"found splits: {', '.join(sorted(splits)) or 'none'}")


def saved_table(folder: Path, wanted: tuple[str, ...]) -> Table:
    """One Dataset, or the first of `wanted` of a DatasetDict."""
    import datasets

    ds = load_saved(folder)
    if isinstance(ds, datasets.DatasetDict):
        return pick_split(dict_splits(ds, str(folder)), wanted, str(folder))
    return dataset_table(ds, str(folder))


# ------------------------------------------------------------------------------ entry
def open_table(path: Path, opts: LineOptions = LineOptions(), stats: ReadStats | None = None,
               fmt: str | None = None, key: str | None = None, header: list[str] | None = None,
               on_bad_width: Callable[[str], None] | None = None,
               split: tuple[str, ...] = ("train",), width_fix: str | None = None) -> Table:
    """The Table of a file (by its suffix, or `fmt`) or of a save_to_disk directory (`split`: the
    split names looked for in a DatasetDict). `key`: the field a .json file's records must hold
    (tells JSON lines from one document); `header`: the column names of a headerless .csv/.tsv;
    `on_bad_width(where)`: called for (and skips) a row with the wrong number of fields, else
    `width_fix` is added to the message's fix."""
    path = Path(path)
    if path.is_dir():
        return saved_table(path, split)
    if not path.is_file():
        raise UserError(f"no such file: {path} (looked from {Path.cwd()})", where=str(path),
                        fix="check the path (relative paths are read from the current directory)")
    fmt = fmt or file_format(path)
    if fmt in ("csv", "tsv"):
        return _delimited_table(path, fmt, opts, stats, header, on_bad_width, width_fix)
    if fmt == "parquet":
        return _parquet_table([path], str(path))
    if fmt in ("jsonl", "json"):
        recs = (lambda: _jsonl_records(path, opts, stats)) if fmt == "jsonl" else \
            (lambda: _json_records(path, opts, stats, key))
        return Table(str(path), _first_keys(recs), recs)
    if fmt == "text":
        def lines() -> Iterator[tuple[str, dict]]:
            for lineno, line in read_lines(path, opts, stats):
                if line.strip():
                    yield f"{path}:{lineno}", {"text": line}
        return Table(str(path), lambda: ["text"], lines, header=str(path))
    raise UserError(f"{path.name}: unknown file kind {suffix(path)[0] or '(no suffix)'}", where=str(path),
                    fix="give a .txt, .csv, .tsv, .jsonl, .json or .parquet file, or a datasets save_to_disk "
                        "directory")
