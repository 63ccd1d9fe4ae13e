"""`bertcli embed`: the embedding of every text of a file, batched and streamed.

Input as `bertcli features` reads it (.txt, .csv, .tsv, .jsonl, .parquet; --text-column,
--id-column, ids default to the row number). Output:
    .parquet   columns id (string), embedding (list of float32)
    .npy       float32 [texts, dim]; beside it `<name>.ids.tsv`, one id per row
Written under temporary names while holding the output's lock and renamed when complete (the
writers and checks of bertcli.serve.vectors); texts are read, encoded and written a chunk at
a time, so the input never has to fit in memory.
"""

from __future__ import annotations

from pathlib import Path

from bertcli.core import console
from bertcli.serve.evaluate_embed import Embedder, describe
from bertcli.serve.vectors import batches, vector_writer, writing_vectors


def embed_file(checkpoint: Path, input: Path, out: Path, text_column: str = "text", id_column: str | None = None,
               pooling: str | None = None, normalize: bool | None = None, max_seq_length: int | None = None,
               batch_size: int = 64, device: str = "auto", encoding: str | None = None, force: bool = False,
               threads: int | None = None) -> dict:
    """Write the embeddings of every text of `input` to `out`; returns a summary."""
    out, checkpoint = Path(out), Path(checkpoint)
    with writing_vectors(out, input, checkpoint, force, "embeddings", text_column, id_column, encoding) as texts:
        e = Embedder.load(checkpoint, pooling, normalize, max_seq_length, batch_size, device, threads)
        n = 0
        with vector_writer(out, e.dim, "embedding") as writer, \
                console.progress(f"embeddings of {Path(input).name}", total=None) as bar:
            for chunk in batches(texts, batch_size * 16):          # sorted by length within a chunk
                writer.write([i for i, _ in chunk], e.encode([t for _, t in chunk]))
                n += len(chunk)
                bar.advance(len(chunk))
    summary = {"texts": n, **describe(e), "out": str(out)}
    console.summary(f"embeddings: {out}", [(k, v) for k, v in summary.items() if k not in ("out", "checkpoint")])
    return summary
