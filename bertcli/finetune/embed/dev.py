"""The dev set of `bertcli finetune embed`, scored after every epoch to choose the best one.

    a BEIR directory (corpus.jsonl, queries.jsonl, qrels/dev.tsv, else qrels/test.tsv)
        retrieval: nDCG@10 first (BEIR's main figure), then MRR@10, Recall@k, MAP@100, computed
        by `retrieval.evaluate_retrieval`, the code of `bertcli evaluate-embed`
    a file of scored pairs (text_column, text_pair_column, score_column; `score` when the block
        names none; STS-B's tsv as it is)
        STS: Spearman first (what STS benchmarks report), then Pearson, of the pairs' cosines,
        computed by `sts.evaluate_sts`

The engine embeds `texts` (each distinct text once) with the model in eval mode, through the
task's forward; `evaluate` scores those vectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertcli.finetune.embed.retrieval import Beir, evaluate_retrieval, read_beir
from bertcli.finetune.embed.sts import StsData, evaluate_sts, read_sts

COUNTS = ("queries", "documents", "pairs")   # sizes in the evaluators' results, not metrics


@dataclass
class DevSet:
    name: str
    source: str
    kind: str                          # retrieval | sts
    texts: list[str]                   # what to embed, each distinct text once
    data: Beir | StsData

    def __len__(self) -> int:
        return len(self.texts)

    def head(self, n: int) -> DevSet:
        return self

    def evaluate(self, vectors: np.ndarray) -> dict[str, float]:
        """vectors [len(texts), H] -> metrics, the main one first (nDCG@10 / Spearman)."""
        index = {t: i for i, t in enumerate(self.texts)}

        def encode(texts: list[str]) -> np.ndarray:
            return vectors[[index[t] for t in texts]]

        if isinstance(self.data, StsData):
            out = evaluate_sts(encode, self.data)
            return {"spearman": float(out["spearman"]), "pearson": float(out["pearson"])}
        return {k: float(v) for k, v in evaluate_retrieval(encode, self.data).items() if k not in COUNTS}


def is_beir(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "corpus.jsonl").is_file()


def read_dev(path: Path, block) -> DevSet:
    path = Path(path)
    if is_beir(path):
        split = "dev" if (path / "qrels" / "dev.tsv").is_file() else "test"
        beir = read_beir(path, split)
        return DevSet("dev", str(path), "retrieval", list(dict.fromkeys(beir.queries + beir.corpus)), beir)
    sts = read_sts(path, block.text_column, block.text_pair_column, block.score_column or "score")
    return DevSet("dev", str(path), "sts", list(dict.fromkeys(sts.a + sts.b)), sts)
