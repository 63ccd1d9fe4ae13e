"""Streaming input records for `bertcli predict` (and `bertcli export --dev`), read by the one
table reader (bertcli.io.tables), so that predict reads a file exactly as fine-tuning does:

    .txt      one example per line: {"text": line} (blank lines skipped)
    .jsonl    one JSON object per line (.json: JSON lines or an array of objects)
    .csv      a header row, then one example per row (standard csv quoting)
    .tsv      a header row, then rows split on tabs only, no quote processing (GLUE's rule)
    .parquet  one example per row, read in record batches

(.gz / .bz2 / .xz compressed text files too.) Records are read lazily, so memory does not grow
with the file; lines are bounded (corpus.max_line_bytes' default) and decoded as UTF-8 (a BOM
is honoured, UTF-16 too), or in the `--encoding` asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from bertcli.core.errors import UserError
from bertcli.io import records, tables
from bertcli.io.text import LineOptions, check_encoding, read_lines

FORMATS = ("text", "jsonl", "json", "csv", "tsv", "parquet")


def input_format(path: Path) -> str:
    fmt = tables.file_format(Path(path))
    if fmt not in FORMATS:
        raise UserError(f"unsupported input format {Path(path).name!r}", where=str(path),
                        fix="give a .txt (one example per line), .jsonl, .csv/.tsv or .parquet file")
    return fmt


def check_input(path: Path, encoding: str | None = None) -> str:
    path = Path(path)
    check_encoding(encoding)
    if not path.is_file():
        raise UserError(f"input file {path} does not exist", fix="give an existing .txt, .jsonl, .csv or .parquet file")
    return input_format(path)


def read_records(path: Path, encoding: str | None = None) -> Iterator[tuple[str, dict]]:
    """(where, record) for every example: `where` is "file:line" (or "file row N")."""
    path = Path(path)
    check_input(path, encoding)
    yield from tables.open_table(path, LineOptions(encoding=encoding)).records()


def count_records(path: Path, encoding: str | None = None) -> int | None:
    """How many records a file holds (for the progress bar); a cheap pass over the lines."""
    fmt = check_input(path, encoding)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(path).metadata.num_rows
        except Exception:
            return None
    if fmt in ("csv", "json"):
        # quoted fields may span lines: the parser counts them (a pass without tokenizing, so the
        # progress has a total and an ETA)
        return sum(1 for _ in tables.open_table(Path(path), LineOptions(encoding=encoding)).records())
    n = sum(1 for _, line in read_lines(Path(path), LineOptions(encoding=encoding)) if line.strip())
    return n - 1 if fmt == "tsv" and n else n


def field(rec: dict, names: tuple[str, ...], where: str, required: bool = True):
    """The first of `names` present in `rec` (None when absent and not required)."""
    for name in names:
        if name in rec and rec[name] is not None:
            return records.text(rec, name, where)
    if required:
        raise UserError(f"the record has none of the fields {', '.join(names)}", where=where,
                        fix=f"name the text field {names[0]} (found: {', '.join(map(str, rec)) or 'nothing'})")
    return None
