"""Does pretraining help? A small labeled task built offline from real text, fine-tuned once from
a pretrained checkpoint and once from the same architecture randomly initialized, with the same
data, hyperparameters, seed and number of steps.

The text is the built-in corpus (the running Python's own documentation), split into sentences;
train and dev examples come from disjoint documents. Tasks:
    order    two consecutive sentences of a document, in their original order (label 0) or
             swapped (label 1): needs discourse and syntax, not keywords.
    shuffle  one sentence as written (0) or with its words randomly reordered (1): needs a sense
             of word order, which masked-language-model pretraining gives.
    replace  one sentence as written (0) or with 15% of its words (at least one) replaced by word
             types drawn uniformly from the training documents (1): the corruption that BERT's
             10% random replacement teaches the model to notice.
All are balanced (chance = 50%). Used by `scripts/pretraining_helps.py` (which runs it) and by
tests/test_finetune_probe.py (which imports it from this folder).

An experiment, not a command, so it lives beside the benchmarks and not in the package: it
reads the built-in corpus (stage 0) to make a classification task, which no fine-tuning module
may do, and reaches bertcli only through what a user's script would call (the classification
task and `runner.finetune_task`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bertcli.config.recipe import load_recipe
from bertcli.corpus.build import split_sentences
from bertcli.corpus.builtin import iter_documents
from bertcli.finetune import runner
from bertcli.finetune.classification.glue_data import SequenceSplit
from bertcli.finetune.classification.labels import LabelSpec
from bertcli.finetune.classification.task import SequenceTask
from bertcli.finetune.task import TaskSplits, overlay

KINDS = ("order", "shuffle", "replace")


def probe_spec(kind: str) -> LabelSpec:
    """The probe's labels: 0 as written, 1 changed."""
    if kind not in KINDS:
        raise ValueError(f"unknown probe kind {kind!r}; expected one of {KINDS}")
    names = ("in_order", "swapped") if kind == "order" else ("original", kind + "d")
    return LabelSpec(("0", "1"), names, ("accuracy",))


def probe_documents(max_sentences: int | None = None, min_words: int = 4, max_words: int = 40) -> list[list[str]]:
    """Built-in documents (in their fixed order) as lists of sentences of a sensible length, at
    least 2 per document; reading stops once `max_sentences` are collected (reading all of the
    standard library's docstrings takes seconds)."""
    docs, total = [], 0
    for _, text in iter_documents():
        sentences = [s for s in split_sentences(text) if min_words <= len(s.split()) <= max_words]
        if len(sentences) >= 2:
            docs.append(sentences)
            total += len(sentences)
            if max_sentences is not None and total >= max_sentences:
                break
    return docs


def _examples(kind: str, docs: list[list[str]], rng: np.random.Generator, vocab: list[str] = ()):
    """(text_a, text_b or None, label, source sentences) for every usable spot of `docs`,
    labels drawn at random; `vocab` holds the replace probe's substitutes."""
    out = []
    for doc in docs:
        if kind == "order":
            for i in range(0, len(doc) - 1, 2):          # disjoint pairs: no sentence used twice
                a, b, label = doc[i], doc[i + 1], int(rng.integers(2))
                out.append((b, a, 1, (a, b)) if label else (a, b, 0, (a, b)))
        else:
            for s in doc:
                words = s.split()
                label = int(rng.integers(2))
                if label and kind == "replace":
                    for j in rng.choice(len(words), size=max(1, round(0.15 * len(words))), replace=False):
                        while (new := vocab[int(rng.integers(len(vocab)))]) == words[j]:
                            pass
                        words[j] = new
                elif label:
                    perm = rng.permutation(len(words))
                    if np.all(perm == np.arange(len(words))):
                        perm = np.roll(perm, 1)
                    words = [words[j] for j in perm]
                out.append((" ".join(words), None, label, (s,)))
    return out


