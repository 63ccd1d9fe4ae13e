"""The task interface of the fine-tuning engine.

A task is one folder (`classification/`, `tagging/`, `qa/`) that owns what differs between
fine-tuning problems; the runner (`bertcli.finetune.runner`) owns the output defaults, the
checks before any work, `finetune.max_train_examples` and the summary; the engine
(`bertcli.finetune.engine`) owns the training loop, AdamW, warmup + linear decay, precision,
dev evaluation after every epoch, the choice of the best epoch, the HF directory of the best
model and `results.json`.

CONTRACT (what `runner.finetune_task(task, recipe, checkpoint, out)` calls, in this order)

    task.name: str                 key in results.json, messages and the default output folder
                                   (runs/<name>/<checkpoint>): `sst2`, `classify`, `ner`, `squad`
    task.head: str                 the model head load_checkpoint builds: "classification"
                                   (pooled, [B, C]), "token" ([B, T, C] / [n, C] at positions),
                                   "qa" (start/end logits, transformers' `qa_outputs`)
    task.hyper: Hyper              resolved settings (finetune section + the task's block)
    task.read() -> TaskSplits[S]   every split, read and checked, before any model is loaded
                                   (so a broken file fails in seconds); the runner keeps it in
                                   `task.data`, its train split cut to `max_train_examples`
                                   (`Split.head`). After it: task.labels (the head's id2label
                                   names; len 1 = regression; None for "qa") is known.
    task.describe() -> str         how the log line before training names the task

    task.featurize(split, tok, zero_types) -> Features
        Examples of one split -> model features. ONE EXAMPLE MAY GIVE SEVERAL FEATURES (windows
        of a long sentence, SQuAD's doc-stride windows); `Features.example[i]` is the example
        feature i came from. Per-token arrays (`per_token`, flat, aligned with `ids`, padded with
        -100 in batches) and per-feature arrays (`per_feature`, first axis = feature) become
        batch tensors under their own keys; anything else the task needs to decode (offsets,
        word ids) it keeps in `Features.extra`, indexed by feature.
    task.forward(model, batch, train: bool) -> outputs
        Run the model on a batch dict (input_ids, attention_mask, token_type_ids [B, T], the
        task's arrays, and `index` [B] = feature indices of the rows). `train` lets a task read
        only the positions the loss needs (sparse last layer).
    task.loss(outputs, batch) -> scalar tensor (float32)
    task.collect(outputs, batch) -> sequence of B per-feature results (numpy), eval only
    task.decode(split, features, collected) -> P, one prediction per EXAMPLE in split order
        (`collected[i]` is feature i's result; aggregate windows back here)
    task.evaluate(split, predictions) -> {metric: float}     fractions, main metric first
    task.score(dev_metrics: {split name: {metric: float}}) -> float   higher is better (None: no
        dev set was scored, and the last epoch is kept)
    task.format(dev_metrics) -> str                          one line for the log
    task.write_predictions(split, predictions, directory, kind) -> [paths written]
        kind "dev" or "test": into `directory`, the model directory under construction (it is
        renamed when complete; the paths are reported by their final place). A task may write
        test predictions elsewhere (GLUE: submission/ beside the task folders).
    task.test_record(paths) -> dict  how results.json lists the test files ({"test_predictions": ...})
    task.results() -> dict        extra task facts for results.json (label scheme, repairs ...)
    task.summary_title(results), task.summary_rows(results)   the table shown at the end

`Task` gives defaults for the pieces most tasks share (a single dev split scores its mean
metric; log line and summary x100). Adding a task: docs/design.md, "Adding a fine-tuning task".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

if TYPE_CHECKING:                     # typing.Self is 3.11+; typing_extensions comes with torch
    from torch import nn
    from typing_extensions import Self

    from bertcli.config.finetune_sections import FinetuneConfig, TaskOverrides
    from bertcli.tokenization.load import TokenizerInfo


@dataclass
class Hyper:
    """The resolved fine-tuning settings of one task (finetune section + its task block)."""

    learning_rate: float             # "auto" until the engine resolves it (finetune/auto_lr.py)
    epochs: float
    batch_size: int
    max_seq_length: int
    warmup_ratio: float
    weight_decay: float
    values: dict = field(default_factory=dict)  # every resolved key, for results.json


HYPER_KEYS = ("learning_rate", "epochs", "batch_size", "max_seq_length", "warmup_ratio", "weight_decay")


def overlay(cfg: FinetuneConfig, block: TaskOverrides | None) -> Hyper:
    """finetune.<key> overlaid by `block`.<key> wherever the block sets it (not None). The
    block may carry task-only keys too (ner.tag_column ...); they land in `values`."""
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
              if not dataclasses.is_dataclass(getattr(cfg, f.name)) and not isinstance(getattr(cfg, f.name), dict)}
    if block is not None:
        for f in dataclasses.fields(block):
            if getattr(block, f.name) is not None:
                values[f.name] = getattr(block, f.name)
    return Hyper(**{k: values[k] for k in HYPER_KEYS}, values=values)


@dataclass
class Features:
    """Model inputs of one split, flat: feature i is ids[offsets[i]:offsets[i + 1]]."""

    ids: np.ndarray                  # int32 [total tokens]
    types: np.ndarray                # int8  [total tokens]
    offsets: np.ndarray              # int64 [n + 1]
    example: np.ndarray              # int64 [n] the example each feature came from
    per_token: dict[str, np.ndarray] = field(default_factory=dict)    # flat [total tokens] each
    per_feature: dict[str, np.ndarray] = field(default_factory=dict)  # [n, ...] each
    extra: dict[str, Any] = field(default_factory=dict)               # the task's own, by feature

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def pack(rows_ids: Sequence[Sequence[int] | np.ndarray], rows_types: Sequence[Sequence[int] | np.ndarray],
         example: Sequence[int], zero_types: bool = False, **per_token: Sequence[Sequence[int] | np.ndarray]) -> Features:
    """Features from per-feature lists (ids, types, and any per-token lists of the same lengths)."""
    lengths = np.fromiter((len(r) for r in rows_ids), dtype=np.int64, count=len(rows_ids))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = lambda rows, dt: (np.concatenate([np.asarray(r, dtype=dt) for r in rows])  # noqa: E731
                             if len(rows) else np.zeros(0, dtype=dt))
    types = flat(rows_types, np.int8)
    if zero_types:
        types[:] = 0
    return Features(flat(rows_ids, np.int32), types, offsets, np.asarray(example, dtype=np.int64),
                    per_token={k: flat(v, np.int64) for k, v in per_token.items()})


class Split(Protocol):
    """What the runner and the engine need of a split, whatever its task: the sentence (pair)
    splits of classification, the tagged sentences of tagging, the questions of qa."""

    name: str            # train, dev, test; GLUE's matched / mismatched / ax
    source: str          # the file or dataset split, for messages and results.json

    def __len__(self) -> int:
        """Examples (sentences, pairs, questions), not features."""
        ...

    def head(self, n: int) -> Self:
        """The first `n` examples, as a split of the same kind (finetune.max_train_examples)."""
        ...


S = TypeVar("S", bound=Split)     # the task's split type
P = TypeVar("P")                  # the task's predictions of one split


@dataclass
class TaskSplits(Generic[S]):
    """A task's examples, read before any training."""

    train: S
    dev: list[S]
    test: list[S] = field(default_factory=list)
    layout: str = ""
    source: str = ""
    facts: dict = field(default_factory=dict)     # what results.json should record about the data

    def limit_train(self, n: int | None) -> TaskSplits[S]:
        """These splits with only the first `n` training examples (None: all)."""
        return self if n is None else dataclasses.replace(self, train=self.train.head(n))


