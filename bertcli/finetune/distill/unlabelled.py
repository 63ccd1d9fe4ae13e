"""`bertcli distill --unlabelled F`: examples that only the teacher labels (TinyBERT's point: much of
a small student's score comes from the teacher's outputs on extra data).

    add_unlabelled(task, path, recipe)   reads `path` with the task's own rules and appends its
                                         examples to the training split; returns their number

The examples go after the labelled ones, and `task.data.facts["unlabelled"]` counts them: the
teacher's hard loss reads the labelled count from it and leaves the rest out (`Teacher.gold`).
What each task reads:

    classify   the training file's layout and columns (csv / tsv / jsonl / parquet), no label
    ner        one sentence per line, words separated by white space (a character-level training
               split, such as People's Daily: one word per character); or jsonl with "tokens".
               A CoNLL file (token and tag columns) is refused: its tags are labels.
    squad      the official SQuAD JSON (answers, if any, are not read), or jsonl with "question"
               and "context" (and an optional "id")
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.finetune.classification.classify import _read_rows, read_table
from bertcli.finetune.classification.glue_data import Split
from bertcli.finetune.tagging.data import TagSplit
from bertcli.io import records, tables
from bertcli.io.text import LineOptions, check_encoding, read_lines
from bertcli.tasks.qa.data import SquadSplit, _Builder, read_json

TAG = re.compile(r"^(O|[BIESLU]-\S+)$")      # a CoNLL tag column's values


def add_unlabelled(task, path: Path, recipe) -> int:
    """Append the examples of `path` to `task.data.train`, unlabelled; their number."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"the unlabelled file {path} does not exist", where="--unlabelled", fix="give an existing file")
    opts = LineOptions(max_line_bytes=recipe.corpus.max_line_bytes,
                       encoding=check_encoding(getattr(task, "encoding", None)))
    train = task.data.train
    merged: Split | TagSplit | SquadSplit
    try:
        if task.head == "classification":
            merged, n = _classify(task, train, path, opts, recipe)
        elif task.head == "token":
            merged, n = _ner(train, path, opts)
        else:
            merged, n = _squad(train, path, opts)
    except UserError as e:
        if e.what.startswith("--unlabelled"):
            raise
        raise UserError(f"--unlabelled: {e.what}", where=e.where, fix=e.fix) from None
    if n == 0:
        raise UserError(f"the unlabelled file {path} holds no examples", where=str(path),
                        fix="give a file with at least one text, or leave --unlabelled out")
    task.data = dataclasses.replace(task.data, train=merged,
                                    facts={**task.data.facts, "unlabelled": n, "unlabelled_source": str(path)})
    console.log(f"distill: {n:,} unlabelled examples from {path} join the {len(train):,} labelled ones")
    return n


def _classify(task, train: Split, path: Path, opts: LineOptions, recipe) -> tuple[Split, int]:
    if task.spec.is_regression:
        raise UserError("--unlabelled is for classification, not regression", where="--unlabelled",
                        fix="leave --unlabelled out")
    text, pair, ids, _, _ = _read_rows(read_table(path, "train", opts), recipe.finetune.classify, labelled=False)
    assert train.labels is not None, "a training split is labelled"
    merged = Split(train.name, train.source, train.text_a + text,
                   None if train.text_b is None else train.text_b + (pair or []),
                   np.concatenate([train.labels, np.full(len(text), -100, dtype=train.labels.dtype)]),
                   train.ids + [f"unlabelled-{i}" for i in ids])
    return merged, len(text)


def _ner(train: TagSplit, path: Path, opts: LineOptions) -> tuple[TagSplit, int]:
    """Sentences as word lists; their placeholder tags (`O`) are never a target (Teacher.gold)."""
    sentences, wheres = [], []
    if tables.file_format(path) == "jsonl":
        for where, row in tables.open_table(path, opts, fmt="jsonl").records():
            words = records.string_list(row, "tokens", where)
            if words:
                sentences.append(words)
                wheres.append(where)
    else:
        chars = all(len(w) == 1 for words in train.tokens for w in words)
        lines = [(n, line) for n, line in read_lines(path, opts) if line.strip()]
        tagged = sum(len(f) >= 2 and TAG.match(f[-1]) is not None for f in (line.split() for _, line in lines))
        if lines and tagged > len(lines) / 2:
            raise UserError(f"{path} looks like a CoNLL file (a tag in the last column of {tagged:,} of its "
                            f"{len(lines):,} lines): its tags are labels", where=str(path),
                            fix="give unlabelled sentences, one per line (words separated by spaces), or a jsonl "
                                'file with "tokens"; put tagged sentences in the training file')
        for n, line in lines:
            sentences.append([c for c in line if not c.isspace()] if chars else line.split())
            wheres.append(f"{path}:{n}")
    merged = TagSplit(train.name, train.source, train.tokens + sentences,
                      train.tags + [["O"] * len(s) for s in sentences], train.lines + wheres)
    return merged, len(sentences)


def _squad(train: SquadSplit, path: Path, opts: LineOptions) -> tuple[SquadSplit, int]:
    """Questions on their contexts, with no answer (the SQuAD reader's own checks: ids given
    once, the official layout); ids prefixed `unlabelled-` (they never meet the labelled ids in a
    prediction file: only the training split holds them)."""
    if tables.file_format(path) == "jsonl":
        found = _Builder("unlabelled", str(path))
        for where, row in tables.open_table(path, opts, fmt="jsonl").records():
            context = found.context(records.text(row, "context", where))
            found.add(str(row.get("id", where.rsplit(":", 1)[-1])), records.text(row, "question", where), context, [], [],
                      where)
        more = found.split
    else:
        more = read_json(path, "unlabelled", encoding=opts.encoding, answers=False)[0]
    contexts = list(train.contexts)
    index = {c: n for n, c in enumerate(contexts)}
    for c in more.contexts:
        index.setdefault(c, len(contexts))
        if index[c] == len(contexts):
            contexts.append(c)
    merged = dataclasses.replace(train, contexts=contexts, ids=train.ids + [f"unlabelled-{q}" for q in more.ids],
                                 questions=train.questions + more.questions,
                                 context_of=train.context_of + [index[more.contexts[c]] for c in more.context_of],
                                 answers=train.answers + [[] for _ in more.ids], starts=train.starts + [[] for _ in more.ids])
    return merged, len(more.ids)


__all__ = ["add_unlabelled"]
