"""Sentence and sentence-pair classification (or regression): the task behind GLUE's nine
presets (`glue_run.GlueTask`) and `bertcli finetune classify` (`classify.ClassifyTask`).

One example is one feature ([CLS] A [SEP] B [SEP], truncated longest-first); the head is
transformers' *ForSequenceClassification (pooled [CLS], dropout, linear; RoBERTa's two-layer
head); the loss cross-entropy, or mean squared error with one output (regression); metrics by
name from `classification.metrics` as the label spec lists them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertcli.finetune.classification import metrics
from bertcli.finetune.classification.encode import encode_split
from bertcli.finetune.classification.glue_data import Split
from bertcli.finetune.classification.labels import LabelSpec
from bertcli.finetune.classification.submission import prediction_strings, write_predictions
from bertcli.finetune.task import Features, Hyper, Task, TaskSplits
from bertcli.tasks.classification import label_of

if TYPE_CHECKING:
    import torch


class SequenceTask(Task[Split, np.ndarray]):
    """Classification of a text (pair) into `spec.labels` (None: regression). Subclasses read
    their splits (`read`); `spec` is known once they have."""

    head = "classification"
    spec: LabelSpec

    def __init__(self, name: str, hyper: Hyper, spec: LabelSpec | None = None,
                 splits: TaskSplits[Split] | None = None):
        self.name, self.hyper = name, hyper
        if spec is not None:
            self.spec = spec
        self._splits = splits

    def read(self) -> TaskSplits[Split]:
        """Splits given when the task was made (a probe, a test); readers override this."""
        if self._splits is None:
            raise NotImplementedError
        return self._splits

    @property
    def labels(self) -> tuple[str, ...] | None:  # type: ignore[override]  # read-only: derived from spec, never assigned on a SequenceTask
        return self.spec.names if self.spec.labels is not None else None

    @property
    def model_kwargs(self) -> dict:
        return {"num_labels": self.spec.num_labels, "labels": self.spec.names}

    def featurize(self, split: Split, tok, zero_types: bool) -> Features:
        is_test = any(split is s for s in self.data.test)
        what = "train" if split is self.data.train else split.name
        if is_test and split.name != "test":
            what = f"test {split.name}"
        return encode_split(tok.tokenizer, split, self.hyper.max_seq_length, zero_types,
                            desc=f"tokenizing {self.name} {what}")

    def loss(self, logits: torch.Tensor, batch: dict) -> torch.Tensor:
        """Cross-entropy over the classes, or mean squared error on the score (STS-B)."""
        import torch.nn.functional as F  # torch only where a model runs: reading data does not import it
        if self.spec.is_regression:
            return F.mse_loss(logits[:, 0].float(), batch["labels"].float())
        return F.cross_entropy(logits.float(), batch["labels"])

    def collect(self, logits: torch.Tensor, batch: dict):
        return logits.float().cpu().numpy()                              # [B, C]

    def decode(self, split: Split, features: Features, collected: list) -> np.ndarray:
        """Class ids [n] (or scores [n] for regression) in the split's order: predict's own
        decision (features.label_of) on the logits."""
        out = np.zeros(len(split), dtype=np.float32 if self.spec.is_regression else np.int64)
        if len(collected):
            out[features.example] = label_of(np.stack(collected))
        return out

    def evaluate(self, split: Split, predictions: np.ndarray) -> dict[str, float]:
        assert split.labels is not None, "dev splits are always labelled (the readers require the label)"
        return metrics.compute(self.spec, predictions, split.labels)

    def score(self, dev_metrics: dict) -> float:
        return metrics.task_score(self.spec, dev_metrics)

    def baseline(self, split: Split) -> np.ndarray | None:
        """The split's own most frequent class for every example, the best any constant answer
        scores (None for regression)."""
        gold = split.labels if split.labels is not None else self.data.train.labels
        if self.spec.is_regression or gold is None or not len(gold):
            return None
        return np.full(len(split), np.bincount(gold.astype(np.int64)).argmax(), dtype=np.int64)

    def format(self, dev_metrics: dict) -> str:
        return f"{metrics.metric_header(self.spec, list(dev_metrics))} {metrics.format_metrics(self.spec, dev_metrics)}"

    def write_predictions(self, split: Split, predictions, directory: Path, kind: str) -> list[Path]:
        """`index<TAB>prediction` files, labels spelled as in the data: dev_predictions/<split>.tsv,
        test_predictions/<split>.tsv."""
        values = prediction_strings(self.spec, predictions)
        return [write_predictions(Path(directory) / f"{kind}_predictions" / f"{split.name}.tsv", split.ids, values)]
