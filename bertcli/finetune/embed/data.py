"""Training examples of `bertcli finetune embed`, read through the table reader classify uses
(csv / tsv / jsonl / parquet / save_to_disk; a .txt file is one `text` record per line).

Three kinds, chosen by the finetune.embed block (the command's flags):
    pairs       anchor_column, positive_column, and any negative_columns (triplets, or several
                hard negatives per anchor)                      -> in-batch negatives
    scored      text_column, text_pair_column, score_column     -> CoSENT
    simcse      unsupervised: text_column, each sentence its own positive

Every distinct text is stored once (`texts`); an example holds text ids, so two equal texts have
one id (the loss's duplicate mask compares ids) and are tokenized once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bertcli.core.errors import UserError
from bertcli.finetune.classification.classify import _need_column, read_table
from bertcli.io import records
from bertcli.io.tables import Table
from bertcli.io.text import LineOptions

KINDS = ("pairs", "scored", "simcse")


@dataclass
class EmbedSplit:
    """Examples of one file: text ids into `texts` (int64 arrays of length n)."""

    name: str
    source: str
    kind: str                          # pairs | scored | simcse
    texts: list[str]                   # every distinct text, once
    anchor: np.ndarray                 # [n] anchors (scored: text_a; simcse: the sentence)
    positive: np.ndarray               # [n] positives (scored: text_b; simcse: = anchor)
    negatives: np.ndarray              # [n, k] hard negatives (k = 0 without)
    scores: np.ndarray | None = None   # [n] float32 gold scores (scored)

    def __len__(self) -> int:
        return len(self.anchor)

    def head(self, n: int) -> EmbedSplit:
        """The first `n` examples (finetune.max_train_examples); `texts` stays whole."""
        return replace(self, anchor=self.anchor[:n], positive=self.positive[:n], negatives=self.negatives[:n],
                       scores=None if self.scores is None else self.scores[:n])


def kind_of(block) -> str:
    if block.unsupervised:
        if block.score_column is not None or block.negative_columns:
            raise UserError("--unsupervised trains on plain sentences: it takes no --score-column or "
                            "--negative-column", fix="drop --unsupervised, or the score / negative columns")
        return "simcse"
    return "scored" if block.score_column is not None else "pairs"


def negative_columns(values: list[str] | None) -> list[str]:
    """--negative-column values, each possibly a comma list, as one list of names."""
    return [n.strip() for v in values or [] for n in v.split(",") if n.strip()]


def _columns(block, kind: str) -> list[tuple[str, str]]:
    """(column, flag word) the file must have."""
    if kind == "simcse":
        return [(block.text_column, "text")]
    if kind == "scored":
        return [(block.text_column, "text"), (block.text_pair_column, "text-pair"), (block.score_column, "score")]
    return [(block.anchor_column, "anchor"), (block.positive_column, "positive")] + \
        [(n, "negative") for n in block.negative_columns]


def read_examples(table: Table, name: str, block, kind: str) -> EmbedSplit:
    """Every record of `table` as an example of `kind`, each value checked."""
    columns = _columns(block, kind)
    for column, what in columns:
        _need_column(table, column, what)
    ids: dict[str, int] = {}
    texts: list[str] = []

    def text_id(rec: dict, column: str, what: str, where: str) -> int:
        t = records.text(rec, column, where, f"--{what}-column")
        if t not in ids:
            ids[t] = len(texts)
            texts.append(t)
        return ids[t]

    rows: list[list[int]] = []
    scores: list[float] = []
    for where, rec in table.records():
        if kind == "scored":
            rows.append([text_id(rec, c, w, where) for c, w in columns[:2]])
            scores.append(records.number(rec, block.score_column, where, "--score-column", "score",
                                         "every --score-column value is a finite number (e.g. 0-1 or 0-5)"))
        else:
            rows.append([text_id(rec, c, w, where) for c, w in columns])
    if len(rows) < 2:
        raise UserError(f"{Path(table.source).name} has {len(rows)} example{'s' if len(rows) != 1 else ''}: "
                        "contrastive training needs at least 2", where=table.source,
                        fix="give more rows after the header")
    m = np.asarray(rows, dtype=np.int64)                                   # [n, columns]
    if kind == "simcse":
        return EmbedSplit(name, table.source, kind, texts, m[:, 0], m[:, 0], np.zeros((len(m), 0), np.int64))
    if kind == "scored":
        return EmbedSplit(name, table.source, kind, texts, m[:, 0], m[:, 1], np.zeros((len(m), 0), np.int64),
                          np.asarray(scores, dtype=np.float32))
    return EmbedSplit(name, table.source, kind, texts, m[:, 0], m[:, 1], m[:, 2:])


def read_train(path: Path, block, opts: LineOptions) -> EmbedSplit:
    return read_examples(read_table(Path(path), "train", opts), "train", block, kind_of(block))
