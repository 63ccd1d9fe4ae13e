"""STS evaluation: Pearson and Spearman correlation of cosine similarity with gold scores.

Input: an STS-B file (GLUE's dev.tsv / train.tsv layout: sentence1, sentence2, score, read by the
GLUE reader), or any table (csv / tsv / jsonl / parquet / save_to_disk) with the columns named by
`text`, `text_pair`, `score` (defaults; a table with sentence1 / sentence2 / score is read as
STS-B). Spearman is the Pearson correlation of the ranks, ties given their average rank (as
scipy.stats.spearmanr).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertcli.core.errors import UserError
from bertcli.finetune.classification.glue import get_task
from bertcli.finetune.classification.glue_data import read_tsv_split
from bertcli.io import records, tables
from bertcli.io.text import NO_ENCODING_FLAG


@dataclass
class StsData:
    a: list[str]
    b: list[str]
    scores: np.ndarray     # [N] float64 gold
    source: str


def read_sts(path: str | Path, text: str = "text", text_pair: str = "text_pair", score: str = "score") -> StsData:
    path = Path(path)
    table = tables.open_table(path, NO_ENCODING_FLAG, split=("validation", "dev", "test", "train"))
    names = table.names()
    if tables.file_format(path) == "tsv" and {"sentence1", "sentence2", "score"} <= set(names):
        split = read_tsv_split(path, get_task("stsb"), "dev", "dev")
        assert split.text_b is not None and split.labels is not None, "STS-B has pairs and scores"
        return StsData(split.text_a, split.text_b, split.labels.astype(np.float64), str(path))
    if {"sentence1", "sentence2", "score"} <= set(names) and text not in names:
        text, text_pair = "sentence1", "sentence2"
    a, b, gold = [], [], []
    for where, rec in table.records():
        a.append(records.text(rec, text, where, "--text-column"))
        b.append(records.text(rec, text_pair, where, "--pair-column"))
        gold.append(records.number(rec, score, where, "--score-column", "score",
                                   "every score is a finite number (e.g. STS-B's 0-5)"))
    if len(a) < 2:
        raise UserError(f"{path.name} has {len(a)} pair(s): a correlation needs at least 2", where=str(path))
    return StsData(a, b, np.array(gold, dtype=np.float64), str(path))


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties at their average rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, np.float64) - np.mean(x), np.asarray(y, np.float64) - np.mean(y)
    den = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / den) if den > 0 else float("nan")


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(_ranks(np.asarray(x, np.float64)), _ranks(np.asarray(y, np.float64)))


def cosine_rows(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """[N] cosine of each row pair."""
    u, v = u.astype(np.float64), v.astype(np.float64)
    return (u * v).sum(1) / np.maximum(np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1), 1e-12)


def evaluate_sts(encode: Callable[[list[str]], np.ndarray], data: StsData) -> dict:
    cos = cosine_rows(encode(data.a), encode(data.b))
    if np.ptp(data.scores) == 0:
        raise UserError("every gold score is the same: correlations are undefined", where=data.source)
    return {"pearson": round(pearson(cos, data.scores), 6), "spearman": round(spearman(cos, data.scores), 6),
            "pairs": len(data.a)}
