"""Streaming input records for `bertcli predict` (and `bertcli export --dev`).

    .txt      one example per line: {"text": line} (blank lines skipped)
    .jsonl    one JSON object per line
    .csv/.tsv a header row, then one example per row
    .parquet  one example per row, read in record batches

(.gz / .bz2 / .xz compressed text files too.) Records are read lazily, so memory does not grow
with the file; lines are read with the corpus reader's bounded readline.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterator

from bertcli.corpus_readers import ReadStats, _suffix, read_lines
from bertcli.errors import UserError
from bertcli.sections import CorpusConfig

FORMATS = {".txt": "txt", ".text": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "csv",
           ".parquet": "parquet"}


def input_format(path: Path) -> str:
    fmt = FORMATS.get(_suffix(Path(path))[0])
    if fmt is None:
        raise UserError(f"unsupported input format {Path(path).name!r}", where=str(path),
                        fix="give a .txt (one example per line), .jsonl, .csv/.tsv or .parquet file")
    return fmt


def check_input(path: Path) -> str:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"input file {path} does not exist", fix="give an existing .txt, .jsonl, .csv or .parquet file")
    return input_format(path)


def read_records(path: Path) -> Iterator[tuple[str, dict]]:
    """(where, record) for every example: `where` is "file:line" (or "file: row N")."""
    path = Path(path)
    fmt = check_input(path)
    cfg, stats = CorpusConfig(), ReadStats()
    if fmt == "txt":
        for lineno, line in read_lines(path, cfg, stats):
            if line.strip():
                yield f"{path}:{lineno}", {"text": line}
    elif fmt == "jsonl":
        for lineno, line in read_lines(path, cfg, stats):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"not a JSON object: {e.msg}", where=f"{path}:{lineno}",
                                fix="a .jsonl file holds one JSON object per line")
            if not isinstance(rec, dict):
                raise UserError("each line must be a JSON object", where=f"{path}:{lineno}")
            yield f"{path}:{lineno}", rec
    elif fmt == "csv":
        delimiter = "\t" if _suffix(path)[0] == ".tsv" else ","
        csv.field_size_limit(cfg.max_line_bytes)
        reader = csv.reader((line + "\n" for _, line in read_lines(path, cfg, stats, what="row")), delimiter=delimiter)
        try:
            header = next(reader, [])
            for row in reader:
                if row:
                    yield f"{path}:{reader.line_num}", dict(zip(header, row))
        except csv.Error as e:
            raise UserError(f"malformed CSV: {e}", where=f"{path}:{reader.line_num}")
    else:
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises ArrowInvalid / OSError for a file that is not Parquet
            raise UserError(f"not a readable Parquet file ({e})", where=str(path))
        n = 0
        for batch in pf.iter_batches(batch_size=1024):
            for rec in batch.to_pylist():
                n += 1
                yield f"{path}: row {n}", rec


def count_records(path: Path) -> int | None:
    """How many records a file holds (for the progress bar); a cheap pass over the lines."""
    fmt = check_input(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(path).metadata.num_rows
        except Exception:
            return None
    if fmt == "csv":
        return None  # quoted fields may span lines: counting needs the parser, the bar shows a count
    return sum(1 for _, line in read_lines(Path(path), CorpusConfig(), ReadStats()) if line.strip())


def field(rec: dict, names: tuple[str, ...], where: str, required: bool = True):
    """The first of `names` present in `rec` (None when absent and not required)."""
    for name in names:
        if name in rec and rec[name] is not None:
            return rec[name]
    if required:
        raise UserError(f"the record has none of the fields {', '.join(names)}", where=where,
                        fix=f"name the text field {names[0]} (found: {', '.join(map(str, rec)) or 'nothing'})")
    return None
