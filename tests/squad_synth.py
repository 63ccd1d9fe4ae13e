"""Synthetic, learnable SQuAD-format data and tiny tokenizers of the three kinds for the tests.

Each context is filler text with a planted fact `the <color> code is <w1> <w2> .`; the question
asks for that color's code and the answer is `<color> code is <w1> <w2>`. In v2.0 data a third
of the contexts hold no fact and their questions are unanswerable. (With several facts per
context the question decides which one: `n_facts=3` is learnable by the shortened pretrained
bert-tiny -- dev F1 94 in 5 epochs -- but not by a randomly initialized model in the tests'
budget.) Contexts are several windows long at the tests' short max_seq_length, and facts land
anywhere, including across window boundaries.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

COLORS = "red blue green black white orange".split()
CODES = "alpha bravo delta echo golf hotel india kilo lima mike oscar papa romeo sierra tango zulu".split()
FILL = ("river stone paper window garden music table story market winter summer voice light "
        "(city), north, \"open\" old-fashioned 1990s well-known café naïve").split()


def context_and_facts(rng: random.Random, n_words: int, colors: list[str], code_words: int = 2) -> tuple[str, dict]:
    """A context of about n_words words holding one fact per color: color -> (text, start)."""
    words = [rng.choice(FILL) for _ in range(n_words)]
    slots = sorted(rng.sample(range(n_words), len(colors)))  # facts go before these filler words
    facts, parts, pos = {}, [], 0
    for i, w in enumerate(words):
        if slots and i == slots[0]:
            slots.pop(0)
            color = colors[len(facts)]
            code = " ".join(rng.choice(CODES) for _ in range(code_words))
            # the answer starts at the color the question names (found by matching tokens) and
            # ends before the full stop
            answer = f"{color} code is {code}"
            parts.append(f"the {answer} . ")
            facts[color] = (answer, pos + 4)
            pos += 4 + len(answer) + 3
        parts.append(w + " ")
        pos += len(w) + 1
    return "".join(parts).rstrip(), facts


def squad_json(rng: random.Random, n_contexts: int, version: int = 1, n_words: tuple[int, int] = (60, 120),
               questions: int = 3, n_facts: int = 1, code_words: int = 2) -> dict:
    """SQuAD JSON. v2.0: a third of the contexts hold no fact; their questions are unanswerable."""
    data = []
    qid = 0
    for a in range(n_contexts):
        empty = version == 2 and rng.random() < 1 / 3
        colors = rng.sample(COLORS, n_facts)
        context, facts = context_and_facts(rng, rng.randint(*n_words), [] if empty else colors, code_words)
        qas = []
        for _ in range(questions):
            qid += 1
            color = rng.choice(colors)
            qa = {"id": f"q{qid}", "question": f"what is the {color} code?", "answers": []}
            if not empty:
                text, start = facts[color]
                qa["answers"] = [{"text": text, "answer_start": start}]
            if version == 2:
                qa["is_impossible"] = empty
            qas.append(qa)
        data.append({"title": f"t{a}", "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "v2.0" if version == 2 else "1.1", "data": data}


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


def tiny_tokenizer(kind: str, texts: list[str], vocab_size: int = 200, special: str | None = None):
    """A trained `tokenizers.Tokenizer` of `kind` with bertcli's pipeline and pair template."""
    from bertcli.config.sections import TokenizerConfig
    from bertcli.tokenization.train import add_post_processor, new_tokenizer, new_trainer

    special = special or {"wordpiece": "bert", "bpe": "roberta", "unigram": "albert"}[kind]
    cfg = TokenizerConfig(kind=kind, vocab_size=vocab_size, special_tokens=special, lowercase=kind != "bpe",
                          strip_accents=kind != "bpe", min_frequency=1)
    tok = new_tokenizer(cfg)
    tok.train_from_iterator(texts, trainer=new_trainer(cfg, show_progress=False))
    add_post_processor(tok, special)
    return tok


def tiny_checkpoint(folder: Path, texts: list[str], family: str = "bert", kind: str = "wordpiece",
                    seed: int = 0, vocab_size: int = 300, **model) -> Path:
    """A randomly initialized L2 H64 encoder with a tokenizer trained on `texts`, saved as a
    Hugging Face directory (what `bertcli finetune` takes)."""
    import torch

    from bertcli.config.recipe import resolve_model
    from bertcli.config.sections import ModelConfig, TokenizerConfig
    from bertcli.model import build_model, save_checkpoint
    from bertcli.tokenization.load import load_tokenizer
    from bertcli.tokenization.train import write_hf_files

    special = family if family in ("bert", "roberta", "albert", "modernbert") else "bert"
    folder.mkdir(parents=True, exist_ok=True)
    tok = tiny_tokenizer(kind, texts, vocab_size=vocab_size, special=special)
    write_hf_files(tok, TokenizerConfig(kind=kind, special_tokens=special, lowercase=kind != "bpe",
                                        strip_accents=kind != "bpe"), folder)
    info = load_tokenizer(folder)
    torch.manual_seed(seed)
    cfg = resolve_model(ModelConfig(family=family, **{"hidden_size": 64, "num_hidden_layers": 2,
                                                      "num_attention_heads": 4, "intermediate_size": 128,
                                                      "max_position_embeddings": 130, **model}))
    save_checkpoint(build_model(cfg, info.vocab_size, info.pad_id), folder, tokenizer_dir=folder)
    return folder
