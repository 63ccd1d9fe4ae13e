"""Work done in the builder's worker processes, one shard at a time.

    tokenize_shard  corpus documents [lo, hi) -> token store files (store.py)
    pairs_shard     documents [lo, hi) x copies -> NSP / SOP rows, static masks
    packed_shard    packing-plan rows [lo, hi) x copies -> packed rows, static masks

Each writes its own file under the build's temporary directory and returns small counts, so
the parent never holds the data. Every random choice comes from a stream keyed by the
document (or plan row), the copy and the split (rng.py): the output does not depend on the
number of processes or on the shard size.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from bertcli.data import pairs, words
from bertcli.data.masking import MaskSpec, replace, select
from bertcli.data.rng import PACKED, PAIRS, KeyedRng
from bertcli.data.store import DocStore, TokenWriter
from bertcli.tokenization.load import load_tokenizer
from bertcli.tokenization.train import text_encoder

if TYPE_CHECKING:
    from bertcli.config.sections import DataConfig
    from bertcli.data.pairs import TokenDoc

SPLIT_IDS = {"train": 0, "validation": 1}


@dataclass
class Context:
    """What every worker needs (picklable; heavy objects are opened once per process)."""

    corpus_path: str
    tokenizer_path: str
    kind: str
    cfg: DataConfig
    seed: int
    cls_id: int
    sep_id: int
    spec: MaskSpec
    encode_batch: int = 2048  # sentences per tokenizers.encode_batch call


_CTX: Context | None = None
_CACHE: dict = {}
T = TypeVar("T")


def init_worker(ctx: Context | None) -> None:
    """Set (or, with None, drop) this process's context and cached tokenizer, corpus and maps.
    Pool workers inherit TOKENIZERS_PARALLELISM=false from the builder (one process per core
    already: tokenizers' own thread pool would oversubscribe)."""
    global _CTX
    _CTX = ctx
    _CACHE.clear()


def _context() -> Context:
    assert _CTX is not None, "init_worker gives each process its context first"
    return _CTX


def _cached(key: Hashable, make: Callable[[], T]) -> T:
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


# --------------------------------------------------------------------------------- tokenize
def tokenize_shard(task: tuple) -> dict:
    """(split, lo, hi, prefix) -> counts. Documents whose sentences all tokenize to nothing
    are dropped (the store only holds documents with at least one token)."""
    split, lo, hi, prefix = task
    ctx = _context()
    tok, specials, unk = _cached("tok", lambda: _load_tokenizer(ctx.tokenizer_path))
    markers = _cached("markers", lambda: words.start_marker_table(tok, ctx.kind))
    segment = _cached("segment", lambda: words.load_segmenter(ctx.cfg.word_segmenter))
    corpus = _cached("corpus", lambda: _load_corpus(ctx.corpus_path))
    docs = corpus[split].data.table.slice(lo, hi - lo).column("sentences").to_pylist()
    writer = TokenWriter(prefix)
    sents = [s for d in docs for s in d]
    owner = np.repeat(np.arange(len(docs)), [len(d) for d in docs])  # document of each sentence
    ids_parts, start_parts, lens_all = [], [], []
    for b in range(0, len(sents), ctx.encode_batch):
        batch = sents[b : b + ctx.encode_batch]
        encs = tok.encode_batch(batch, add_special_tokens=False)
        ids_l = [e.ids for e in encs]
        lens = np.fromiter((len(x) for x in ids_l), dtype=np.int64, count=len(encs))
        total = int(lens.sum())
        ids = np.fromiter(itertools.chain.from_iterable(ids_l), dtype=np.int64, count=total)
        ids[np.isin(ids, specials)] = unk     # a special piece matched in plain text (see _load_tokenizer)
        wid = np.fromiter(itertools.chain.from_iterable(e.word_ids for e in encs), dtype=np.int64, count=total)
        first = np.zeros(total, dtype=bool)
        first[(np.cumsum(lens) - lens)[lens > 0]] = True
        starts = first.copy()
        starts[1:] |= wid[1:] != wid[:-1]
        inside = ids < len(markers)
        starts[inside] |= markers[ids[inside]]
        if segment is not None:
            _apply_segmenter(starts, encs, batch, lens, markers, segment)
        ids_parts.append(ids.astype(np.int32))
        start_parts.append(starts.astype(np.int8))
        lens_all.append(lens)
    lens = np.concatenate(lens_all) if lens_all else np.zeros(0, np.int64)
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int32)
    starts = np.concatenate(start_parts) if start_parts else np.zeros(0, np.int8)
    writer.add_many(ids, starts, lens, owner)
    writer.flush()
    return {"documents_in": len(docs), "documents": writer.documents, "sentences": writer.sentences,
            "tokens": writer.tokens, "multi_sentence": writer.multi_sentence}


