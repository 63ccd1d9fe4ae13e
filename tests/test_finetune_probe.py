"""Pretraining must help: on a small task built from real text (the built-in corpus), the
pretrained tiny checkpoint's features train to a better dev accuracy than those of the same
architecture randomly initialized, with the same data, hyperparameters, seed and steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))   # the probe is a script's library
from probe import _examples, build_probe, pretraining_helps, probe_documents  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)


def test_probe_tasks_are_balanced_and_disjoint():
    for kind in ("order", "shuffle", "replace"):
        data = build_probe(kind, 300, 200, seed=3)
        train, dev = data.train, data.dev[0]
        assert len(train) == 300 and len(dev) == 200
        assert 0.4 < train.labels.mean() < 0.6 and 0.4 < dev.labels.mean() < 0.6
        words = lambda texts: {" ".join(sorted(t.split())) for t in texts}  # noqa: E731 (order-free)
        sides = [train.text_a] + ([train.text_b] if train.text_b else [])
        dev_sides = [dev.text_a] + ([dev.text_b] if dev.text_b else [])
        assert not set().union(*map(words, sides)) & set().union(*map(words, dev_sides))  # no dev sentence in train
        assert (train.text_b is not None) == (kind == "order")
        if kind == "order":   # label 1 = swapped: the same pairs exist in the corpus the other way round
            assert all(len(a.split()) >= 4 and len(b.split()) >= 4 for a, b in zip(train.text_a, train.text_b))


def test_replace_probe_changes_15_percent_of_the_words():
    import numpy as np

    docs = probe_documents(max_sentences=400)
    vocab = sorted({w for d in docs for s in d for w in s.split()})
    rows = _examples("replace", docs, np.random.default_rng(0), vocab)
    assert len(rows) >= 400 and 0.4 < np.mean([r[2] for r in rows]) < 0.6
    for text, _, label, (source,) in rows:
        new, old = text.split(), source.split()
        assert len(new) == len(old)
        changed = sum(a != b for a, b in zip(new, old))
        assert changed == (max(1, round(0.15 * len(old))) if label else 0), (text, source)


@pytest.mark.slow
def test_pretraining_beats_random_init(tmp_path, pretrained_tiny, one_thread):
    """The feature-based protocol (frozen encoder, pooler and classifier trained) on the replace
    probe, 2,000 train and 2,000 dev sentences, the same seed and steps for both inits."""
    result = pretraining_helps(pretrained_tiny, tmp_path, kind="replace", n_train=2000, n_dev=2000, seed=0, device="cpu")
    pre, rnd = result["pretrained_accuracy"], result["random_init_accuracy"]
    # Both models are scored on the same 2,000 dev sentences, so the difference of the paired
    # accuracies has a standard error below ~1.6 points. Measured (seeds 0, 1): random init
    # 51.6%, 50.6%; the fixture's 1000-step checkpoint 60.4%, 59.6%; the 1500-step quickstart 65.1%.
    assert pre - rnd >= 0.04, result
