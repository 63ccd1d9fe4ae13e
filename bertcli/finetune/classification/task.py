"""Sentence and sentence-pair classification (or regression): the task behind GLUE's nine
presets and `bertcli finetune classify`.

One example is one feature ([CLS] A [SEP] B [SEP], truncated longest-first); the head is
transformers' *ForSequenceClassification (pooled [CLS], dropout, linear; RoBERTa's two-layer
head); the loss cross-entropy, or mean squared error with one output (regression); metrics by
name from `finetune.metrics` as the TaskSpec lists them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bertcli.finetune.classification import metrics
from bertcli.finetune.classification.glue_data import Split, TaskData
from bertcli.finetune.classification.submission import prediction_strings, write_predictions
from bertcli.finetune.task import Features, Hyper, Task, TaskSplits
from bertcli.finetune.classification.glue import TaskSpec


class SequenceTask(Task):
    """Classification of a text (pair) into `spec.labels` (None: regression)."""

    head = "classification"

    def __init__(self, data: TaskData, hyper: Hyper, test_folder: str | None = None):
        self.spec: TaskSpec = data.task
        self.name = self.spec.name
        self.labels = self.spec.label_names if self.spec.labels is not None else None
        self.hyper = hyper
        self.data = TaskSplits(data.train, list(data.dev), list(data.test), data.layout, data.source,
                               {"skipped_rows": data.skipped})
        # GLUE: test predictions are submission/<Task>.tsv; others test_predictions/<split>.tsv
        self.test_folder = test_folder
        self.test_key = "submission" if test_folder == "submission" else "test_predictions"

    @property
    def model_kwargs(self) -> dict:
        return {"num_labels": self.spec.num_labels, "labels": self.spec.label_names}

    def featurize(self, split: Split, tok, zero_types: bool) -> Features:
        from bertcli.finetune.classification.features import encode_split

        is_test = any(split is s for s in self.data.test)
        what = "train" if split is self.data.train else split.name
        if is_test and split.name != "test":
            what = f"test {split.name}"
        return encode_split(tok.tokenizer, split, self.hyper.max_seq_length, zero_types,
                            desc=f"tokenizing {self.name} {what}")

    def loss(self, logits: torch.Tensor, batch: dict) -> torch.Tensor:
        """Cross-entropy over the classes, or mean squared error on the score (STS-B)."""
        if self.spec.is_regression:
            return F.mse_loss(logits[:, 0].float(), batch["labels"].float())
        return F.cross_entropy(logits.float(), batch["labels"])

    def collect(self, logits: torch.Tensor, batch: dict):
        return logits.float().cpu().numpy()                              # [B, C]

    def decode(self, split: Split, features: Features, collected: list) -> np.ndarray:
        """Class ids [n] (or scores [n] for regression) in the split's order: predict's own
        decision (features.label_of) on the logits."""
        from bertcli.finetune.classification.features import label_of

        out = np.zeros(len(split), dtype=np.float32 if self.spec.is_regression else np.int64)
        if len(collected):
            out[features.example] = label_of(np.stack(collected))
        return out

    def evaluate(self, split: Split, predictions: np.ndarray) -> dict[str, float]:
        return metrics.compute(self.spec, predictions, split.labels)

    def score(self, dev_metrics: dict) -> float:
        return metrics.task_score(self.spec, dev_metrics)

    def format(self, dev_metrics: dict) -> str:
        return f"{metrics.metric_header(self.spec)} {metrics.format_metrics(self.spec, dev_metrics)}"

    def write_predictions(self, split: Split, predictions, directory: Path, kind: str) -> list[Path]:
        values = prediction_strings(self.spec, predictions)
        if kind == "dev":
            return [write_predictions(directory / "dev_predictions" / f"{split.name}.tsv", split.ids, values)]
        return [write_predictions(directory / name, split.ids, values) for name in self.test_names(split)]

    def test_names(self, split: Split) -> list[str]:
        if self.test_folder == "submission":
            file = next((s.submission for s in self.spec.test if s.name == split.name), "AX.tsv")
            return [f"submission/{file}"]
        return [f"test_predictions/{split.name}.tsv"]

    def results(self) -> dict:
        return {"glue_name": self.spec.glue_name}
