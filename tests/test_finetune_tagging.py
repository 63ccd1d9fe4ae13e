"""Tag schemes, entity scores against seqeval, CoNLL / jsonl / datasets readers, and windows
for each tokenizer kind."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from finetune_fixtures import corpus_texts, tagged_sentence, tokenizer_of, write_conll

from bertcli.core.errors import UserError
from bertcli.finetune.tagging.data import load_tagged, read_conll
from bertcli.tasks.tagging import schemes as tagging
from bertcli.tasks.tagging.windows import align, owners, windows

TYPES = ["PER", "LOC", "ORG"]


def _random_tags(rng: random.Random, n: int, prefixes: str) -> list[str]:
    """Arbitrary (often invalid) tag sequences: conlleval must still read them as seqeval does."""
    return [("O" if rng.random() < 0.4 else f"{rng.choice(prefixes)}-{rng.choice(TYPES)}") for _ in range(n)]


@pytest.mark.parametrize("scheme", ["iob1", "iob2", "bioes"])
def test_entity_scores_match_seqeval(scheme):
    from seqeval.metrics import accuracy_score, classification_report, f1_score, precision_score, recall_score

    rng = random.Random(hash(scheme) % 1000)
    gold, pred = [], []
    for _ in range(300):
        words, tags = tagged_sentence(rng, scheme)
        gold.append(tags)
        # Predictions: the gold tags with a fifth of them replaced at random (some invalid).
        prefixes = "BIES" if scheme == "bioes" else "BI"
        pred.append([t if rng.random() > 0.2 else _random_tags(rng, 1, prefixes)[0] for t in tags])
    for g, p in ((gold, pred), (pred, gold), ([_random_tags(rng, 12, "BIES") for _ in range(50)],
                                             [_random_tags(rng, 12, "BIES") for _ in range(50)])):
        ours = tagging.score(g, p)
        assert ours["f1"] == pytest.approx(f1_score(g, p), abs=1e-12)
        assert ours["precision"] == pytest.approx(precision_score(g, p), abs=1e-12)
        assert ours["recall"] == pytest.approx(recall_score(g, p), abs=1e-12)
        assert ours["accuracy"] == pytest.approx(accuracy_score(g, p), abs=1e-12)
        report = classification_report(g, p, output_dict=True, zero_division=0)
        for t, m in ours["per_type"].items():
            assert m["f1"] == pytest.approx(report[t]["f1-score"], abs=1e-12), t
            assert m["precision"] == pytest.approx(report[t]["precision"], abs=1e-12), t
            assert m["support"] == report[t]["support"], t
    assert 0.3 < tagging.score(gold, pred)["f1"] < 0.95            # the noise is neither nothing nor all


def test_schemes_told_apart_and_repaired():
    rng = random.Random(0)
    spans = [tagging.entities(tagged_sentence(rng, "iob2")[1]) for _ in range(200)]
    lengths = [max((b for _, _, b in s), default=0) + 3 for s in spans]
    for scheme in ("iob1", "iob2", "bioes"):
        sentences = [tagging.encode(s, n, scheme) for s, n in zip(spans, lengths)]
        assert tagging.detect_scheme(sentences, "x") == scheme
        # Writing and reading back are inverse; valid sequences are left alone by repair.
        assert all(tagging.entities(t) == s for t, s in zip(sentences, spans))
        assert all(tagging.repair(t, scheme) == t for t in sentences)
    assert tagging.encode([("PER", 0, 1), ("PER", 2, 2)], 4, "iob1") == ["I-PER", "I-PER", "B-PER", "O"]
    # IOB2 with a chunk starting I-: conlleval starts a chunk there; the repair writes B-.
    assert tagging.repair(["O", "I-LOC", "I-LOC", "B-PER", "I-LOC"], "iob2") == ["O", "B-LOC", "I-LOC", "B-PER", "B-LOC"]
    assert tagging.repair(["B-PER", "B-PER", "I-PER"], "bioes") == ["S-PER", "B-PER", "E-PER"]
    with pytest.raises(UserError, match="unknown tag scheme"):
        tagging.check_tags(["O", "U-PER"], "f:3")
    with pytest.raises(UserError, match="unknown tag scheme"):
        tagging.check_tags(["PER"], "f:3")


def test_conll_layouts(tmp_path):
    rng = random.Random(1)
    sents = [tagged_sentence(rng) for _ in range(20)]
    write_conll(tmp_path / "a" / "eng.train", sents)
    write_conll(tmp_path / "a" / "eng.testa", sents[:5], docstart=False)
    layout, splits = load_tagged(tmp_path / "a")
    assert layout == "conll" and set(splits) == {"train", "dev"}
    assert splits["train"].tokens == [w for w, _ in sents] and splits["train"].tags == [t for _, t in sents]
    assert splits["train"].lines[0].endswith("eng.train:3")           # after -DOCSTART- and its blank line

    # tag_column picks another column (here the chunk column).
    split = read_conll(tmp_path / "a" / "eng.testa", "dev", tag_column=2)
    assert {t for tags in split.tags for t in tags} == {"I-NP"}

    (tmp_path / "j").mkdir()
    for name, rows in (("train.jsonl", sents), ("dev.jsonl", sents[:3])):
        (tmp_path / "j" / name).write_text("".join(json.dumps({"tokens": w, "ner_tags": t}) + "\n" for w, t in rows))
    layout, splits = load_tagged(tmp_path / "j")
    assert layout == "jsonl" and splits["dev"].tags == [t for _, t in sents[:3]]


def test_datasets_conll2003_layout(tmp_path):
    import datasets

    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    feats = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                               "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names))})
    rows = {"tokens": [["John", "lives", "in", "Paris"], []], "ner_tags": [[1, 0, 0, 3], []]}
    dd = datasets.DatasetDict({s: datasets.Dataset.from_dict(rows, features=feats) for s in ("train", "validation")})
    dd.save_to_disk(str(tmp_path / "d"))
    layout, splits = load_tagged(tmp_path / "d")
    assert layout == "save_to_disk" and splits["dev"].tags == [["B-PER", "O", "O", "B-LOC"]]   # empty row dropped


def test_bad_conll_inputs(tmp_path):
    (tmp_path / "train.txt").write_text("EU NNP I-NP I-ORG\nrejects VBZ I-VP\n")
    with pytest.raises(UserError, match="malformed CoNLL line") as e:
        load_tagged(tmp_path)
    assert e.value.where.endswith("train.txt:2")
    (tmp_path / "train.txt").write_text("EU NNP I-NP I-ORG\n")
    with pytest.raises(UserError, match="dev split is missing") as e:
        load_tagged(tmp_path)
    assert "valid.txt" in e.value.fix and "train.txt" in e.value.fix


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_windows_predict_every_word_once(kind):
    """Long sentences in small windows: every word is owned by one window, where its first
    sub-token is; the first sub-token starts the word in the text."""
    tok = tokenizer_of(kind, corpus_texts(200))
    rng = random.Random(2)
    sentences = [sum((tagged_sentence(rng)[0] for _ in range(rng.randint(1, 6))), []) for _ in range(40)]
    sentences.append(["x\u200b", "\u200b", "paris"])                  # a word that gives no sub-token
    for words, (_ids, word, first) in zip(sentences, align(tok, sentences, unk_id=1)):
        assert np.all(np.diff(word) >= 0) and set(word.tolist()) == set(range(len(words)))
        assert sorted(word[first].tolist()) == list(range(len(words)))        # one labelled sub-token each
        for room, overlap in ((6, 2), (11, 4), (40, 10)):
            wins = windows(word, room, overlap)
            own = owners(word, first, wins)
            assert all(0 < w.end - w.start <= room for w in wins) and wins[-1].end == len(word)
            assert all(a.start < b.start < a.end or a.end == b.start for a, b in zip(wins, wins[1:]))
            counts = np.zeros(len(words), dtype=int)
            for w, win in enumerate(wins):
                for t in np.flatnonzero(first[win.start:win.end]) + win.start:
                    counts[word[t]] += own[word[t]] == w
            assert counts.tolist() == [1] * len(words)
    # The labelled sub-token starts the word: decoding it gives the word's beginning (never a
    # bare Unigram `▁` or a byte-level space, which hold none of the word's characters).
    for words in sentences[:10]:
        ids, word, first = align(tok, [words], unk_id=1)[0]
        for i, t in enumerate(np.flatnonzero(first)):
            piece = tok.decode([int(ids[t])]).strip().lstrip("#")
            assert piece and words[i].lower().startswith(piece.lower()), (kind, words[i], piece)
            assert t == 0 or word[t - 1] < i or tok.decode([int(ids[t - 1])]).strip() == "", (kind, words[i])
