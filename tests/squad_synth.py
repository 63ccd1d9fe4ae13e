"""Synthetic, learnable SQuAD-format data and tiny tokenizers of the three kinds for the tests.

Each context is filler text with a few planted facts `the <color> code is <w1> <w2> .`; the
question asks for one color's code and the answer is its two words. In v2.0 data a third of
the questions ask for a color whose fact is not in the context (unanswerable). Contexts run to
~200 words, several windows at the tests' short max_seq_length, and facts land anywhere,
including across window boundaries.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

COLORS = "red blue green black white orange".split()
CODES = "alpha bravo delta echo golf hotel india kilo lima mike oscar papa romeo sierra tango zulu".split()
FILL = ("river stone paper window garden music table story market winter summer voice light "
        "(city), north, \"open\" old-fashioned 1990s well-known café naïve").split()


def context_and_facts(rng: random.Random, n_words: int, colors: list[str]) -> tuple[str, dict]:
    """A context of about n_words words holding one fact per color: color -> (text, start)."""
    words = [rng.choice(FILL) for _ in range(n_words)]
    slots = sorted(rng.sample(range(n_words), len(colors)))
    facts, parts, pos = {}, [], 0
    for i, w in enumerate(words):
        if slots and i == slots[0]:
            slots.pop(0)
            color = colors[len(facts)]
            code = f"{rng.choice(CODES)} {rng.choice(CODES)}"
            sentence = f"the {color} code is "
            parts.append(sentence)
            facts[color] = (code, pos + len(sentence))
            parts.append(code + " . ")
            pos += len(sentence) + len(code) + 3
        parts.append(w + " ")
        pos += len(w) + 1
    return "".join(parts).rstrip(), facts


def squad_json(rng: random.Random, n_contexts: int, version: int = 1, n_words: tuple[int, int] = (120, 220),
               questions: int = 3) -> dict:
    data = []
    qid = 0
    for a in range(n_contexts):
        colors = rng.sample(COLORS, 3)
        context, facts = context_and_facts(rng, rng.randint(*n_words), colors)
        qas = []
        for _ in range(questions):
            qid += 1
            if version == 2 and rng.random() < 1 / 3:
                missing = rng.choice([c for c in COLORS if c not in facts])
                qas.append({"id": f"q{qid}", "question": f"what is the {missing} code?", "answers": [],
                            "is_impossible": True})
                continue
            color = rng.choice(colors)
            text, start = facts[color]
            qa = {"id": f"q{qid}", "question": f"what is the {color} code?",
                  "answers": [{"text": text, "answer_start": start}]}
            if version == 2:
                qa["is_impossible"] = False
            qas.append(qa)
        data.append({"title": f"t{a}", "paragraphs": [{"context": context, "qas": qas}]})
    out = {"version": "v2.0" if version == 2 else "1.1", "data": data}
    return out


def write_squad(folder: Path, version: int = 1, n_train: int = 60, n_dev: int = 20, seed: int = 0, **kw) -> Path:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    tag = "v2.0" if version == 2 else "v1.1"
    for name, n in (("train", n_train), ("dev", n_dev)):
        (folder / f"{name}-{tag}.json").write_text(json.dumps(squad_json(rng, n, version, **kw)), encoding="utf-8")
    return folder


def all_text(doc: dict) -> list[str]:
    return [p["context"] for a in doc["data"] for p in a["paragraphs"]] + \
           [q["question"] for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]


def tiny_tokenizer(kind: str, texts: list[str], vocab_size: int = 200):
    """A trained `tokenizers.Tokenizer` of `kind` with bertcli's pipeline and pair template."""
    from bertcli.sections import TokenizerConfig
    from bertcli.tokenizer import add_post_processor, new_tokenizer, new_trainer

    special = {"wordpiece": "bert", "bpe": "roberta", "unigram": "albert"}[kind]
    cfg = TokenizerConfig(kind=kind, vocab_size=vocab_size, special_tokens=special, lowercase=kind != "bpe",
                          strip_accents=kind != "bpe", min_frequency=1)
    tok = new_tokenizer(cfg)
    tok.train_from_iterator(texts, trainer=new_trainer(cfg, show_progress=False))
    add_post_processor(tok, special)
    return tok
