"""Per-task prediction: records -> encodings, model outputs -> one JSON object per record.

A decoder has
    encode(rec, where) -> [tokenizers.Encoding]   one or more windows of one record
    decode(rec, windows, outputs) -> dict          `outputs[i]` holds window i's rows of every
                                                   graph output, trimmed to its real tokens
Decoders are registered by task name (the names of heads.HEADS), so a new head kind adds its
decoder next to its HeadKind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from bertcli.errors import UserError
from bertcli.export.inputs import field

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from bertcli.tokenizer import TokenizerInfo

TEXT = ("text", "sentence", "text_a", "sentence1", "question1", "premise")
PAIR = ("text_pair", "text_b", "sentence2", "question2", "hypothesis")


@dataclass
class Context:
    """What every decoder may need: the tokenizer (truncating to `max_length`), its ids, the labels."""

    tokenizer: Tokenizer       # truncation set to max_length
    info: TokenizerInfo
    labels: tuple[str, ...] | None
    max_length: int
    options: dict


DECODERS: dict[str, Callable[[Context], object]] = {}


def decoder(task: str):
    def add(factory):
        DECODERS[task] = factory
        return factory
    return add


def make_decoder(task: str, ctx: Context):
    from bertcli.export import decode_spans  # noqa: F401 (registers the NER and QA decoders)

    if task not in DECODERS:
        raise UserError(f"bertcli predict has no decoder for the task {task!r}", fix="tasks: " + ", ".join(DECODERS))
    return DECODERS[task](ctx)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _text_inputs(ctx: Context, rec: dict, where: str):
    text = field(rec, TEXT, where)
    pair = field(rec, PAIR, where, required=False)
    if not isinstance(text, str) or (pair is not None and not isinstance(pair, str)):
        raise UserError("the text fields must hold strings", where=where)
    return [ctx.tokenizer.encode(text, pair) if pair is not None else ctx.tokenizer.encode(text)]


@decoder("classification")
class Classify:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        if not ctx.labels:
            raise UserError("the model's config.json has no labels (id2label)", fix="export a fine-tuned classifier")

    def encode(self, rec, where):
        return _text_inputs(self.ctx, rec, where)

    def decode(self, rec, windows, outputs):
        logits = outputs[0]["logits"]                                  # [C]
        labels = self.ctx.labels
        if len(labels) == 1:                                           # regression
            return {"score": float(logits[0])}
        p = softmax(logits.astype(np.float64))
        best = int(p.argmax())
        return {"label": labels[best], "label_id": best,
                "probabilities": {name: round(float(q), 6) for name, q in zip(labels, p)}}


@decoder("fill-mask")
class FillMask:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.top_k = int(ctx.options.get("top_k") or 5)
        self.mask = ctx.info.tokens["mask"]

    def encode(self, rec, where):
        from bertcli.model.fill_mask import MASK_SPELLINGS

        text = field(rec, TEXT, where)
        if self.mask not in text:
            other = next((m for m in MASK_SPELLINGS if m in text), None)
            text = text.replace(other, self.mask) if other else text
        return [self.ctx.tokenizer.encode(text)]

    def decode(self, rec, windows, outputs):
        ids = windows[0].ids
        logits = outputs[0]["logits"]                                  # [T, V]
        masks = []
        for pos in (i for i, t in enumerate(ids) if t == self.ctx.info.mask_id):
            p = softmax(logits[pos].astype(np.float64))
            top = np.argsort(-p, kind="stable")[:self.top_k]
            masks.append({"position": pos, "candidates": [
                {"token": self.ctx.tokenizer.id_to_token(int(i)), "id": int(i), "probability": round(float(p[i]), 6)}
                for i in top]})
        return {"masks": masks}


@decoder("features")
class Features:
    """One vector per record: the mean of the last hidden states over real tokens (`mean`), the
    [CLS] / <s> state (`cls`), or the pooler's output (`pooler`, BERT/ALBERT)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.pooling = ctx.options.get("pooling") or "mean"
        if self.pooling not in ("mean", "cls", "pooler"):
            raise UserError(f"unknown pooling {self.pooling!r}", fix="use mean, cls or pooler")

    def encode(self, rec, where):
        return _text_inputs(self.ctx, rec, where)

    def decode(self, rec, windows, outputs):
        out = outputs[0]
        if self.pooling == "pooler":
            if "pooler_output" not in out:
                raise UserError("this model has no pooler output", fix="use --pooling mean or cls")
            vec = out["pooler_output"]
        elif self.pooling == "cls":
            vec = out["last_hidden_state"][0]
        else:
            vec = out["last_hidden_state"].mean(0)                     # over the real tokens
        return {"embedding": [round(float(v), 6) for v in vec]}
