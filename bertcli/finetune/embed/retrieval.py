"""Retrieval evaluation on a BEIR-layout directory: exact search and the BEIR figures.

Layout (BEIR's GenericDataLoader):
    corpus.jsonl       {"_id": ..., "title": ..., "text": ...}   a document is title + " " + text
    queries.jsonl      {"_id": ..., "text": ...}
    qrels/SPLIT.tsv    query-id <TAB> corpus-id <TAB> score, with a header row
Only queries named in the qrels are searched. A qrels line naming a query or document that the
files do not hold is an error at its line.

Search is exact: cosine similarity (the embeddings L2-normalized), corpus encoded and scored a
chunk at a time against all queries with one matrix product, keeping a running top-k per query,
so no more than one chunk of the corpus is in memory next to the top-k. Ties in score are broken
by corpus order (the document earlier in corpus.jsonl ranks first); pytrec_eval breaks them by
document id, so figures may differ from it only where two scores tie exactly.

Metrics, per query then averaged over the queries with at least one relevant document (qrels
score > 0), with pytrec_eval's (trec_eval's) definitions as BEIR reports them:
    nDCG@k     graded relevance, linear gain: DCG = sum_{i<=k} rel_i / log2(i + 1), divided by the
               DCG of the ideal ranking of the query's judged documents
    MRR@k      1 / rank of the first relevant document in the top k (0 when none)
    Recall@k   relevant documents in the top k / relevant documents
    MAP@k      sum over relevant documents at rank i <= k of precision@i, / relevant documents
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertcli.core.errors import UserError
from bertcli.io import records, tables
from bertcli.io.text import NO_ENCODING_FLAG

TOP_K = 100
QUERY_BLOCK = 2048      # queries scored against a chunk at once
CUTOFFS = {"ndcg": (10,), "mrr": (10,), "recall": (1, 10, 100), "map": (100,)}
MAIN = "ndcg@10"


@dataclass
class Beir:
    corpus_ids: list[str]
    corpus: list[str]                         # title + " " + text
    query_ids: list[str]                      # those in the qrels, in queries.jsonl order
    queries: list[str]
    qrels: dict[str, dict[str, int]]          # query id -> {doc id: graded relevance}
    source: str


def _need(path: Path, what: str) -> Path:
    if not path.is_file():
        raise UserError(f"no {path.name} ({what}) in the BEIR directory {path.parent}", where=str(path),
                        fix="a BEIR directory holds corpus.jsonl, queries.jsonl and qrels/{dev,test}.tsv")
    return path


def _jsonl(path: Path, fields: tuple[str, ...]) -> tuple[list[str], list[dict]]:
    ids, recs, seen = [], [], set()
    for where, rec in tables.open_table(path, NO_ENCODING_FLAG, fmt="jsonl").records():
        key = records.optional_text(rec, "_id", where, "")
        if key in seen:
            raise UserError(f"_id {key!r} appears twice", where=where, fix="every record needs its own _id")
        seen.add(key)
        ids.append(key)
        recs.append({f: records.text(rec, f, where) if f in rec or f == "text" else "" for f in fields})
    if not ids:
        raise UserError(f"{path.name} holds no records", where=str(path))
    return ids, recs


def read_qrels(path: Path, query_ids: set[str], doc_ids: set[str]) -> dict[str, dict[str, int]]:
    """query id -> {doc id: score}; ids checked against the queries and the corpus."""
    qrels: dict[str, dict[str, int]] = {}
    table = tables.open_table(path, NO_ENCODING_FLAG, fmt="tsv")
    names = table.names()
    if len(names) != 3:
        raise UserError(f"the qrels header has {len(names)} columns: {', '.join(names)}", where=f"{path}:1",
                        fix="query-id<TAB>corpus-id<TAB>score")
    q_col, d_col, s_col = names
    for where, rec in table.records():
        q, d, s = rec[q_col].strip(), rec[d_col].strip(), rec[s_col].strip()
        if q not in query_ids:
            raise UserError(f"query id {q!r} is not in queries.jsonl", where=where,
                            fix="qrels must name queries of queries.jsonl (or remove this line)")
        if d not in doc_ids:
            raise UserError(f"corpus id {d!r} is not in corpus.jsonl", where=where,
                            fix="qrels must name documents of corpus.jsonl (or remove this line)")
        try:
            score = int(s)
        except ValueError:
            raise UserError(f"score {s!r} is not an integer", where=where, fix="graded relevance: 0, 1, 2, ...")
        qrels.setdefault(q, {})[d] = score
    if not qrels:
        raise UserError(f"{path.name} holds no judgements", where=str(path))
    return qrels


def read_beir(directory: str | Path, split: str = "test") -> Beir:
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"BEIR directory {directory} does not exist",
                        fix="give --beir a folder with corpus.jsonl, queries.jsonl and qrels/")
    doc_ids, docs = _jsonl(_need(directory / "corpus.jsonl", "the documents"), ("title", "text"))
    q_ids, qs = _jsonl(_need(directory / "queries.jsonl", "the queries"), ("text",))
    qrels = read_qrels(_need(directory / "qrels" / f"{split}.tsv", f"the {split} judgements"), set(q_ids), set(doc_ids))
    keep = [i for i, q in enumerate(q_ids) if q in qrels]
    return Beir(doc_ids, [(d["title"] + " " + d["text"]).strip() for d in docs],
                [q_ids[i] for i in keep], [qs[i]["text"] for i in keep], qrels, str(directory))


# ------------------------------------------------------------------------------------ search
def normalized(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def search(queries: np.ndarray, corpus_chunks, k: int = TOP_K) -> tuple[np.ndarray, np.ndarray]:
    """queries [Q, H]; corpus_chunks yields [n, H] blocks in corpus order -> (indices [Q, k'],
    scores [Q, k']) of the k best documents per query by cosine, best first, ties by corpus order
    (k' = min(k, corpus size))."""
    import torch

    q = torch.from_numpy(normalized(queries.astype(np.float32)))
    blocks = [slice(i, i + QUERY_BLOCK) for i in range(0, len(q), QUERY_BLOCK)]   # bounds [queries, n] in memory
    best_s = [torch.empty((len(q[b]), 0)) for b in blocks]
    best_i = [torch.empty((len(q[b]), 0), dtype=torch.long) for b in blocks]
    offset = 0
    for chunk in corpus_chunks:
        d = torch.from_numpy(normalized(chunk.astype(np.float32)))
        for j, b in enumerate(blocks):
            s = q[b] @ d.T                                              # [q, n]
            pos = _chunk_top(s, k)                                      # [q, k''] ascending positions
            s, idx = torch.cat([best_s[j], s.gather(1, pos)], 1), torch.cat([best_i[j], pos + offset], 1)
            # the running candidates come first and each chunk's in corpus order, so a stable sort
            # keeps the earlier document ahead on ties
            order = torch.sort(s, dim=1, descending=True, stable=True).indices[:, :k]
            best_s[j], best_i[j] = s.gather(1, order), idx.gather(1, order)
        offset += len(d)
    if not blocks:
        return np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
    return torch.cat(best_i).numpy(), torch.cat(best_s).numpy()


def _chunk_top(s, k: int):
    """[Q, min(k, n)] positions of each row's k best scores of s [Q, n], in ascending order; where
    scores tie across the k-th place, the earliest positions (topk alone would pick any)."""
    import torch

    kk = min(k, s.shape[1])
    values, pos = torch.topk(s, kk, dim=1)                              # a partial sort: cheap
    pos = pos.sort(dim=1).values
    tied = ((s >= values[:, -1:]).sum(1) > kk).nonzero().squeeze(1)     # rows with a tie across the cut
    if len(tied):
        full = torch.sort(s[tied], dim=1, descending=True, stable=True).indices[:, :kk]
        pos[tied] = full.sort(dim=1).values
    return pos


# ------------------------------------------------------------------------------------ metrics
def query_metrics(ranking: list[str], rels: dict[str, int]) -> dict[str, float]:
    """The metrics of one query: `ranking` doc ids best first, `rels` its judgements."""
    relevant = {d for d, r in rels.items() if r > 0}
    out: dict[str, float] = {}
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)
    for k in CUTOFFS["ndcg"]:
        dcg = sum(max(rels.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(ranking[:k]))
        idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal[:k]))
        out[f"ndcg@{k}"] = dcg / idcg if idcg > 0 else 0.0
    for k in CUTOFFS["mrr"]:
        first = next((i for i, d in enumerate(ranking[:k]) if d in relevant), None)
        out[f"mrr@{k}"] = 0.0 if first is None else 1.0 / (first + 1)
    for k in CUTOFFS["recall"]:
        out[f"recall@{k}"] = len(relevant.intersection(ranking[:k])) / len(relevant)
    for k in CUTOFFS["map"]:
        hits, total = 0, 0.0
        for i, d in enumerate(ranking[:k]):
            if d in relevant:
                hits += 1
                total += hits / (i + 1)
        out[f"map@{k}"] = total / len(relevant)
    return out


def metrics(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """Mean of each metric over the queries of `qrels` with a relevant document (a query
    without a ranking scores 0)."""
    judged = [q for q, rels in qrels.items() if any(r > 0 for r in rels.values())]
    if not judged:
        raise UserError("no query has a relevant document (every qrels score is 0 or less)",
                        fix="relevant documents have a qrels score of 1 or more")
    per = [query_metrics(rankings.get(q, []), qrels[q]) for q in judged]
    return {name: sum(p[name] for p in per) / len(per) for name in per[0]}


def evaluate_retrieval(encode: Callable[[list[str]], np.ndarray], data: Beir, chunk: int = 8192,
                       k: int = TOP_K) -> dict:
    """Encode, search and score; `encode(texts) -> [N, H]` (an Embedder's encode)."""
    q = encode(data.queries)
    chunks = (encode(data.corpus[i:i + chunk]) for i in range(0, len(data.corpus), chunk))
    idx, _ = search(q, chunks, k)
    rankings = {qid: [data.corpus_ids[j] for j in row] for qid, row in zip(data.query_ids, idx)}
    out = {name: round(v, 6) for name, v in metrics(rankings, data.qrels).items()}
    return {**out, "queries": len(data.query_ids), "documents": len(data.corpus)}
