"""The vector files of `bertcli features` and `bertcli embed`, read and written one way.

Input: .txt (one text per line), .csv, .tsv, .jsonl, .parquet (`--text-column`, `--id-column`;
ids default to the row number), streamed as (id, text) pairs. Output:
    .parquet   columns id (string), tokens (per-token rows only: list of strings) and the vector
               column (list of float32; per token a list of lists)
    .npy       float32 [rows, width]; beside it `<name>.ids.tsv`, one line per row (`id`, or
               `id<TAB>position<TAB>token` per token)
Both are written under temporary names while holding the output's lock and renamed when
complete; an error, Ctrl-C or SIGTERM removes the temporaries. The .npy header is written last,
in a slot reserved at the start, so rows stream out and the input never has to fit in memory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from bertcli.core.errors import UserError
from bertcli.core.fs import temporary_file
from bertcli.core.locks import run_lock
from bertcli.core.outputs import check_output_file, removing_on_signal
from bertcli.io import records, tables
from bertcli.io.text import LineOptions, check_encoding

NPY_HEADER = 128  # bytes reserved for the .npy header (magic, version, length, dict, padding)


# ------------------------------------------------------------------------------------ input
def iter_texts(path: Path, text_column: str, id_column: str | None,
               encoding: str | None = None) -> Iterator[tuple[str, str]]:
    """(id, text) pairs, streamed, read as predict and fine-tuning read them (bertcli.io)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"input file {path} does not exist", fix="give --input a .txt, .csv, .tsv, .jsonl or .parquet file")
    table = tables.open_table(path, LineOptions(encoding=check_encoding(encoding)))
    if tables.file_format(path) == "text":
        text_column, id_column = "text", None          # a .txt line is the text; its ids are line numbers
    if table.header is not None:      # a header: name a missing column at once
        names = table.names()
        for name in [text_column] + ([id_column] if id_column else []):
            if name not in names:
                raise UserError(f"no column {name!r}", where=table.header,
                                fix=f"the columns are: {', '.join(names)}; choose with --text-column / --id-column")
    return ((records.optional_text(rec, id_column, where, str(n)), records.text(rec, text_column, where, "--text-column"))
            for n, (where, rec) in enumerate(table.records()))


def batches(items: Iterator, size: int) -> Iterator[list]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ------------------------------------------------------------------------------------ output
def output_files(out: Path) -> list[Path]:
    """The files a vector file is: `out`, and for .npy its ids beside it."""
    out = Path(out)
    return [out, out.with_suffix(".ids.tsv")] if out.suffix == ".npy" else [out]


@contextlib.contextmanager
def writing_vectors(out: Path, input: Path, checkpoint: Path, force: bool, what: str, text_column: str,
                    id_column: str | None, encoding: str | None) -> Iterator[Iterator[tuple[str, str]]]:
    """The (id, text) records of `input`, for writing one vector file (`features`, `embed`): the
    output files checked before any work (.parquet or .npy, not an input, not inside the
    checkpoint, an existing one only with --force) and again holding their lock; Ctrl-C or SIGTERM
    remove the temporaries."""
    if out.suffix not in (".parquet", ".npy"):
        raise UserError(f"--out {out}: write .parquet or .npy", fix=f"e.g. --out {what}.parquet")

    def check() -> None:
        for path in output_files(out):
            check_output_file(path, force, [input], [checkpoint], "--out", f"the {what}")

    check()
    texts = iter_texts(input, text_column, id_column, encoding)      # the input's header checked before any work
    with run_lock(out), removing_on_signal(*[temporary_file(p) for p in output_files(out)]):
        check()                                        # again, holding the lock
        yield texts


class NpyWriter:
    """Rows of float32 appended to a .npy file whose header is written on close."""

    def __init__(self, path: Path, width: int):
        self.path, self.width, self.rows = path, width, 0
        self.tmp = temporary_file(path)
        self.f = open(self.tmp, "wb")
        self.f.write(b"\0" * NPY_HEADER)

    def write(self, array: np.ndarray) -> None:
        self.f.write(np.ascontiguousarray(array, dtype="<f4").tobytes())
        self.rows += len(array)

    def close(self) -> None:
        head = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({self.rows}, {self.width}), }}"
        head = head.ljust(NPY_HEADER - 10 - 1) + "\n"
        self.f.seek(0)
        self.f.write(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode("latin1"))
        self.f.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)


class NpyRows:
    """The .npy rows and the ids file beside it, one line per row."""

    def __init__(self, path: Path, width: int):
        self.npy = NpyWriter(path, width)
        self.ids_path = path.with_suffix(".ids.tsv")
        self.ids_tmp = temporary_file(self.ids_path)
        self.ids = open(self.ids_tmp, "w", encoding="utf-8")

    @property
    def rows(self) -> int:
        return self.npy.rows

    def write(self, ids: list[str], vectors: Sequence[np.ndarray] | np.ndarray,
              tokens: list[list[str]] | None = None) -> None:
        """vectors: [len(ids), width], or with `tokens` one [len(tokens[b]), width] per text."""
        if tokens is None:
            self.npy.write(np.asarray(vectors))
            self.ids.writelines(f"{i}\n" for i in ids)
            return
        for text_id, toks, rows in zip(ids, tokens, vectors):
            self.npy.write(rows)
            self.ids.writelines(f"{text_id}\t{p}\t{t}\n" for p, t in enumerate(toks))

    def close(self) -> None:
        self.npy.close()
        self.ids.close()
        os.replace(self.ids_tmp, self.ids_path)

    def abort(self) -> None:
        self.npy.abort()
        self.ids.close()
        self.ids_tmp.unlink(missing_ok=True)


class ParquetRows:
    """id (+ tokens) + vector rows appended to a parquet file under a temporary name."""

    def __init__(self, path: Path, column: str, per_token: bool = False):
        import pyarrow as pa
        import pyarrow.parquet as pq

        vector = pa.list_(pa.float32())
        fields = [("id", pa.string())] + ([("tokens", pa.list_(pa.string()))] if per_token else [])
        self.pa, self.path, self.tmp, self.column, self.rows = pa, path, temporary_file(path), column, 0
        self.schema = pa.schema(fields + [(column, pa.list_(vector) if per_token else vector)])
        self.w = pq.ParquetWriter(self.tmp, self.schema)

    def write(self, ids: list[str], vectors: Sequence[np.ndarray] | np.ndarray,
              tokens: list[list[str]] | None = None) -> None:
        """As NpyRows.write; a parquet row is one text (its tokens' vectors a list of lists)."""
        cols: dict[str, list] = {"id": ids}
        if tokens is not None:
            cols["tokens"] = tokens
            cols[self.column] = [np.asarray(v).tolist() for v in vectors]
        else:
            cols[self.column] = list(vectors)
        self.w.write_table(self.pa.table(cols, schema=self.schema))
        self.rows += len(ids)

    def close(self) -> None:
        self.w.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.w.close()
        self.tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def vector_writer(out: Path, width: int, column: str, per_token: bool = False) -> Iterator[NpyRows | ParquetRows]:
    """The writer of `out` (.npy with its ids, or .parquet): renamed into place when the block
    ends, its temporaries removed when it raises."""
    writer = NpyRows(out, width) if out.suffix == ".npy" else ParquetRows(out, column, per_token)
    try:
        yield writer
    except BaseException:
        writer.abort()
        raise
    writer.close()
