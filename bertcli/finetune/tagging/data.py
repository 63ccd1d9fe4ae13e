"""Read tagged sentences: CoNLL files, jsonl, and the `datasets` conll2003 layout.

A data directory (`bertcli finetune ner -d DIR`) holds one of:
    train.txt, valid.txt | dev.txt, test.txt       CoNLL-2003 as usually redistributed
    eng.train, eng.testa, eng.testb                the original CoNLL-2003 file names
    train.jsonl, valid.jsonl | dev.jsonl, test.jsonl   {"tokens": [...], "ner_tags": [...]}
                                                   (tags as strings; ints need ClassLabel names)
    dataset_dict.json                              a `datasets.DatasetDict` (save_to_disk), e.g.
                                                   conll2003: tokens + ner_tags, int tags whose
                                                   names come from the ClassLabel feature
CoNLL files: one token per line, columns separated by spaces or tabs (`token POS chunk tag`),
the tag in `tag_column` (default -1, the last); a blank line between sentences; `-DOCSTART-`
lines (document boundaries) are skipped. The test split is optional.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bertcli.errors import UserError

SPLIT_FILES = {
    "train": ("train.txt", "eng.train", "train.jsonl", "train.conll", "example.train"),
    "dev": ("valid.txt", "dev.txt", "eng.testa", "valid.jsonl", "dev.jsonl", "validation.jsonl", "dev.conll",
            "example.dev"),
    "test": ("test.txt", "eng.testb", "test.jsonl", "test.conll", "example.test"),
}  # example.*: the People's Daily NER corpus as usually redistributed (one character and its BIO tag per line)
HUB_SPLITS = {"train": ("train",), "dev": ("validation", "valid", "dev"), "test": ("test",)}


@dataclass
class TagSplit:
    name: str                         # train, dev, test
    source: str                       # the file, for messages
    tokens: list[list[str]]
    tags: list[list[str]]             # gold tags (as read; repaired later by the task)
    lines: list[str] = field(default_factory=list)   # `file:line` where each sentence starts

    def __len__(self) -> int:
        return len(self.tokens)

    def head(self, n: int) -> "TagSplit":
        """The first `n` sentences (finetune.max_train_examples)."""
        return TagSplit(self.name, self.source, self.tokens[:n], self.tags[:n], self.lines[:n])


def read_conll(path: Path, name: str, tag_column: int = -1) -> TagSplit:
    tokens, tags, lines = [], [], []
    words: list[str] = []
    labels: list[str] = []
    start, width = 0, None

    def flush():
        if words:
            tokens.append(list(words))
            tags.append(list(labels))
            lines.append(f"{path}:{start}")
            words.clear()
            labels.clear()

    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n").lstrip("\ufeff" if lineno == 1 else "")
            except UnicodeDecodeError as e:
                raise UserError(f"not valid UTF-8 ({e.reason} at byte {e.start})", where=f"{path}:{lineno}")
            fields = line.split()
            if not fields:
                flush()
                continue
            if fields[0] == "-DOCSTART-":
                flush()
                continue
            if width is None:
                width = len(fields)
                if width < 2 or not -width <= tag_column < width:
                    raise UserError(f"{width} column(s) where a token and a tag (column {tag_column}) are needed",
                                    where=f"{path}:{lineno}",
                                    fix="CoNLL lines are `token POS chunk tag` (or `token tag`), separated by "
                                        "spaces or tabs; set finetune.ner.tag_column to the tag's column")
            if len(fields) != width:
                raise UserError(f"malformed CoNLL line: {len(fields)} columns where the file's first line has "
                                f"{width}", where=f"{path}:{lineno}",
                                fix="every token line needs the same columns (a space inside a token breaks it); "
                                    "sentences are separated by blank lines")
            if not words:
                start = lineno
            words.append(fields[0])
            labels.append(fields[tag_column])
    flush()
    if not tokens:
        raise UserError(f"{path.name} holds no sentences", where=str(path))
    return TagSplit(name, str(path), tokens, tags, lines)


def read_jsonl(path: Path, name: str, names: list[str] | None = None) -> TagSplit:
    tokens, tags, lines = [], [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"not a JSON object: {e.msg}", where=where)
            if not isinstance(row, dict) or "tokens" not in row or "ner_tags" not in row:
                found = ", ".join(row) if isinstance(row, dict) else type(row).__name__
                raise UserError("a jsonl line needs `tokens` and `ner_tags`", where=where, fix=f"found: {found}")
            toks, labs = row["tokens"], row["ner_tags"]
            tokens.append([str(t) for t in toks])
            tags.append(_tag_names(labs, names, where))
            lines.append(where)
            if len(toks) != len(labs):
                raise UserError(f"{len(toks)} tokens but {len(labs)} tags", where=where)
    if not tokens:
        raise UserError(f"{path.name} holds no sentences", where=str(path))
    return TagSplit(name, str(path), tokens, tags, lines)


def _tag_names(labels: list, names: list[str] | None, where: str) -> list[str]:
    if all(isinstance(x, str) for x in labels):
        return list(labels)
    if names is None:
        raise UserError("integer tags without their names", where=where,
                        fix="write tags as strings (B-PER ...), or use a `datasets` directory whose "
                            "ner_tags feature is a ClassLabel")
    try:
        return [names[int(x)] for x in labels]
    except (IndexError, ValueError, TypeError):
        raise UserError(f"tag ids {labels} outside the {len(names)} ClassLabel names", where=where)


def read_datasets(folder: Path, tag_field: str = "ner_tags") -> dict[str, TagSplit]:
    import datasets

    dd = datasets.load_from_disk(str(folder))
    if not isinstance(dd, datasets.DatasetDict):
        raise UserError(f"{folder} holds one dataset, not a DatasetDict with train/validation splits",
                        where=str(folder), fix="save the whole DatasetDict (load_dataset(...).save_to_disk(dir))")
    out = {}
    for ours, theirs in HUB_SPLITS.items():
        key = next((k for k in theirs if k in dd), None)
        if key is None:
            continue
        ds = dd[key]
        source = f"{folder}[{key}]"
        missing = [c for c in ("tokens", tag_field) if c not in ds.column_names]
        if missing:
            raise UserError(f"split {key} lacks the column(s) {', '.join(missing)}", where=source,
                            fix=f"found: {', '.join(ds.column_names)}; expected tokens and {tag_field} (conll2003)")
        feature = ds.features[tag_field]
        inner = getattr(feature, "feature", None)
        names = list(inner.names) if hasattr(inner, "names") else None
        toks, labs = ds["tokens"], ds[tag_field]
        keep = [i for i, t in enumerate(toks) if len(t)]          # conll2003 has empty rows
        out[ours] = TagSplit(ours, source, [list(map(str, toks[i])) for i in keep],
                             [_tag_names(labs[i], names, f"{source} row {i}") for i in keep],
                             [f"{source} row {i}" for i in keep])
    return out


def load_tagged(data_dir: Path, tag_column: int = -1) -> tuple[str, dict[str, TagSplit]]:
    """(layout, {train, dev[, test]: TagSplit}); a missing train or dev split is a UserError
    naming what the directory holds."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise UserError(f"NER data directory {data_dir} does not exist",
                        fix="pass -d with train.txt, valid.txt, test.txt (CoNLL-2003) or a save_to_disk directory")
    if (data_dir / "dataset_dict.json").is_file():
        layout, splits = "save_to_disk", read_datasets(data_dir)
    else:
        layout, splits = "conll", {}
        for split, names in SPLIT_FILES.items():
            path = next((data_dir / n for n in names if (data_dir / n).is_file()), None)
            if path is not None:
                if path.suffix == ".jsonl":
                    layout = "jsonl"
                    splits[split] = read_jsonl(path, split)
                else:
                    splits[split] = read_conll(path, split, tag_column)
    for need in ("train", "dev"):
        if need not in splits:
            present = ", ".join(sorted(p.name for p in data_dir.iterdir())) or "nothing"
            raise UserError(f"the {need} split is missing from {data_dir}", where=str(data_dir),
                            fix=f"found: {present}; expected {' or '.join(SPLIT_FILES[need][:3])} "
                                "(or a datasets save_to_disk directory with train/validation splits)")
    return layout, splits
