"""Generated Chinese prose and poetry for tests and measurements (no downloads).

Words come from jieba's own dictionary (installed with jieba: about 350k words with frequencies and
part-of-speech tags; the 3,000 most frequent of each tag are used), drawn with probability ∝ frequency^0.9 inside
simple clause patterns
(subject, adverb, verb, object; attributive 的; measure words), so the character distribution is
roughly that of real text: a few thousand characters, Zipf-like. Paragraphs mix in quotes
(“…”「…」), bracketed asides, English words and numbers, and now and then a poem of 5- or
7-character lines. `python tests/chinese_text.py OUT.jsonl SEED MEGABYTES` writes a jsonl corpus.
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
import sys
from functools import lru_cache
from pathlib import Path

_SUBJECT = ("r", "n", "nr", "ns", "nt")
TOP_WORDS = 3000
_ENGLISH = ("BERT", "GPU", "Python", "model", "data", "Transformer", "token", "Linux", "API", "pretraining")


@lru_cache(maxsize=1)
def _lexicon() -> dict[str, tuple[list[str], list[float]]]:
    """POS tag -> (words, cumulative weights), CJK-only words of 1-4 characters."""
    import jieba

    path = Path(jieba.__file__).parent / "dict.txt"
    by_tag: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        word, freq, tag = parts[0], int(parts[1]), parts[2]
        if freq < 20 or not 1 <= len(word) <= 4 or not all("\u4e00" <= c <= "\u9fff" for c in word):
            continue
        by_tag.setdefault(tag, []).append((word, freq ** 0.9))
    # the most frequent words of each tag: common words, about 3,500 distinct characters
    by_tag = {tag: sorted(items, key=lambda wf: -wf[1])[:TOP_WORDS] for tag, items in by_tag.items()}
    return {tag: (list(w for w, _ in items), list(itertools.accumulate(f for _, f in items)))
            for tag, items in by_tag.items()}


def _word(rng: random.Random, tag: str) -> str:
    words, cum = _lexicon()[tag]
    return words[bisect.bisect(cum, rng.random() * cum[-1])]


def _noun_phrase(rng: random.Random) -> str:
    out = ""
    if rng.random() < 0.3:
        out += _word(rng, "a") + "的"
    elif rng.random() < 0.15:
        out += _word(rng, "m") + _word(rng, "q")
    return out + _word(rng, "n")


def clause(rng: random.Random) -> str:
    subject = _word(rng, rng.choice(_SUBJECT)) if rng.random() < 0.7 else _noun_phrase(rng)
    out = subject
    if rng.random() < 0.6:
        out += _word(rng, "d")
    out += _word(rng, "v")
    if rng.random() < 0.2:
        out += _word(rng, "ul") if "ul" in _lexicon() else "了"
    if rng.random() < 0.8:
        out += _noun_phrase(rng)
    if rng.random() < 0.08:
        out += f" {rng.choice(_ENGLISH)} "
    if rng.random() < 0.05:
        out += f"{rng.randint(2, 2025)}年"
    return out.strip()


def sentence(rng: random.Random) -> str:
    parts = [clause(rng) for _ in range(rng.choice((1, 1, 2, 2, 3)))]
    body = "".join(p + rng.choice("，，，、；") for p in parts[:-1]) + parts[-1]
    end = rng.choice("。。。。。！？")
    r = rng.random()
    if r < 0.08:
        return f"他说：“{body}{end}”"
    if r < 0.12:
        return f"「{body}{end}」"
    if r < 0.15:
        return f"{body}（{clause(rng)}）{end}"
    return body + end


def poem(rng: random.Random) -> str:
    """Four lines of 5 or 7 characters, pairs joined by ， and ended by 。 (one line of text)."""
    n = rng.choice((5, 7))
    lines = []
    for _ in range(4):
        line = ""
        while len(line) < n:
            line += _word(rng, rng.choice(("n", "v", "a", "n", "ns")))
        lines.append(line[:n])
    return f"{lines[0]}，{lines[1]}。{lines[2]}，{lines[3]}。"


def paragraph(rng: random.Random) -> str:
    if rng.random() < 0.05:
        return poem(rng)
    return "".join(sentence(rng) for _ in range(rng.randint(2, 7)))


def documents(seed: int, n_chars: int) -> list[list[str]]:
    """Documents (lists of paragraphs) totalling about `n_chars` characters."""
    rng = random.Random(seed)
    docs, total = [], 0
    while total < n_chars:
        doc = [paragraph(rng) for _ in range(rng.randint(2, 8))]
        total += sum(map(len, doc))
        docs.append(doc)
    return docs


def write(path: Path, seed: int, n_chars: int) -> Path:
    """JSON lines, one document per line: {"text": paragraphs separated by blank lines}; the
    corpus stage splits it into sentences (sentence_split: auto)."""
    path = Path(path)
    lines = (json.dumps({"text": "\n\n".join(d)}, ensure_ascii=False) for d in documents(seed, n_chars))
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


if __name__ == "__main__":
    out, seed, mb = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    write(Path(out), seed, int(mb * 1e6 / 3))  # ~3 bytes per character in UTF-8
