"""Sentence (pair) classification and regression: one window per example, for fine-tuning and
for predict alike.

Pairs are encoded by the checkpoint's own `tokenizers.Tokenizer` with its post-processor
(`[CLS] A [SEP] B [SEP]`, RoBERTa's `<s> A </s></s> B </s>`) and truncated longest-first to
max_seq_length special tokens included: the same code path as transformers' fast tokenizers,
so inputs equal those of transformers' run_glue. A prediction is the argmax class of the logits
(`label_of`), or the one output itself for regression.
"""

from __future__ import annotations

import numpy as np

from bertcli.core.errors import UserError
from bertcli.io import records
from bertcli.tasks.featurizer import TextFeaturizer, softmax


def label_of(logits: np.ndarray) -> np.ndarray:
    """[..., C] logits -> class ids [...] (the first of equal maxima); for regression (C = 1) the
    score itself. Fine-tuning's dev predictions and predict's labels are both this."""
    logits = np.asarray(logits, dtype=np.float32)
    return logits[..., 0] if logits.shape[-1] == 1 else logits.argmax(-1)


class SequenceFeaturizer(TextFeaturizer):
    """Text (pair) -> one window; logits [C] -> {label, label_id, probabilities} or {score}."""

    def decode(self, rec: dict, windows, outputs) -> dict:
        labels = self.ctx.labels
        if not labels:
            raise UserError("the model's config.json has no labels (id2label)", fix="export a fine-tuned classifier")
        logits = outputs[0]["logits"]                                  # [C]
        if len(labels) == 1:                                           # regression
            return {"score": float(label_of(logits))}
        p = softmax(logits.astype(np.float64))
        best = int(label_of(logits))
        return {"label": labels[best], "label_id": best,
                "probabilities": {name: round(float(q), 6) for name, q in zip(labels, p)}}


# ------------------------------------------------------------------------ export --dev metric
LABEL = ("label", "labels", "gold_label")


def dev_metric(labels: tuple[str, ...]):
    """(gold(rec, where), metric(gold, predictions)) of a labelled dev record set: label names
    (or ids) of the classifier (accuracy, macro-F1), numbers for regression (Pearson)."""
    index = {name: i for i, name in enumerate(labels)}

    def gold(rec: dict, where: str):
        name = next((k for k in LABEL if k in rec), None)
        if name is None:
            raise UserError("the dev record has no label field", where=where,
                            fix=f"give each record a `label` (one of {', '.join(labels)})")
        value = records.label(rec, name, where, regression=len(labels) == 1)   # checked: no null, list, object
        if len(labels) == 1:
            return value
        key = str(value)
        if key in index:
            return index[key]
        if key.lstrip("-").isdigit() and 0 <= int(key) < len(labels):
            return int(key)
        raise UserError(f"dev label {value!r} is not one of the model's labels ({', '.join(labels)})", where=where,
                        fix="the --dev set does not match this classifier's task")

    def metric(gold: list, preds: list[dict]) -> dict:
        if len(labels) == 1:
            y = np.array([p["score"] for p in preds])
            g = np.array(gold, dtype=np.float64)
            r = float(np.corrcoef(y, g)[0, 1]) if len(g) > 1 and g.std() > 0 and y.std() > 0 else 0.0
            return {"pearson": r}
        y = np.array([p["label_id"] for p in preds])
        g = np.array(gold)
        f1s = []
        for c in range(len(labels)):
            tp = int(((y == c) & (g == c)).sum())
            denom = int((y == c).sum() + (g == c).sum())
            f1s.append(2 * tp / denom if denom else 0.0)
        return {"accuracy": float((y == g).mean()), "macro_f1": float(np.mean(f1s))}
    return gold, metric
