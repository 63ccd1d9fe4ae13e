"""The dev set of `bertcli finetune embed`, scored after every epoch to choose the best one.

    a BEIR directory (corpus.jsonl, queries.jsonl, qrels/dev.tsv, else qrels/test.tsv)
        retrieval: nDCG@10 first (BEIR's main figure), then MRR@10, Recall@k, MAP@100, computed
        by `retrieval.evaluate_retrieval`, the code of `bertcli evaluate-embed`
    a file of scored pairs (text_column, text_pair_column, score_column; `score` when the block
        names none)
        STS: Spearman first (what STS benchmarks report), then Pearson, of the pairs' cosines

The engine embeds `texts` (each distinct text once) with the model in eval mode, through the
task's forward; `evaluate` scores those vectors.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertcli.finetune.classification.classify import read_table
from bertcli.finetune.classification.metrics import pearson, spearman
from bertcli.finetune.embed.data import EmbedSplit, read_examples
from bertcli.io.text import LineOptions


@dataclass
class DevSet:
    name: str
    source: str
    kind: str                          # retrieval | sts
    texts: list[str]                   # what to embed, each distinct text once
    beir: object | None = None         # retrieval.Beir
    pairs: EmbedSplit | None = None    # sts: text ids into `texts`, gold scores

    def __len__(self) -> int:
        return len(self.texts)

    def head(self, n: int) -> DevSet:
        return self

    def evaluate(self, vectors: np.ndarray) -> dict[str, float]:
        """vectors [len(texts), H] -> metrics, the main one first."""
        if self.kind == "sts":
            assert self.pairs is not None
            a = vectors[self.pairs.anchor]
            b = vectors[self.pairs.positive]
            cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
            gold = self.pairs.scores
            return {"spearman": spearman(cos, gold), "pearson": pearson(cos, gold)}
        from bertcli.finetune.embed.retrieval import evaluate_retrieval

        index = {t: i for i, t in enumerate(self.texts)}
        out = evaluate_retrieval(lambda texts: vectors[[index[t] for t in texts]], self.beir)
        return {k: float(v) for k, v in out.items() if k not in ("queries", "documents")}


def is_beir(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "corpus.jsonl").is_file()


def read_dev(path: Path, block, opts: LineOptions) -> DevSet:
    path = Path(path)
    if is_beir(path):
        from bertcli.finetune.embed.retrieval import read_beir

        split = "dev" if (path / "qrels" / "dev.tsv").is_file() else "test"
        beir = read_beir(path, split)
        texts = list(dict.fromkeys(beir.queries + beir.corpus))
        return DevSet("dev", str(path), "retrieval", texts, beir=beir)
    scored = dataclasses.replace(block, score_column=block.score_column or "score", unsupervised=False)
    pairs = read_examples(read_table(path, "dev", opts), "dev", scored, "scored")
    return DevSet("dev", pairs.source, "sts", pairs.texts, pairs=pairs)