def build_probe(kind: str, n_train: int, n_dev: int, seed: int = 0, dev_fraction: float = 0.3) -> TaskSplits[SequenceSplit]:
    """The probe task with up to n_train / n_dev examples; dev documents are a seeded
    `dev_fraction` of the documents, and no sentence of a dev example occurs in training."""
    pair = kind == "order"
    rng = np.random.default_rng(seed)
    per_example = 2 if pair else 1
    # Enough for both sides with a margin for the random document split.
    docs = probe_documents(max_sentences=int(1.5 * per_example * (n_train / (1 - dev_fraction) + n_dev / dev_fraction)))
    is_dev = rng.random(len(docs)) < dev_fraction
    train_docs = [d for d, v in zip(docs, is_dev) if not v]
    # Substitutes: every word type of the training documents, drawn uniformly (as BERT's random
    # replacement draws uniformly from the vocabulary), so most are rare words out of place.
    vocab = sorted({w for d in train_docs for s in d for w in s.split()})
    train = _examples(kind, train_docs, rng, vocab)
    # The documentation repeats itself (shared docstrings): a dev example whose sentence also
    # occurs in a training document is dropped.
    seen = {s for d in train_docs for s in d}
    dev = [ex for ex in _examples(kind, [d for d, v in zip(docs, is_dev) if v], rng, vocab) if not seen.intersection(ex[3])]

    def split(name: str, rows: list, n: int) -> SequenceSplit:
        pick = rng.permutation(len(rows))[:n]
        rows = [rows[i] for i in pick]
        return SequenceSplit(name, f"builtin corpus ({kind} probe)", [r[0] for r in rows],
                     [r[1] for r in rows] if pair else None,
                     np.asarray([r[2] for r in rows], dtype=np.int64), [str(i) for i in range(len(rows))])

    return TaskSplits(split("train", train, n_train), [split("dev", dev, n_dev)], [], "probe", "builtin corpus")


def pretraining_helps(checkpoint: Path, out: Path, kind: str = "replace", n_train: int = 2000, n_dev: int = 2000,
                      epochs: float = 8, learning_rate: float = 5e-3, batch_size: int = 32, max_seq_length: int = 64,
                      freeze_encoder: bool = True, dropout: float = 0.0, seed: int = 0, device: str = "auto") -> dict:
    """Fine-tune `checkpoint` and its randomly initialized twin on the probe; dev accuracies.

    The defaults are the feature-based protocol (BERT paper, section 5.3): the encoder frozen,
    only the pooler and classifier trained, so the score measures what the representations hold.
    A few minutes of CPU pretraining move the encoder's weights little; fully fine-tuned on 2,000
    examples, a randomly initialized tiny encoder learns these probes as well as a pretrained
    one (measured: within +-3 points either way), so full fine-tuning would not tell them apart."""
    recipe = load_recipe("glue", [f"finetune.learning_rate={learning_rate}", f"finetune.epochs={epochs}",
                                  f"finetune.batch_size={batch_size}", f"finetune.max_seq_length={max_seq_length}",
                                  f"finetune.dropout={dropout}", f"finetune.freeze_encoder={str(freeze_encoder).lower()}",
                                  "finetune.save_model=false", f"finetune.device={device}", f"seed={seed}"])
    data = build_probe(kind, n_train, n_dev, seed)
    scores = {init: runner.finetune_task(SequenceTask(kind, overlay(recipe.finetune, None), probe_spec(kind), data),
                                    recipe, Path(checkpoint), Path(out) / init, init=init, show=False)
              for init in ("pretrained", "random")}
    return {
        "probe": kind, "checkpoint": str(checkpoint), "train_examples": len(data.train),
        "dev_examples": len(data.dev[0]), "epochs": epochs, "learning_rate": learning_rate,
        "batch_size": batch_size, "freeze_encoder": freeze_encoder, "dropout": dropout, "seed": seed, "chance": 0.5,
        "pretrained_accuracy": scores["pretrained"]["dev"]["dev"]["accuracy"],
        "random_init_accuracy": scores["random"]["dev"]["dev"]["accuracy"],
        "steps": scores["pretrained"]["steps"],
    }
