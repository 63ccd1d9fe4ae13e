"""The task interface of the fine-tuning engine.

A task is one module that owns what differs between fine-tuning problems; the engine
(`bertcli.finetune.engine`) owns everything else: the training loop, AdamW, warmup + linear
decay, precision, dev evaluation after every epoch, the choice of the best epoch, the HF
directory of the best model, `results.json`, progress and errors.

CONTRACT (what `engine.run_task(task, recipe, checkpoint, final, root=None, init="pretrained",
announce=None)` calls, in this order; `final` is the model directory it writes, `root` the
folder of the test predictions, default `final`)

    task.name: str                 key in results.json and messages (`sst2`, `classify`, `ner`)
    task.head: str                 the model head load_checkpoint builds: "classification"
                                   (pooled, [B, C]), "token" ([B, T, C] / [n, C] at positions),
                                   "qa" (start/end logits, transformers' `qa_outputs`)
    task.labels: tuple | None      the head's id2label names (len 1 = regression); None for "qa"
    task.hyper: Hyper              resolved settings (finetune section + the task's block)
    task.data: TaskSplits          train / dev / test splits, read when the task was made (so a
                                   broken file fails before any model is loaded)

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
    task.decode(split, features, collected) -> predictions, one per EXAMPLE in split order
        (`collected[i]` is feature i's result; aggregate windows back here)
    task.evaluate(split, predictions) -> {metric: float}     fractions, main metric first
    task.score(dev_metrics: {split name: {metric: float}}) -> float   higher is better
    task.format(dev_metrics) -> str                          one line for the log
    task.write_predictions(split, predictions, directory, kind) -> [paths]
        kind "dev": into the model directory under construction; kind "test": into the run
        folder (GLUE: submission/ beside the task folders), `task.test_names(split)` lists them
    task.results() -> dict        extra task facts for results.json (label scheme, repairs ...)

Adding a task = one module with a Task subclass + one recipe block in `FinetuneConfig`
(`sections.py`) + one CLI command calling `engine.run_task`. `Task` gives defaults for the
pieces most tasks share (a single dev split scores its mean metric; log line x100).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np


@dataclass
class Hyper:
    """The resolved fine-tuning settings of one task (finetune section + its task block)."""

    learning_rate: float
    epochs: float
    batch_size: int
    max_seq_length: int
    warmup_ratio: float
    weight_decay: float
    values: dict = field(default_factory=dict)  # every resolved key, for results.json


HYPER_KEYS = ("learning_rate", "epochs", "batch_size", "max_seq_length", "warmup_ratio", "weight_decay")


def overlay(cfg, block) -> Hyper:
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


def pack(rows_ids: Sequence[Sequence[int]], rows_types: Sequence[Sequence[int]], example: Sequence[int],
         zero_types: bool = False, **per_token: Sequence[Sequence[int]]) -> Features:
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


@dataclass
class TaskSplits:
    """A task's examples, read before any training: splits are the task's own objects (they
    need `name`, `source` and `__len__`)."""

    train: Any
    dev: list
    test: list = field(default_factory=list)
    layout: str = ""
    source: str = ""
    facts: dict = field(default_factory=dict)     # what results.json should record about the data


class Task:
    """Base class: override featurize, forward, loss, collect, decode, evaluate, write_predictions."""

    name: str = "task"
    head: str = "classification"
    labels: tuple[str, ...] | None = None
    test_key: str = "test_predictions"   # results.json key listing the test prediction files
    hyper: Hyper
    data: TaskSplits

    # -- the task's own pieces ------------------------------------------------------------
    def featurize(self, split, tok, zero_types: bool) -> Features:
        raise NotImplementedError

    def forward(self, model, batch: dict, train: bool):
        return model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])

    def loss(self, outputs, batch: dict):
        raise NotImplementedError

    def collect(self, outputs, batch: dict) -> Sequence:
        raise NotImplementedError

    def decode(self, split, features: Features, collected: list) -> Any:
        raise NotImplementedError

    def evaluate(self, split, predictions) -> dict[str, float]:
        raise NotImplementedError

    def write_predictions(self, split, predictions, directory: Path, kind: str) -> list[Path]:
        return []

    def test_names(self, split) -> list[str]:
        """File names (relative to the run folder) write_predictions gives a test split."""
        return []

    # -- defaults ---------------------------------------------------------------------------
    def score(self, dev_metrics: dict[str, dict[str, float]]) -> float:
        """The first (main) metric of each dev split, averaged."""
        return float(np.mean([next(iter(m.values())) for m in dev_metrics.values()]))

    def format(self, dev_metrics: dict[str, dict[str, float]]) -> str:
        return ", ".join(f"{k} {100 * v:.1f}" for m in dev_metrics.values() for k, v in m.items())

    def results(self) -> dict:
        return {}

    @property
    def model_kwargs(self) -> dict:
        """Extra arguments for load_checkpoint (labels for labelled heads)."""
        return {"labels": self.labels} if self.labels is not None else {}
