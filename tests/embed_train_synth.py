"""Generated data for the embedding-training tests: a retrieval task that raw features cannot
solve (a query and its documents share no content word) but pairs can teach, and an STS set.

Words come from the checkpoint's own vocab.txt (whole-word tokens), chosen by a seeded RNG, so
the data suits whichever tiny checkpoint the `pretrained_tiny` fixture gives.
"""

from __future__ import annotations

import json
import random
from pathlib import Path


def vocab_words(checkpoint: Path, n: int, seed: int = 0) -> list[str]:
    words = sorted({w for w in (Path(checkpoint) / "vocab.txt").read_text().split()
                    if w.isalpha() and w.islower() and len(w) >= 4})
    return random.Random(seed).sample(words, n)


class Concepts:
    """K concepts; concept i is named by query word q[i] in queries and doc word d[i] in documents
    (two unrelated words: the link is what training teaches). Fillers are shared noise."""

    def __init__(self, checkpoint: Path, k: int = 64, fillers: int = 60, seed: int = 0, query_fill: int = 1,
                 doc_fill: int = 2):
        words = vocab_words(checkpoint, 2 * k + fillers, seed)
        self.q, self.d, self.fill = words[:k], words[k:2 * k], words[2 * k:]
        self.k, self.query_fill, self.doc_fill = k, query_fill, doc_fill

    def query(self, rng: random.Random, i: int) -> str:
        words = [self.q[i]] + rng.sample(self.fill, self.query_fill)
        rng.shuffle(words)
        return " ".join(words)

    def doc(self, rng: random.Random, i: int) -> str:
        words = [self.d[i]] + rng.sample(self.fill, self.doc_fill)
        rng.shuffle(words)
        return " ".join(words)

    def pairs(self, n: int, seed: int) -> list[dict]:
        rng = random.Random(seed)
        return [{"anchor": self.query(rng, i), "positive": self.doc(rng, i)}
                for i in (rng.randrange(self.k) for _ in range(n))]

    def beir(self, directory: Path, seed: int, docs_per: int = 2, split: str = "dev") -> Path:
        """corpus.jsonl (docs_per documents per concept), queries.jsonl (one per concept) and
        qrels/<split>.tsv (each query's documents relevant)."""
        rng = random.Random(seed)
        directory.mkdir(parents=True)
        (directory / "qrels").mkdir()
        corpus, qrels = [], []
        for i in range(self.k):
            for j in range(docs_per):
                corpus.append({"_id": f"d{i}-{j}", "title": "", "text": self.doc(rng, i)})
                qrels.append(f"q{i}\td{i}-{j}\t1")
        rng.shuffle(corpus)
        write_jsonl(directory / "corpus.jsonl", corpus)
        write_jsonl(directory / "queries.jsonl", [{"_id": f"q{i}", "text": self.query(rng, i)} for i in range(self.k)])
        (directory / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(qrels) + "\n")
        return directory


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sts_rows(words: list[str], rng: random.Random, n: int, length: int = 8) -> list[dict]:
    """Scored pairs: a random sentence and a copy with k of its words replaced (k uniform in
    0..length); gold score = the share of words kept, on STS's 0-5 scale."""
    rows = []
    for _ in range(n):
        a = rng.choices(words, k=length)
        b, k = list(a), rng.randint(0, length)
        for i in rng.sample(range(length), k):
            b[i] = rng.choice(words)
        rows.append({"text": " ".join(a), "text_pair": " ".join(b), "score": (length - k) / length * 5})
    return rows
