"""`bertcli embed`: the embedding of every text of a file, batched and streamed.

Input as `bertcli features` reads it (.txt, .csv, .tsv, .jsonl, .parquet; --text-column,
--id-column, ids default to the row number). Output:
    .parquet   columns id (string), embedding (list of float32)
    .npy       float32 [texts, dim]; beside it `<name>.ids.tsv`, one id per row
Written under temporary names while holding the output's lock and renamed when complete (the
writers and checks of bertcli.serve.features); texts are read, encoded and written a chunk at
a time, so the input never has to fit in memory.
"""

from __future__ import annotations

import os
from pathlib import Path

from bertcli.core import console
from bertcli.core.fs import temporary_file
from bertcli.serve.evaluate_embed import Embedder, describe
from bertcli.serve.features import NpyWriter, batches, writing_vectors


class _ParquetWriter:
    """id + embedding rows appended to a parquet file under a temporary name."""

    def __init__(self, path: Path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.pa, self.path, self.tmp = pa, path, temporary_file(path)
        self.schema = pa.schema([("id", pa.string()), ("embedding", pa.list_(pa.float32()))])
        self.w = pq.ParquetWriter(self.tmp, self.schema)

    def write(self, ids: list[str], vectors) -> None:
        self.w.write_table(self.pa.table({"id": ids, "embedding": list(vectors)}, schema=self.schema))

    def close(self) -> None:
        self.w.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.w.close()
        self.tmp.unlink(missing_ok=True)


class _NpyIds:
    """The .npy rows and the ids file beside it."""

    def __init__(self, path: Path, width: int):
        self.npy = NpyWriter(path, width)
        self.ids_path = path.with_suffix(".ids.tsv")
        self.ids_tmp = temporary_file(self.ids_path)
        self.ids = open(self.ids_tmp, "w", encoding="utf-8")

    def write(self, ids: list[str], vectors) -> None:
        self.npy.write(vectors)
        self.ids.writelines(f"{i}\n" for i in ids)

    def close(self) -> None:
        self.npy.close()
        self.ids.close()
        os.replace(self.ids_tmp, self.ids_path)

    def abort(self) -> None:
        self.npy.abort()
        self.ids.close()
        self.ids_tmp.unlink(missing_ok=True)


def embed_file(checkpoint: Path, input: Path, out: Path, text_column: str = "text", id_column: str | None = None,
               pooling: str | None = None, normalize: bool | None = None, max_seq_length: int | None = None,
               batch_size: int = 64, device: str = "auto", encoding: str | None = None, force: bool = False,
               threads: int | None = None) -> dict:
    """Write the embeddings of every text of `input` to `out`; returns a summary."""
    out, checkpoint = Path(out), Path(checkpoint)
    with writing_vectors(out, input, checkpoint, force, "embeddings", text_column, id_column, encoding) as texts:
        e = Embedder.load(checkpoint, pooling, normalize, max_seq_length, batch_size, device, threads)
        writer = _NpyIds(out, e.dim) if out.suffix == ".npy" else _ParquetWriter(out)
        n = 0
        try:
            with console.progress(f"embeddings of {Path(input).name}", total=None) as bar:
                for chunk in batches(texts, batch_size * 16):          # sorted by length within a chunk
                    writer.write([i for i, _ in chunk], e.encode([t for _, t in chunk]))
                    n += len(chunk)
                    bar.advance(len(chunk))
        except BaseException:
            writer.abort()
            raise
        writer.close()
    summary = {"texts": n, **describe(e), "out": str(out)}
    console.summary(f"embeddings: {out}", [(k, v) for k, v in summary.items() if k not in ("out", "checkpoint")])
    return summary
