"""The tiny learnable task of the sweep tests (tests/test_finetune_sweep*.py): one word decides
the label; a tiny L1 H32 BERT learns it in 24 steps at lr 1e-2 (at chance at 1e-3). And the
pieces they compare runs with."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
from finetune_fixtures import tiny_checkpoint

POS, NEG = ["good", "great", "fine"], ["bad", "awful", "poor"]


def rows(rng: random.Random, n: int) -> list[tuple[str, str]]:
    out = []
    for _ in range(n):
        y = rng.randrange(2)
        out.append((f"{rng.choice(POS if y else NEG)} {rng.choice('xyz')}", ["neg", "pos"][y]))
    return out


def write(path: Path, table) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows(table)
    return path


def write_task(root: Path) -> Path:
    """The checkpoint and train / dev / test files in `root`."""
    rng = random.Random(1)
    train = rows(rng, 64)
    tiny_checkpoint(root / "ckpt", [t for t, _ in train] * 3, hidden=32, layers=1, positions=40)
    write(root / "train.csv", train)
    write(root / "dev.csv", rows(rng, 40))
    write(root / "test.csv", rows(rng, 20))
    return root


def classify(root: Path, out: Path, *extra: str) -> list:
    return ["finetune", "classify", "-c", root / "ckpt", "--train", root / "train.csv", "--dev", root / "dev.csv",
            "--test", root / "test.csv", "-o", out, "--epochs", "3", "--max-seq-length", "16", "--batch-size", "8",
            "--set", "finetune.dropout=0", *extra]


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def timeless(results: dict, folder: Path | None = None) -> dict:
    """results.json without its timing; `folder`: where it lies, written `<out>` (the test files'
    paths name the run's folder)."""
    text = json.dumps({k: v for k, v in results.items() if k != "train_seconds"})
    return json.loads(text.replace(str(folder), "<out>") if folder is not None else text)


def assert_close_json(a, b, where: str, rel: float = 1e-3, abs: float = 1e-4) -> None:
    """Two JSON values equal, their floats to the tolerance (sums taken in another order)."""
    if isinstance(a, float):
        assert b == pytest.approx(a, rel=rel, abs=abs), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            assert_close_json(a[k], b[k], f"{where}.{k}", rel, abs)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close_json(x, y, f"{where}[{i}]", rel, abs)
    else:
        assert a == b, where
