"""Embeddings of any checkpoint, and `bertcli evaluate-embed` (retrieval on a BEIR directory, STS).

`Embedder` loads what bertcli reads -- a bertcli checkpoint, a transformers directory, a
sentence-transformers directory (bertcli's or MiniLM-style: its Pooling and Normalize are read,
its max_seq_length too) -- and encodes texts: tokenized as `features` does (special tokens
included, truncated to max_seq_length), length-sorted so each batch pads little, and run through
the encoder, whose dense layers skip padding rows. Pooling comes from the directory, else from
flags, default mean (bertcli.model.pooling).

The same evaluation serves a raw checkpoint and a fine-tuned one, so the figures show what
fine-tuning bought over mean-pooled raw features. Training calls `evaluate_retrieval` /
`evaluate_sts` with an Embedder built around its model in memory (`Embedder.from_model`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.core.machine import use_threads
from bertcli.finetune.embed.retrieval import evaluate_retrieval, read_beir
from bertcli.finetune.embed.sts import evaluate_sts, read_sts
from bertcli.model.finite import require_finite_outputs
from bertcli.model.pooling import Pooling, parse_mode
from bertcli.model.sentence import Source, resolve
from bertcli.tasks.embed import load_encoder
from bertcli.tasks.featurizer import truncating
from bertcli.tokenization.load import load_tokenizer


class Embedder:
    """texts -> [N, H] float32 embeddings."""

    def __init__(self, encoder, tokenizer, pooling: Pooling, max_seq_length: int, batch_size: int = 64,
                 device=None, source: Source | None = None):
        """`encoder`: a bertcli Encoder (model.encoder); `tokenizer`: a TokenizerInfo."""
        self.encoder, self.info, self.pooling = encoder, tokenizer, pooling
        self.max_seq_length, self.batch_size, self.source = max_seq_length, batch_size, source
        self.device = device if device is not None else next(encoder.parameters()).device
        self.tokenizer = truncating(tokenizer.tokenizer, max_seq_length)
        self.zero_types = encoder.config.type_vocab_size < 2

    @classmethod
    def load(cls, checkpoint: str | Path, pooling: str | None = None, normalize: bool | None = None,
             max_seq_length: int | None = None, batch_size: int = 64, device: str = "auto",
             threads: int | None = None) -> Embedder:
        """`threads` None: the cores other jobs leave free (bertcli.core.machine)."""
        from bertcli.train.precision import resolve_device

        if batch_size < 1:
            raise UserError(f"--batch-size {batch_size} must be at least 1")
        src = resolve(checkpoint, pooling, normalize, max_seq_length)
        dev = resolve_device(device, where="--device")
        use_threads(threads, "--threads", dev)
        encoder = load_encoder(src.encoder_dir).to(dev).eval()
        return cls(encoder, load_tokenizer(src.encoder_dir), src.pooling, src.max_seq_length, batch_size, dev, src)

    @classmethod
    def from_model(cls, model, tokenizer, pooling: Pooling, max_seq_length: int, batch_size: int = 64) -> Embedder:
        """Around a model in memory (fine-tuning's dev evaluation): `model.encoder` is used as it
        is (call model.eval() first; the caller restores train mode)."""
        encoder = model.encoder
        encoder.config = model.config
        return cls(encoder, tokenizer, pooling, max_seq_length, batch_size)

    @property
    def dim(self) -> int:
        return self.encoder.config.hidden_size

    def _batch(self, ids_list: list[list[int]], types_list: list[list[int]]):
        """[B, T] ids, mask, token types, padded to the longest of the batch."""
        import torch

        T = max(len(x) for x in ids_list)
        ids = torch.full((len(ids_list), T), self.info.pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids_list), T), dtype=torch.long)
        types = torch.zeros((len(ids_list), T), dtype=torch.long)
        for b, (x, t) in enumerate(zip(ids_list, types_list)):
            ids[b, :len(x)] = torch.tensor(x)
            mask[b, :len(x)] = 1
            if not self.zero_types:
                types[b, :len(x)] = torch.tensor(t)
        return ids.to(self.device), mask.to(self.device), types.to(self.device)

    def encode(self, texts: list[str]) -> np.ndarray:
        """[len(texts), H] float32, in the order of `texts`. Batches are length-sorted (longest
        first, so a memory problem shows at once), so padding is short."""
        import torch

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encs = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(encs)), key=lambda i: -len(encs[i].ids))
        with torch.no_grad():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start:start + self.batch_size]
                ids, mask, types = self._batch([encs[i].ids for i in chunk], [encs[i].type_ids for i in chunk])
                hidden = self.encoder(ids, mask, types).padded()                 # [B, T, H]
                vec = self.pooling(hidden.float(), mask)                           # [B, H]
                if self.source is not None:      # serving; a model in training is checked before it is saved
                    require_finite_outputs(vec, self.source.checkpoint, "embeddings")
                out[chunk] = vec.cpu().numpy()
        return out

    def encode_stream(self, texts: Iterable[str], chunk: int | None = None) -> Iterator[np.ndarray]:
        """Embeddings of a stream of texts, `chunk` texts at a time (sorted within each chunk)."""
        chunk = chunk or self.batch_size * 16
        buf: list[str] = []
        for t in texts:
            buf.append(t)
            if len(buf) == chunk:
                yield self.encode(buf)
                buf = []
        if buf:
            yield self.encode(buf)


def describe(e: Embedder) -> dict:
    """The pooling and source of an Embedder, for results."""
    d = {"pooling": e.pooling.mode, "normalize": e.pooling.normalize, "dim": e.dim,
         "max_seq_length": e.max_seq_length}
    if e.source is not None:
        d.update(checkpoint=str(e.source.checkpoint), sentence_transformers=e.source.sentence_dir)
    return d


# ------------------------------------------------------------------------------ evaluate-embed
def evaluate_embed(checkpoint: str | Path, beir: str | Path | None = None, split: str = "test",
                   sts: str | Path | None = None, pooling: str | None = None, normalize: bool | None = None,
                   max_seq_length: int | None = None, batch_size: int = 64, device: str = "auto",
                   sts_columns: tuple[str, str, str] = ("text", "text_pair", "score"),
                   threads: int | None = None) -> dict:
    """`bertcli evaluate-embed`: retrieval figures on a BEIR directory and/or STS correlations.
    The inputs are read and checked before the model is loaded."""
    if beir is None and sts is None:
        raise UserError("nothing to evaluate", fix="give --beir DIR (retrieval) and/or --sts FILE")
    if pooling:
        parse_mode(pooling)                                 # a bad flag before any reading
    if split not in ("dev", "test", "train"):
        raise UserError(f"--split {split!r} is not one of dev, test, train")
    beir_data = read_beir(beir, split) if beir is not None else None
    sts_data = read_sts(sts, *sts_columns) if sts is not None else None
    e = Embedder.load(checkpoint, pooling, normalize, max_seq_length, batch_size, device, threads)
    result: dict = {"model": describe(e)}
    if beir_data is not None:
        console.log(f"retrieval: encoding {len(beir_data.queries):,} queries and {len(beir_data.corpus):,} documents "
                    f"({e.pooling.mode} pooling{', normalized' if e.pooling.normalize else ''})")
        result["retrieval"] = {"data": str(beir), "split": split, **evaluate_retrieval(e.encode, beir_data)}
    if sts_data is not None:
        result["sts"] = {"data": str(sts), **evaluate_sts(e.encode, sts_data)}
    return result


def render(result: dict, as_json: bool = False) -> None:
    if as_json:
        console.out.print(jsonout.dumps(result, indent=2), markup=False)
        return
    m = result["model"]
    console.summary("embedding model", [(k, v) for k, v in m.items()])
    if "retrieval" in result:
        r = result["retrieval"]
        console.summary(f"retrieval: {r['data']} ({r['split']}, {r['queries']} queries, {r['documents']} documents)",
                        [(k, f"{v:.4f}") for k, v in r.items() if "@" in k])
    if "sts" in result:
        s = result["sts"]
        console.summary(f"STS: {s['data']} ({s['pairs']} pairs)",
                        [("pearson", f"{s['pearson']:.4f}"), ("spearman", f"{s['spearman']:.4f}")])