def _apply_segmenter(starts, encs, batch, lens, markers, segment) -> None:
    """Chinese whole words: recompute the starts of sentences with CJK text with the segmenter."""
    offset = 0
    for enc, text, n in zip(encs, batch, lens.tolist()):
        if n and words.has_cjk(text):
            starts[offset : offset + n] = words.word_starts(
                enc.ids, enc.word_ids, markers, text, enc.offsets, segment).astype(bool)
        offset += n


def _load_tokenizer(path: str):
    """(encoder for corpus text, special ids other than UNK, UNK id). The encoder keeps literal
    "[SEP]" or "</s>" in the text as text; a Unigram model can still match a special piece such as
    "<pad>" inside text, so the caller maps any special id left to UNK: corpus text never yields a
    separator, padding or mask token."""
    info = load_tokenizer(path)
    specials = np.array(sorted(info.special_ids - {info.unk_id}), dtype=np.int64)
    return text_encoder(info.tokenizer), specials, info.unk_id


def _load_corpus(path: str):
    import datasets

    return datasets.load_from_disk(path)


# ------------------------------------------------------------------------------------ rows
class RowWriter:
    """Rows -> one Arrow IPC stream file (what `datasets` memory-maps), in record batches.
    Static masks are selected per row by the caller and replaced here, once per batch."""

    def __init__(self, path: str, schema, spec: MaskSpec, flush_tokens: int = 1 << 20):
        import pyarrow as pa

        self.pa, self.schema, self.spec, self.flush_tokens = pa, schema, spec, flush_tokens
        self.sink = pa.OSFile(path, "wb")
        self.writer = pa.ipc.new_stream(self.sink, schema)
        self.names = set(schema.names)
        self.rows: list[tuple] = []  # (ids, types, label, positions, draws, starts)
        self.pending = 0
        self.stats = {"instances": 0, "tokens": 0, "masked": 0, "label_1": 0, "max_length": 0}

    def add(self, ids, types, label=None, positions=None, draws=None, starts=None) -> None:
        self.rows.append((ids, types, label, positions, draws, starts))
        n = len(ids)
        s = self.stats
        s["instances"] += 1
        s["tokens"] += n
        s["max_length"] = max(s["max_length"], n)
        s["masked"] += 0 if positions is None else len(positions)
        s["label_1"] += int(label or 0)
        self.pending += n
        if self.pending >= self.flush_tokens:
            self.flush()

    def _list(self, parts: list, dtype):
        pa = self.pa
        lens = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
        offsets = np.concatenate(([0], np.cumsum(lens)))
        flat = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat)), offsets

    def flush(self) -> None:
        if not self.rows:
            return
        pa = self.pa
        ids, types, labels, positions, draws, starts = zip(*self.rows)
        cols = {}
        flat_ids = np.concatenate(ids).astype(np.int32)
        lens = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        row_start = np.concatenate(([0], np.cumsum(lens)))
        if "masked_positions" in self.names:
            # one vectorized 80/10/10 pass over the batch (masking.replace)
            flat_pos = np.concatenate([p.astype(np.int64) + o for p, o in zip(positions, row_start)])
            masked = replace(flat_ids, flat_pos, np.concatenate(draws), self.spec)
            cols["masked_positions"], moff = self._list(list(positions), np.int32)
            cols["masked_ids"] = pa.ListArray.from_arrays(pa.array(moff.astype(np.int32)), pa.array(masked))
        cols["input_ids"] = pa.ListArray.from_arrays(pa.array(row_start.astype(np.int32)), pa.array(flat_ids))
        cols["token_type_ids"] = self._list(list(types), np.int8)[0]
        if "pair_label" in self.names:
            cols["pair_label"] = pa.array(np.asarray(labels, dtype=np.int8))
        if "word_starts" in self.names:
            cols["word_starts"] = self._list(list(starts), np.int8)[0]
        self.writer.write_batch(pa.RecordBatch.from_arrays([cols[n] for n in self.schema.names], schema=self.schema))
        self.rows = []
        self.pending = 0

    def close(self) -> dict:
        self.flush()
        self.writer.close()
        self.sink.close()
        return self.stats


