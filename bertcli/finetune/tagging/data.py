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

from dataclasses import dataclass, field
from pathlib import Path

from bertcli.core.errors import UserError
from bertcli.io import records, tables
from bertcli.io.text import LineOptions, read_lines

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

    def head(self, n: int) -> TagSplit:
        """The first `n` sentences (finetune.max_train_examples)."""
        return TagSplit(self.name, self.source, self.tokens[:n], self.tags[:n], self.lines[:n])


def read_conll(path: Path, name: str, tag_column: int = -1, encoding: str | None = None) -> TagSplit:
    tokens, tags, lines = [], [], []
    words: list[str] = []
    labels: list[str] = []
    start, width = 0, None

    def flush() -> None:
        if words:
            tokens.append(list(words))
            tags.append(list(labels))
            lines.append(f"{path}:{start}")
            words.clear()
            labels.clear()

    for lineno, line in read_lines(Path(path), LineOptions(encoding=encoding)):
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


def read_jsonl(path: Path, name: str, names: list[str] | None = None, encoding: str | None = None) -> TagSplit:
    """{"tokens": [str, ...], "ner_tags": [str, ...]} per line, equal lengths (bertcli.io.records)."""
    tokens, tags, lines = [], [], []
    for where, row in tables.open_table(Path(path), LineOptions(encoding=encoding), fmt="jsonl").records():
        toks, labs = _sentence(row, names, where)
        tokens.append(toks)
        tags.append(labs)
        lines.append(where)
    if not tokens:
        raise UserError(f"{path.name} holds no sentences", where=str(path))
    return TagSplit(name, str(path), tokens, tags, lines)


def _sentence(row: dict, names: list[str] | None, where: str, tag_field: str = "ner_tags") -> tuple[list, list]:
    """A sentence's tokens and tag names: lists of strings (tags may be ClassLabel ids) of one length."""
    toks = records.string_list(row, "tokens", where)
    labs = records.get(row, tag_field, where)
    if not isinstance(labs, list):
        raise UserError(f"field {tag_field!r} is {records.json_type(labs)} ({labs!r:.60}), not an array of tags",
                        where=where, fix=f'write {tag_field!r} as a JSON array, e.g. ["B-PER", "O"] (a string is not '
                                         "split)")
    if len(toks) != len(labs):
        raise UserError(f"{len(toks)} tokens but {len(labs)} tags", where=where,
                        fix="give one tag per token")
    return toks, _tag_names(labs, names, where, tag_field)


def _tag_names(labels: list, names: list[str] | None, where: str, tag_field: str = "ner_tags") -> list[str]:
    if all(isinstance(x, str) for x in labels):
        return list(labels)
    bad = next((x for x in labels if isinstance(x, bool) or not isinstance(x, (str, int))), None)
    if bad is not None or any(isinstance(x, str) for x in labels):
        odd = bad if bad is not None else next(x for x in labels if not isinstance(x, str))
        raise UserError(f"field {tag_field!r} holds {records.json_type(odd)} ({odd!r:.40}) among its tags",
                        where=where, fix="tags are strings (B-PER ...), or all ClassLabel ids in a datasets directory")
    if names is None:
        raise UserError("integer tags without their names", where=where,
                        fix="write tags as strings (B-PER ...), or use a `datasets` directory whose "
                            "ner_tags feature is a ClassLabel")
    if any(not 0 <= x < len(names) for x in labels):
        raise UserError(f"tag ids {labels} outside the {len(names)} ClassLabel names", where=where)
    return [names[x] for x in labels]


def read_datasets(folder: Path, tag_field: str = "ner_tags") -> dict[str, TagSplit]:
    import datasets

    dd = tables.load_saved(folder)
    splits = tables.dict_splits(dd, str(folder))
    out = {}
    for ours, theirs in HUB_SPLITS.items():
        key = next((k for k in theirs if k in splits), None)
        if key is None:
            continue
        ds, table = dd[key], splits[key]
        missing = [c for c in ("tokens", tag_field) if c not in table.names()]
        if missing:
            raise UserError(f"split {key} lacks the column(s) {', '.join(missing)}", where=table.source,
                            fix=f"found: {', '.join(table.names())}; expected tokens and {tag_field} (conll2003)")
        feature = ds.features[tag_field]
        inner = getattr(feature, "feature", None)
        names = list(inner.names) if isinstance(inner, datasets.ClassLabel) else None
        split = TagSplit(ours, table.source, [], [])
        for i, (toks, labs) in enumerate(zip(table.column("tokens"), table.column(tag_field))):
            if isinstance(toks, list) and not toks:
                continue                                     # conll2003 has empty rows
            where = f"{table.source} row {i}"
            toks, labs = _sentence({"tokens": toks, tag_field: labs}, names, where, tag_field)
            split.tokens.append(toks)
            split.tags.append(labs)
            split.lines.append(where)
        out[ours] = split
    return out


def check_entities(split: TagSplit) -> None:
    """A tag set that can train a tagger: at least one entity tag (not only `O`)."""
    seen = {t for sent in split.tags for t in sent}
    if not seen - {"O"}:
        raise UserError(f"the {split.name} data holds no entity tag (every one of its "
                        f"{sum(map(len, split.tags)):,} tags is {', '.join(sorted(seen)) or 'absent'})",
                        where=split.source,
                        fix="a tagger needs entity tags to learn (B-PER, I-LOC, ...); check the tag column "
                            "(finetune.ner.tag_column) or the file")


def load_tagged(data_dir: Path, tag_column: int = -1, encoding: str | None = None) -> tuple[str, dict[str, TagSplit]]:
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
                    splits[split] = read_jsonl(path, split, encoding=encoding)
                else:
                    splits[split] = read_conll(path, split, tag_column, encoding)
    for need in ("train", "dev"):
        if need not in splits:
            present = ", ".join(sorted(p.name for p in data_dir.iterdir())) or "nothing"
            raise UserError(f"the {need} split is missing from {data_dir}", where=str(data_dir),
                            fix=f"found: {present}; expected {' or '.join(SPLIT_FILES[need][:3])} "
                                "(or a datasets save_to_disk directory with train/validation splits)")
    check_entities(splits["train"])
    return layout, splits
