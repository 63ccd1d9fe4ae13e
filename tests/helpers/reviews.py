"""The three-class review task the classify tests write: each class decided by one word of its
own among filler words (one process and under torchrun alike)."""

from __future__ import annotations

import csv

from helpers.glue import FILL, NEG, POS

NAMES = ["negative", "positive", "neutral"]
NEUTRAL = ["okay", "average", "fine", "plain", "usual", "moderate"]


def review_rows(rng, n):
    """n rows {review, stars}: three string classes, each decided by one word among 4-12 fillers."""
    rows = []
    for _ in range(n):
        label = rng.randrange(3)
        words = rng.choices(FILL, k=rng.randint(4, 12)) + [rng.choice([NEG, POS, NEUTRAL][label])]
        rng.shuffle(words)
        rows.append({"review": " ".join(words) + ", yes", "stars": NAMES[label]})
    return rows


def write_csv(path, rows, columns=("review", "stars")):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows([[r.get(c, "") for c in columns] for r in rows])
    return path
