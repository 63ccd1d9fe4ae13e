"""Corpus readers: documents from text/jsonl/json/parquet/csv files, `datasets` hub names and
the built-in corpus, split into sentences, stored as an Arrow dataset (memory-mapped).

CONTRACT (used by the tokenizer and data stages):

    load_corpus(recipe) -> datasets.DatasetDict
        splits "train" and "validation"; one row per document; column
        "sentences": list[str] (non-empty, stripped). Cached in stage_dir(recipe, "corpus")
        (saved with save_to_disk, plus corpus_info.json with counts); reused when complete.

    corpus_fingerprint(cfg, resolved=None) -> list
        JSON-able description of the resolved inputs (absolute paths, sizes, mtimes; hub names;
        builtin + Python version) that goes into every stage hash depending on the corpus.

Also: build_corpus(recipe, force=False) -> StageResult (the stage itself), corpus_info(path) ->
dict (corpus_info.json), split_sentences(text) -> list[str], is_validation(sentences, fraction).

Documents stream from the readers (corpus_readers.py) through `Dataset.from_generator` straight
to Arrow files in the stage's temporary directory; nothing holds the corpus in Python lists.
The validation split is chosen by a hash of each document's text, so it does not depend on the
order or number of sources, and a duplicated document never lands on both sides.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertcli.config.recipe import Recipe
from bertcli.config.sections import CorpusConfig
from bertcli.config.stages import STAGE_VERSIONS, StageResult, is_complete, stage_dir, stage_guard
from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.core.fs import building
from bertcli.corpus.readers import ReadStats, Resolved, read_source, resolve

if TYPE_CHECKING:
    import datasets

# Bump when reading or splitting changes what a corpus holds, so older caches are rebuilt.
CORPUS_VERSION = STAGE_VERSIONS["corpus"]
INFO_FILE = "corpus_info.json"

# ------------------------------------------------------------------------- sentence splitting
# A period that follows one of these words (lower-cased, inner dots kept) ends no sentence.
ABBREVIATIONS = frozenset(
    "mr mrs ms mx dr prof sr jr st mt ft vs e.g i.e cf fig figs no nos vol vols ed eds approx dept "
    "est inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec al resp ca viz eq eqs "
    "sec ch pp u.s u.k a.m p.m ph.d gen col lt sgt rev gov".split())
_CLOSERS = "\"'”’)]}»"
_QUOTES_BEFORE_SENTENCE = "\"'“‘([{«¿¡"
# Western end punctuation (then closing quotes/brackets) before whitespace; CJK end punctuation
# 。！？ or an ellipsis ……, then closers (”’」』）...), ends a sentence with or without a space after
# it, unless a comma-like mark follows (“好！”，他说 is one sentence); ASCII ! ? end one before an
# ideograph.
_CJK_CLOSERS = "」』”’）】〕〉》\"'"
_CJK_END = re.compile(f"(?:[。！？｡]+|…{{2,}})[{_CJK_CLOSERS}]*(?![，、；：,;:{_CJK_CLOSERS}])"
                      f"|[!?]+[{_CJK_CLOSERS}]*(?=[\u4e00-\u9fff])")
_WESTERN_END = re.compile(r"[.!?…]+[" + re.escape(_CLOSERS) + r"]*(?=\s)")
_PARAGRAPH = re.compile(r"\n\s*\n")
_LINE_BREAK = re.compile(r"[^\S\n]*\n\s*")
# Scripts written without spaces (CJK ideographs and punctuation, kana, full-width forms, curly
# quotes): a line break between two of them joins the lines without a space.
_NO_SPACE = re.compile("[\u2018-\u201d\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


def split_sentences(text: str) -> list[str]:
    """Split running text into sentences: after . ! ? … when the next word does not start in
    lower case and the period does not end an abbreviation or an initial ("Dr. Smith", "J. R.
    Tolkien", "e.g. this"); decimals ("3.14") have no space and never split; after 。！？
    always (and after ……), closing quotes and brackets included: 。” ends, “好！”，他说 does
    not; a line of verse split by ， stays whole. Blank lines end a sentence; single newlines are
    reflowed (with no space between two Chinese characters, as hard-wrapped Chinese has none)."""
    out: list[str] = []
    for para in _PARAGRAPH.split(text):
        para = " ".join(_reflow(para.strip()).split())
        if para:
            _split_paragraph(para, out)
    return out


def _reflow(para: str) -> str:
    def join(m: re.Match) -> str:
        before, after = para[m.start() - 1: m.start()], para[m.end(): m.end() + 1]
        return "" if _NO_SPACE.match(before) and _NO_SPACE.match(after) else " "

    return _LINE_BREAK.sub(join, para) if "\n" in para else para


def _split_paragraph(text: str, out: list[str]) -> None:
    cuts = [m.end() for m in _CJK_END.finditer(text)]
    for m in _WESTERN_END.finditer(text):
        if _ends_sentence(text, m.start(), m.end()):
            cuts.append(m.end())
    start = 0
    for cut in sorted(set(cuts)):
        piece = text[start:cut].strip()
        if piece:
            out.append(piece)
        start = cut
    tail = text[start:].strip()
    if tail:
        out.append(tail)


def _ends_sentence(text: str, start: int, end: int) -> bool:
    nxt = end
    while nxt < len(text) and (text[nxt].isspace() or text[nxt] in _QUOTES_BEFORE_SENTENCE):
        nxt += 1
    if nxt >= len(text) or text[nxt].islower():
        return False
    if text[start:end].rstrip(_CLOSERS) != ".":
        return True  # ! ? ... and ?! end sentences without further checks
    word_start = text.rfind(" ", 0, start) + 1
    word = text[word_start:start].lstrip(_QUOTES_BEFORE_SENTENCE).lower()
    if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return False
    return True


# ------------------------------------------------------------------------------- fingerprint
def resolve_sources(cfg: CorpusConfig) -> list[Resolved]:
    if not cfg.sources:
        raise UserError("corpus.sources is empty", where="corpus.sources",
                        fix="list at least one source: a file, directory, glob, hub name or `builtin`")
    return [resolve(s, i) for i, s in enumerate(cfg.sources)]


def corpus_fingerprint(cfg: CorpusConfig, resolved: list | None = None) -> list:
    """The resolved inputs (paths with size and mtime, hub names, built-in + Python version);
    `resolved` saves resolving the sources again."""
    resolved = resolve_sources(cfg) if resolved is None else resolved
    return [r.fingerprint() for r in resolved]


# ------------------------------------------------------------------------------------ split
def doc_hash(sentences: list[str]) -> float:
    """A uniform number in [0, 1) from the document's text."""
    digest = hashlib.blake2b("\n".join(sentences).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def is_validation(sentences: list[str], fraction: float) -> bool:
    return doc_hash(sentences) < fraction


# ------------------------------------------------------------------------------------ stage
@dataclass
class SplitCounts:
    documents: int = 0
    sentences: int = 0
    characters: int = 0

    def add(self, sentences: list[str]) -> None:
        self.documents += 1
        self.sentences += len(sentences)
        self.characters += sum(map(len, sentences))


@dataclass
class _Tally:
    """What the generator saw; filled while it runs (it runs in this process)."""

    train: SplitCounts = field(default_factory=SplitCounts)
    validation: SplitCounts = field(default_factory=SplitCounts)
    per_source: list[int] = field(default_factory=list)
    alphabet: set = field(default_factory=set)
    # The train document closest to the validation side and the validation document closest
    # to the train side, to move one over when a small corpus leaves a split empty.
    closest_train: tuple = (2.0, -1, 0, 0)  # (hash, row, sentences, characters)
    closest_validation: tuple = (-1.0, -1, 0, 0)


def documents(cfg: CorpusConfig, resolved: list[Resolved], stats: ReadStats,
              per_source: list[int] | None = None) -> Iterator[list[str]]:
    """Every document of the corpus as a list of clean sentences, sources in order."""
    mode, min_chars = cfg.sentence_split, cfg.min_sentence_chars
    for r in resolved:
        n = 0
        for doc in read_source(r, cfg, stats):
            if doc.sentences is not None:
                sents = doc.sentences
                if mode == "always":
                    sents = [s for line in sents for s in split_sentences(line)]
            else:
                assert doc.text is not None, "a RawDoc holds sentences or text"
                sents = doc.text.splitlines() if mode == "never" else split_sentences(doc.text)
            sents = [s for s in (x.strip() for x in sents) if len(s) >= min_chars]
            if not sents:
                continue
            yield sents
            n += 1
            if r.src.max_documents is not None and n >= r.src.max_documents:
                break
        if per_source is not None:
            per_source.append(n)


def corpus_dir(recipe: Recipe, resolved: list | None = None) -> Path:
    """Where the recipe's corpus lives (keyed by the corpus section and the inputs' fingerprint)."""
    return stage_dir(recipe, "corpus", corpus_fingerprint(recipe.corpus, resolved))


def build_corpus(recipe: Recipe, force: bool = False) -> StageResult:
    """Read every source into the cached Arrow corpus (or reuse it)."""
    cfg = recipe.corpus
    resolved = resolve_sources(cfg)
    path = corpus_dir(recipe, resolved)
    with stage_guard(path, "corpus"):
        if is_complete(path) and not force:
            return StageResult("corpus", path, True, corpus_summary_rows(corpus_info(path)))
        start = time.perf_counter()
        with building(path, recipe) as tmp:
            info = _write(cfg, resolved, tmp, recipe.source)
            info["seconds"] = round(time.perf_counter() - start, 3)
            (tmp / INFO_FILE).write_text(jsonout.dumps(info, indent=2, ensure_ascii=False), encoding="utf-8")
        return StageResult("corpus", path, False, corpus_summary_rows(info))


def load_corpus(recipe: Recipe) -> datasets.DatasetDict:
    """The corpus as a DatasetDict (train, validation), built first when missing."""
    import datasets

    return datasets.load_from_disk(str(build_corpus(recipe).path))


def corpus_info(path: Path) -> dict:
    return json.loads((Path(path) / INFO_FILE).read_text(encoding="utf-8"))


def corpus_summary_rows(info: dict) -> list[tuple[str, object]]:
    t, v = info["train"], info["validation"]
    rows: list[tuple[str, object]] = [("documents", f"{t['documents']:,} train / {v['documents']:,} validation"),
            ("sentences", f"{t['sentences']:,} train / {v['sentences']:,} validation"),
            ("characters", f"{t['characters']:,} train / {v['characters']:,} validation")]
    bad = info["encoding"]
    if bad["replaced_lines"] or bad["skipped_lines"]:
        rows.append(("non-UTF-8 lines", f"{bad['replaced_lines']:,} replaced, {bad['skipped_lines']:,} skipped "
                                        f"(first: {', '.join(bad['first_bad'][:3])})"))
    if bad.get("documents_cut"):
        rows.append(("documents cut", f"{bad['documents_cut']:,} longer than 8M characters (no blank lines?)"))
    return rows


def _write(cfg: CorpusConfig, resolved: list[Resolved], out: Path, recipe_source: str) -> dict:
    stats, tally = ReadStats(), _Tally()
    fraction = cfg.validation_fraction
    docs = documents(cfg, resolved, stats, tally.per_source)
    # The first document is read before Arrow writing starts, so that an empty corpus or a
    # source that is broken from its first line is reported at once.
    first = next(docs, None)
    if first is None:
        names = ", ".join(r.src.path for r in resolved)
        raise UserError(f"the corpus is empty: no sentence of at least {cfg.min_sentence_chars} "
                        f"character(s) in {names}", where=f"{recipe_source}: corpus.sources",
                        fix="check the sources' contents (and text_field, layout, encoding_errors, "
                            "min_sentence_chars)")

    def generate() -> Iterator[dict[str, Any]]:
        with console.progress("reading corpus (documents)") as bar:
            row = 0
            for sents in itertools.chain([first], docs):
                h = doc_hash(sents)
                val = h < fraction
                (tally.validation if val else tally.train).add(sents)
                if val and h > tally.closest_validation[0]:
                    tally.closest_validation = (h, row, len(sents), sum(map(len, sents)))
                elif not val and h < tally.closest_train[0]:
                    tally.closest_train = (h, row, len(sents), sum(map(len, sents)))
                for s in sents:
                    tally.alphabet.update(s)
                yield {"sentences": sents, "validation": val}
                row += 1
                if row % 1000 == 0:
                    bar.advance(1000)
            bar.advance(row % 1000)

    import datasets

    features = datasets.Features({"sentences": datasets.List(datasets.Value("string")),
                                  "validation": datasets.Value("bool")})
    cache = out / ".build-cache"
    with console.quiet_datasets():
        try:
            ds = datasets.Dataset.from_generator(generate, features=features, cache_dir=str(cache),
                                                 fingerprint=out.name.replace(".", "_"))
        except datasets.exceptions.DatasetGenerationError as e:
            if isinstance(e.__cause__, UserError):
                raise e.__cause__ from None
            raise
        total = tally.train.documents + tally.validation.documents
        moved = _rebalance(tally, total, fraction)
        flags = ds.select_columns(["validation"]).data.column("validation").to_numpy(zero_copy_only=False)
        if moved is not None:
            flags = flags.copy()
            flags[moved] = not flags[moved]
        val_idx = flags.nonzero()[0]
        train_idx = (~flags).nonzero()[0]
        ds = ds.remove_columns("validation")
        dd = datasets.DatasetDict(train=ds.select(train_idx), validation=ds.select(val_idx))
        # an empty split needs an explicit shard, or datasets writes one it cannot load back
        dd.save_to_disk(str(out), num_shards={k: 1 for k, d in dd.items() if len(d) == 0} or None)
        del ds, dd
    shutil.rmtree(cache, ignore_errors=True)
    return {
        "version": CORPUS_VERSION,
        "train": asdict(tally.train),
        "validation": asdict(tally.validation),
        "validation_fraction": fraction,
        "documents_per_source": {f"{r.key} {r.src.path}": n for r, n in zip(resolved, tally.per_source)},
        "encoding": {"replaced_lines": stats.replaced_lines, "skipped_lines": stats.skipped_lines,
                     "first_bad": stats.first_bad, "documents_cut": stats.documents_cut},
        # distinct characters: the tokenizer checks its vocabulary size against them before training
        "alphabet": "".join(sorted(tally.alphabet - {" "})),
    }


def _rebalance(tally: _Tally, total: int, fraction: float) -> int | None:
    """Row to move to the other split (the one whose hash is nearest the threshold) so that the
    training split is never empty, and, with a fraction > 0 and two or more documents, neither is
    the validation split. (A text file without blank lines is a single document.)"""
    if total < 1:
        return None
    if tally.validation.documents == 0 and fraction > 0 and total >= 2:
        _h, row, n, chars = tally.closest_train
        src, dst = tally.train, tally.validation
    elif tally.train.documents == 0:
        _h, row, n, chars = tally.closest_validation
        src, dst = tally.validation, tally.train
    else:
        return None
    for counts, sign in ((src, -1), (dst, 1)):
        counts.documents += sign
        counts.sentences += sign * n
        counts.characters += sign * chars
    return row
