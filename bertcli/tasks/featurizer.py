"""What a featurizer is: the one path from a record to model windows and from model outputs back
to a prediction, shared by fine-tuning (its dev / test predictions) and by `bertcli predict` /
`bertcli export --dev` / `bertcli features`.

A featurizer (one per head kind, `bertcli.tasks.heads.HEADS[...].featurizer(ctx)`) has
    encode(rec, where) -> [window]           one or more windows of one record; a window has
                                             `.ids` and `.type_ids` (a tokenizers.Encoding or
                                             any object with those)
    decode(rec, windows, outputs) -> dict    `outputs[i]` holds window i's rows of every head
                                             output, per-token outputs cut to its real tokens
or, where windows are built for many records at once (SQuAD: contexts tokenized once),
    encode_many([(where, rec)]) -> [[window]] and decode_many(items, windows, outputs) -> [dict].
Fine-tuning calls the same functions on whole splits (the batched forms in each task's
features module), so a model is served exactly the windows it was trained and scored on.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import TYPE_CHECKING

import numpy as np

from bertcli.core.errors import UserError
from bertcli.io import records

if TYPE_CHECKING:
    from bertcli.tokenization.load import TokenizerInfo

# the record fields a text (and its pair) may come under: GLUE's, HF datasets' and ours
TEXT = ("text", "sentence", "text_a", "sentence1", "question1", "premise")
PAIR = ("text_pair", "text_b", "sentence2", "question2", "hypothesis")


@dataclass
class Context:
    """What every featurizer may need.

    info        the checkpoint's tokenizer (bertcli.tokenization.load.TokenizerInfo)
    labels      the head's id2label names (None without a labelled head)
    max_length  tokens per window, special tokens included
    options     head settings: fine-tuning's (results.json `hyperparameters`) under the
                command's own (--top-k, --pooling, --allow-impossible, ...)
    """

    info: TokenizerInfo
    labels: tuple[str, ...] | None
    max_length: int
    options: dict = dc_field(default_factory=dict)

    @property
    def tokenizer(self):
        """A copy of the tokenizer truncating to max_length (longest first)."""
        return truncating(self.info.tokenizer, self.max_length)

    def option(self, key: str, default):
        value = self.options.get(key)
        return default if value is None else value


def truncating(tokenizer, max_length: int | None, strategy: str = "longest_first"):
    """A copy of a `tokenizers.Tokenizer` without padding, truncating to `max_length` (None: no
    truncation); the checkpoint's own tokenizer is never modified."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer.to_str())
    tok.no_padding()
    if max_length is None:
        tok.no_truncation()
    else:
        tok.enable_truncation(max_length=max_length, strategy=strategy)
    return tok


def field(rec: dict, names: tuple[str, ...], where: str, required: bool = True):
    """The first of `names` present in `rec` (None when absent and not required)."""
    for name in names:
        if name in rec and rec[name] is not None:
            return rec[name]
    if required:
        raise UserError(f"the record has none of the fields {', '.join(names)}", where=where,
                        fix=f"name the text field {names[0]} (found: {', '.join(map(str, rec)) or 'nothing'})")
    return None


def text_of(rec: dict, where: str) -> tuple[str, str | None]:
    """(text, pair or None) of a record, both strings."""
    name = next((n for n in TEXT if n in rec), None)
    if name is None:
        field(rec, TEXT, where)                    # the message naming the fields looked for
    assert name is not None, "field() raises when the record has no text field"
    pair_name = next((n for n in PAIR if rec.get(n) is not None), None)
    return (records.text(rec, name, where),       # strict: a string, never null, a list or a number
            records.text(rec, pair_name, where) if pair_name else None)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


class TextFeaturizer:
    """A text (pair) -> one window, truncated longest-first to max_length (as classification)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.tokenizer = truncating(ctx.info.tokenizer, ctx.max_length)

    def encode(self, rec: dict, where: str) -> list:
        text, pair = text_of(rec, where)
        return [self.tokenizer.encode(text, pair) if pair is not None else self.tokenizer.encode(text)]
