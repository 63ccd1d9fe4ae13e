"""Featurizers of the heads a pretrained checkpoint already has: fill-mask (the masked-LM head)
and features (the bare encoder). `bertcli features` pools its layers with the same `pool` and
encodes texts with the same tokenizer settings as predict's `features`, so both give one vector.
"""

from __future__ import annotations

import numpy as np

from bertcli.config.families import MASK_SPELLINGS
from bertcli.core.errors import UserError
from bertcli.tasks.featurizer import TEXT, Context, TextFeaturizer, field, softmax, truncating

POOLINGS = ("mean", "cls", "pooler")


def pool(states, mask, how: str):
    """[B, T, D] states (numpy or torch), mask [B, T] of real tokens -> [B, D]: the mean over the
    real tokens (special tokens included, padding never), or the first token ([CLS] / <s>)."""
    if how == "cls":
        return states[:, 0]
    m = mask[..., None].astype(states.dtype) if isinstance(states, np.ndarray) else mask[..., None].to(states.dtype)
    return (states * m).sum(1) / m.sum(1)


class FeaturesFeaturizer(TextFeaturizer):
    """One vector per record: `mean`, `cls` (see pool) or the pooler's output (`pooler`,
    BERT/ALBERT)."""

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.pooling = ctx.option("pooling", "mean")
        if self.pooling not in POOLINGS:
            raise UserError(f"unknown pooling {self.pooling!r}", fix="use mean, cls or pooler")

    def decode(self, rec, windows, outputs) -> dict:
        out = outputs[0]
        if self.pooling == "pooler":
            if "pooler_output" not in out:
                raise UserError("this model has no pooler output", fix="use --pooling mean or cls")
            vec = out["pooler_output"]
        else:
            h = out["last_hidden_state"]                                 # [T, H] real tokens
            vec = pool(h[None], np.ones((1, len(h)), dtype=bool), self.pooling)[0]
        return {"embedding": [round(float(v), 6) for v in vec]}


class FillMaskFeaturizer:
    """A text with mask tokens (any family's spelling) -> the top_k candidates at each mask."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.tokenizer = truncating(ctx.info.tokenizer, ctx.max_length)
        self.top_k = int(ctx.option("top_k", 5))
        self.mask = ctx.info.tokens["mask"]

    def encode(self, rec, where):
        text = field(rec, TEXT, where)
        if self.mask not in text:
            other = next((m for m in MASK_SPELLINGS if m in text), None)
            text = text.replace(other, self.mask) if other else text
        return [self.tokenizer.encode(text)]

    def decode(self, rec, windows, outputs) -> dict:
        ids = windows[0].ids
        logits = outputs[0]["logits"]                                  # [T, V]
        masks = []
        for pos in (i for i, t in enumerate(ids) if t == self.ctx.info.mask_id):
            p = softmax(logits[pos].astype(np.float64))
            top = np.argsort(-p, kind="stable")[:self.top_k]
            masks.append({"position": pos, "candidates": [
                {"token": self.tokenizer.id_to_token(int(i)), "id": int(i), "probability": round(float(p[i]), 6)}
                for i in top]})
        return {"masks": masks}
