"""What a sentence (pair) classifier predicts, apart from where its data comes from: the label
spec of the classification task. GLUE's presets (`glue.TaskSpec`) carry one each, beside their
file layout; `finetune classify` makes one from the training file's labels."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LabelSpec:
    labels: tuple[str, ...] | None          # label spellings in id order (as in the files and the
                                            # prediction files); None: regression
    names: tuple[str, ...] | None           # readable names in id order (config.json's id2label)
    metrics: tuple[str, ...]                # metric names (`metrics.METRICS`), main one first
    score_range: tuple[float, float] | None = None   # regression: predictions clipped to it (STS-B 0-5)

    @property
    def num_labels(self) -> int:
        """Outputs of the classifier: 1 for regression."""
        return 1 if self.labels is None else len(self.labels)

    @property
    def is_regression(self) -> bool:
        return self.labels is None