def row_schema(objective: str, static: bool, word_starts: bool):
    import pyarrow as pa

    fields = [("input_ids", pa.list_(pa.int32())), ("token_type_ids", pa.list_(pa.int8()))]
    if objective != "none":
        fields.append(("pair_label", pa.int8()))
    if static:
        fields += [("masked_positions", pa.list_(pa.int32())), ("masked_ids", pa.list_(pa.int32()))]
    if word_starts:
        fields.append(("word_starts", pa.list_(pa.int8())))
    return pa.schema(fields)


def _emit(writer: RowWriter, ids, types, starts, label, rng, ctx: Context) -> None:
    positions = draws = None
    if "masked_positions" in writer.names:
        positions, draws = select(ids, rng, ctx.spec, starts)
    writer.add(ids, types, label, positions, draws, starts if "word_starts" in writer.names else None)


def pairs_shard(task: tuple) -> dict:
    """(split, lo, hi, copies, store prefixes, random-B store prefixes, out path) -> counts."""
    split, lo, hi, copies, prefixes, pool_prefixes, out = task
    ctx = _context()
    cfg = ctx.cfg
    store = _cached(("store", tuple(prefixes)), lambda: DocStore(prefixes))
    pool = store if pool_prefixes == prefixes else _cached(("store", tuple(pool_prefixes)),
                                                           lambda: DocStore(pool_prefixes))
    writer = RowWriter(out, _schema(ctx), ctx.spec)
    kr, sid = KeyedRng(), SPLIT_IDS[split]
    for d in range(lo, hi):
        doc = store[d]
        for copy in copies:
            rng = kr.seed(ctx.seed, PAIRS, sid, copy, d)
            if cfg.objective == "nsp":
                insts = pairs.nsp_instances(doc, _random_doc(pool, d if pool is store else -1),
                                            cfg.max_seq_length, cfg.short_seq_prob, rng)
            else:
                insts = pairs.sop_instances(doc, cfg.max_seq_length, cfg.short_seq_prob, rng)
            for inst in insts:
                ids, types, starts = pairs.pair_row(inst, ctx.cls_id, ctx.sep_id)
                _emit(writer, ids, types, starts, inst.label, rng, ctx)
    return writer.close()


def _random_doc(pool: DocStore, exclude: int) -> Callable[[np.random.Generator], TokenDoc]:
    """A function rng -> a document of `pool` drawn uniformly, never document `exclude`."""
    n = len(pool) - (exclude >= 0)

    def pick(rng: np.random.Generator) -> TokenDoc:
        j = int(rng.integers(0, n))
        return pool[j + (0 <= exclude <= j)]

    return pick


def packed_shard(task: tuple) -> dict:
    """(split, lo, hi, copies, store prefixes, plan path, out path) -> counts."""
    split, lo, hi, copies, prefixes, plan_path, out = task
    ctx = _context()
    store = _cached(("store", tuple(prefixes)), lambda: DocStore(prefixes))
    plan = np.load(plan_path, mmap_mode="r")
    writer = RowWriter(out, _schema(ctx), ctx.spec)
    kr, sid = KeyedRng(), SPLIT_IDS[split]
    for r in range(lo, hi):
        ids, starts = pairs.packed_row(plan[r], store.__getitem__, ctx.cls_id, ctx.sep_id)
        types = np.zeros(len(ids), dtype=np.int8)
        for copy in copies:
            _emit(writer, ids, types, starts, None, kr.seed(ctx.seed, PACKED, sid, copy, r), ctx)
    return writer.close()


def _schema(ctx: Context):
    cfg = ctx.cfg
    static = cfg.masking == "static"
    return row_schema(cfg.objective, static, not static and cfg.whole_word)
