"""Generated data for the distillation tests: a keyword classification task a tiny teacher
learns well, written as csv files (classify) and CoNLL files (ner)."""

from __future__ import annotations

import csv
import random
from pathlib import Path


def vocab_words(checkpoint: Path, n: int, seed: int = 0) -> list[str]:
    """`n` whole words (no ## pieces, letters only, 3+ long) of the checkpoint's vocab.txt, in a
    seeded order: every one is a single token, so the task is about words, not spelling."""
    words = [w for w in (Path(checkpoint) / "vocab.txt").read_text(encoding="utf-8").split("\n")
             if w.isalpha() and w.isascii() and len(w) >= 3]
    random.Random(seed).shuffle(words)
    assert len(words) >= n, f"only {len(words)} usable words in the vocabulary"
    return words[:n]


def keyword_task(checkpoint: Path, classes: int = 2, per_class: int = 40, fillers: int = 200, seed: int = 0):
    """(keywords by class, filler words): a text is 6 fillers and one keyword; its label is
    the keyword's class. A model must learn each keyword's class from the examples that show it."""
    words = vocab_words(checkpoint, classes * per_class + fillers, seed)
    keys = [words[c * per_class:(c + 1) * per_class] for c in range(classes)]
    return keys, words[classes * per_class:]


def texts(keys, fill, n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        c = rng.randrange(len(keys))
        words = rng.sample(fill, 6)
        words.insert(rng.randrange(7), rng.choice(keys[c]))
        rows.append((" ".join(words), f"c{c}"))
    return rows


def write_csv(path: Path, rows, labelled: bool = True, text: str = "text") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([text, "label"] if labelled else [text])
        for t, y in rows:
            w.writerow([t, y] if labelled else [t])
    return path
