"""Chinese fine-tuning through the real CLI on small fixtures the tests write: classification on
a ChnSentiCorp-style `label<TAB>text_a` file, NER on character-per-line BIO files (MSRA / People's
Daily layout), and CMRC 2018-style reading comprehension scored over characters."""

from __future__ import annotations

import json
import random
import string
import unicodedata

import pytest
from conftest import ONE_THREAD, run_cli
from finetune_fixtures import tiny_checkpoint
from helpers.chinese import BAD, FILL, GOOD, finetune_sentiment

PER = ["张三", "李四", "王小明", "赵敏", "陈静"]
LOC = ["北京", "上海", "广州", "杭州", "成都"]
ORG = ["清华大学", "阿里巴巴", "人民日报", "中国银行"]


def sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    """Characters and their BIO tags: filler characters around names, places and organizations."""
    chars, tags = [], []
    for _ in range(rng.randint(2, 4)):
        for _ in range(rng.randint(1, 4)):
            chars.append(rng.choice(FILL))
            tags.append("O")
        kind, words = rng.choice([("PER", PER), ("LOC", LOC), ("ORG", ORG)])
        word = rng.choice(words)
        chars += list(word)
        tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(word) - 1)
    return chars + ["。"], tags + ["O"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A randomly initialized L2 H64 BERT with a character-level WordPiece vocabulary."""
    rng = random.Random(0)
    texts = ["".join(sentence(rng)[0]) for _ in range(300)] + ["".join(GOOD + BAD + FILL)] * 5
    return tiny_checkpoint(tmp_path_factory.mktemp("zh_ckpt") / "ckpt", texts)


def test_classify_chinese_label_tab_text(ckpt, tmp_path):
    """A model that reads the sentiment characters beats the majority class (0.5) by far."""
    dev = finetune_sentiment(ckpt, tmp_path)
    assert dev["accuracy"] >= 0.9, dev


def test_ner_on_character_per_line_bio_files(ckpt, tmp_path):
    """One character and its tag per line, a blank line between sentences: every character is a
    word, entity F1 is seqeval's over those words and agrees with the predictions file."""
    from seqeval.metrics import f1_score

    rng = random.Random(2)
    data = tmp_path / "data"
    data.mkdir()
    # the People's Daily corpus's file names (example.train / .dev / .test)
    for name, n in (("example.train", 400), ("example.dev", 100), ("example.test", 20)):
        blocks = ["\n".join(f"{c} {t}" for c, t in zip(*sentence(rng))) for _ in range(n)]
        (data / name).write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    r = run_cli("finetune", "ner", "-c", ckpt, "-d", data, "-o", out, "--set", "finetune.ner.learning_rate=2e-3",
                "--set", "finetune.ner.batch_size=16", "--set", "finetune.ner.epochs=4", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    dev = res["dev"]["dev"]
    assert dev["f1"] >= 0.9 and {"PER/f1", "LOC/f1", "ORG/f1"} <= set(dev), res.get("history")

    blocks = (out / "dev_predictions.txt").read_text(encoding="utf-8").strip("\n").split("\n\n")
    gold = (data / "example.dev").read_text(encoding="utf-8").strip("\n").split("\n\n")
    assert len(blocks) == len(gold) == 100
    y_true, y_pred = [], []
    for b, g in zip(blocks, gold):
        rows, src = [ln.split() for ln in b.splitlines()], [ln.split() for ln in g.splitlines()]
        assert [(x[0], x[1]) for x in rows] == [tuple(x) for x in src]  # every character once, in order
        assert all(len(x[0]) == 1 for x in rows)
        y_true.append([x[1] for x in rows])
        y_pred.append([x[2] for x in rows])
    assert f1_score(y_true, y_pred) == pytest.approx(dev["f1"], abs=1e-6)


# --------------------------------------------------------------------------------- CMRC 2018
def _cmrc_segments(text: str) -> list[str]:
    """cmrc2018_evaluate.py's mixed segmentation, punctuation removed: lowercased, every CJK
    character (and other non-ASCII character) its own segment, runs of ASCII letters and digits
    one segment."""
    out, run = [], ""
    for ch in text.lower().strip():
        if ch in string.punctuation or unicodedata.category(ch).startswith("P") or ch.isspace():
            out += [run] if run else []
            run = ""
        elif ch.isascii() and ch.isalnum():
            run += ch
        else:
            out += [run, ch] if run else [ch]
            run = ""
    return out + ([run] if run else [])


def _cmrc_score(pred: str, golds: list[str]) -> tuple[float, float]:
    """(EM, F1) as cmrc2018_evaluate.py: F1 from the longest common contiguous run of segments."""
    def lcs(a, b):
        best = 0
        for i in range(len(a)):
            for j in range(len(b)):
                k = 0
                while i + k < len(a) and j + k < len(b) and a[i + k] == b[j + k]:
                    k += 1
                best = max(best, k)
        return best

    p = _cmrc_segments(pred)
    f1s, ems = [], []
    for g in golds:
        s = _cmrc_segments(g)
        n = lcs(s, p)
        f1s.append(0.0 if n == 0 else 2 * n / (len(p) + len(s)))
        ems.append(float("".join(p) == "".join(s)))
    return max(ems), max(f1s)


def test_cmrc2018_style_reading_comprehension_scored_over_characters(ckpt, tmp_path):
    rng = random.Random(4)

    def doc(n, prefix):
        data = []
        for i in range(n):
            people = rng.sample(PER, 3)
            places = rng.sample(LOC, 3)
            context = "".join(f"{p}住在{c}。" for p, c in zip(people, places))
            k = rng.randrange(3)
            answer_start = context.index(f"{people[k]}住在") + len(people[k]) + 2
            data.append({"title": f"{prefix}{i}", "paragraphs": [{"id": f"{prefix}{i}", "context": context, "qas": [
                {"id": f"{prefix}{i}_q", "question": f"{people[k]}住在哪里？",
                 "answers": [{"text": places[k], "answer_start": answer_start}]}]}]})
        return {"version": "v1.0", "data": data}

    data = tmp_path / "cmrc"
    data.mkdir()
    (data / "train-v1.1.json").write_text(json.dumps(doc(400, "TRAIN_"), ensure_ascii=False), encoding="utf-8")
    dev = doc(60, "DEV_")
    (data / "dev-v1.1.json").write_text(json.dumps(dev, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "out"
    r = run_cli("finetune", "squad", "-c", ckpt, "-d", data, "-o", out, "--set", "finetune.squad.learning_rate=2e-3",
                "--set", "finetune.squad.epochs=4", "--set", "finetune.squad.batch_size=16",
                "--set", "finetune.squad.max_seq_length=64", "--set", "finetune.squad.doc_stride=32",
                cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert res["data"]["scoring"] == "chars"  # `auto`: the contexts have no spaces
    preds = json.loads((out / "predictions.json").read_text(encoding="utf-8"))
    golds = {qa["id"]: [a["text"] for a in qa["answers"]] for d in dev["data"] for p in d["paragraphs"] for qa in p["qas"]}
    assert set(preds) == set(golds)
    scores = [_cmrc_score(preds[q], golds[q]) for q in golds]
    em, f1 = (sum(s[i] for s in scores) / len(scores) for i in (0, 1))
    reported = res["dev"]["dev"]
    assert reported["f1"] == pytest.approx(f1, abs=1e-9) and reported["exact"] == pytest.approx(em, abs=1e-9)
    assert f1 > 0.45, (em, f1, res["history"])  # learned: one of three places by chance would give 1/3
