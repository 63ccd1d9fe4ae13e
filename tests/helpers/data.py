"""Shared helpers of the data-stage tests (no tests here): generated corpora and tokenizers
trained on them through the real corpus and tokenizer stages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import write_documents

SYLLABLES = ("ka ri to ne mo su pa lu vi de ga zo bi shu ren tal mor ex qui fan dor "
             "lem sta pri ch ol an ve ur is").split()


def pseudo_words(n: int, seed: int = 0) -> list[str]:
    """Distinct made-up words of 1-4 syllables: small vocabularies split them into pieces."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    seen = set()
    while len(out) < n:
        w = "".join(rng.choice(SYLLABLES, size=int(rng.integers(1, 5))))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def make_documents(n_docs: int, seed: int = 0, sentences=(2, 12), words=(4, 16), lexicon: int = 1500) -> list[list[str]]:
    """Documents of sentences of Zipf-distributed pseudo-words (lowercase letters and spaces,
    so the words of a sentence are exactly `sentence.split()`)."""
    rng = np.random.default_rng(seed)
    vocab = pseudo_words(lexicon, seed)
    p = 1.0 / np.arange(1, lexicon + 1)
    p /= p.sum()
    docs = []
    for _ in range(n_docs):
        doc = []
        for _ in range(int(rng.integers(*sentences, endpoint=True))):
            k = int(rng.integers(*words, endpoint=True))
            doc.append(" ".join(vocab[i] for i in rng.choice(lexicon, size=k, p=p)))
        docs.append(doc)
    return docs


def recipe(tmp: Path, corpus: Path, *sets: str):
    """A recipe reading `corpus`, writing under `tmp`, with `--set` style overrides."""
    from bertcli.config.recipe import load_recipe

    base = [f"corpus.sources=[{corpus}]", f"output_dir={tmp / 'run'}", "corpus.validation_fraction=0.05",
            "tokenizer.vocab_size=400", "tokenizer.min_frequency=1", "data.num_proc=1"]
    return load_recipe(None, base + list(sets))


def trained_tokenizer(tmp: Path, kind: str, docs: list[list[str]], *sets: str):
    """(TokenizerInfo, recipe) for a tokenizer of `kind` trained on `docs` by the real stages."""
    from bertcli.tokenization.build import ensure_tokenizer
    from bertcli.tokenization.load import load_tokenizer

    corpus = write_documents(tmp / "corpus.txt", docs)
    r = recipe(tmp, corpus, f"tokenizer.kind={kind}", *sets)
    return load_tokenizer(ensure_tokenizer(r).path), r