class Task(Generic[S, P]):
    """Base class: override read, featurize, forward, loss, collect, decode, evaluate,
    write_predictions, summary_rows."""

    name: str = "task"
    head: str = "classification"
    labels: tuple[str, ...] | None = None
    # `loss` is a mean over independent labelled units (loss_units), so a batch may be cut into
    # micro-batches (finetune/accumulate.py); False where it spans the batch (embed's in-batch negatives)
    accumulates: bool = True
    hyper: Hyper
    data: TaskSplits[S]

    # -- the task's own pieces ------------------------------------------------------------
    def read(self) -> TaskSplits[S]:
        raise NotImplementedError

    def featurize(self, split: S, tok: TokenizerInfo, zero_types: bool) -> Features:
        raise NotImplementedError

    def forward(self, model: nn.Module, batch: dict, train: bool):
        return model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])

    def loss(self, outputs, batch: dict):
        raise NotImplementedError

    def collect(self, outputs, batch: dict) -> Sequence:
        raise NotImplementedError

    def loss_units(self, batch: dict) -> int:
        """The labelled units `loss` averages over in `batch` (under torchrun each rank's mean is
        weighted by its share of the global count): one per row unless a task says otherwise."""
        return len(batch["index"])

    def check_features(self, train: Features) -> Features:
        """What the engine's finiteness check runs the trained model on when no dev split has
        features: the training features (embed's hold text ids only: it gives its pool of texts)."""
        return train

    @property
    def whole_batch_loss(self) -> bool:
        """Under torchrun: True when the training forward gathers the global batch from every
        rank (a collective: every rank calls it, an empty shard too) and returns the loss of the
        whole global batch, the same on every rank (embed's in-batch negatives). The engine then
        neither weights it by the shard's share nor sums its value over ranks."""
        return False

    def decode(self, split: S, features: Features, collected: list) -> P:
        raise NotImplementedError

    def evaluate(self, split: S, predictions: P) -> dict[str, float]:
        raise NotImplementedError

    def write_predictions(self, split: S, predictions: P, directory: Path, kind: str) -> list[Path]:
        return []

    def summary_rows(self, results: dict) -> list[tuple[str, Any]]:
        """Rows of the table shown at the end (dev metrics x100)."""
        return [(k, f"{100 * v:.1f}") for m in results["dev"].values() for k, v in m.items()]

    # -- defaults ---------------------------------------------------------------------------
    def describe(self) -> str:
        return self.name

    def summary_title(self, results: dict) -> str:
        return f"{self.name} dev results (x100), epoch {results['best_epoch']}"

    def score(self, dev_metrics: dict[str, dict[str, float]]) -> float | None:
        """The first (main) metric of each dev split, averaged."""
        return float(np.mean([next(iter(m.values())) for m in dev_metrics.values()]))

    def format(self, dev_metrics: dict[str, dict[str, float]]) -> str:
        return ", ".join(f"{k} {100 * v:.1f}" for m in dev_metrics.values() for k, v in m.items())

    def test_record(self, paths: list[str]) -> dict:
        """results.json's entry listing the test prediction files."""
        return {"test_predictions": paths}

    def results(self) -> dict:
        return {}

    def save_model(self, model: nn.Module, directory: Path, checkpoint: Path) -> None:
        """Write the best model into `directory` (a Hugging Face directory with the checkpoint's
        tokenizer; the embed task adds its sentence-transformers modules)."""
        from bertcli.model.checkpoint import save_checkpoint  # torch: only when a model is saved

        save_checkpoint(model, directory, tokenizer_dir=checkpoint)

    def has_gold(self, split: S) -> bool:
        """Whether `split` carries gold labels, so that a test split is scored as well (as
        run_glue / run_ner score a labelled test set)."""
        return getattr(split, "labels", None) is not None

    def baseline(self, split: S) -> P | None:
        """The majority-class predictions for `split` (the chance level the engine compares the
        dev metric with); None: no such baseline (regression, span extraction)."""
        return None

    def chance_metric(self, split: S) -> tuple[str | None, int]:
        """(metric, independent draws) the chance check compares with the baseline's: None for
        the main metric, over the split's examples."""
        return None, len(split)

    @property
    def model_kwargs(self) -> dict:
        """Extra arguments for load_checkpoint (labels for labelled heads)."""
        return {"labels": self.labels} if self.labels is not None else {}
