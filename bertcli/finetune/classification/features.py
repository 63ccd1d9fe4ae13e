"""Tokenize sentence (pair) classification splits once: one feature per example.

Pairs are encoded by the checkpoint's own `tokenizers.Tokenizer` with its post-processor
(`[CLS] A [SEP] B [SEP]`, RoBERTa's `<s> A </s></s> B </s>`) and truncated longest-first to
max_seq_length special tokens included: the same code path as transformers' fast tokenizers,
so inputs equal those of transformers' run_glue.
"""

from __future__ import annotations

import numpy as np

from bertcli.core import console
from bertcli.finetune.classification.glue_data import Split
from bertcli.finetune.task import Features

CHUNK = 8192  # examples per encode_batch call (bounds memory, feeds the progress bar)


def encode_split(tokenizer, split: Split, max_len: int, zero_types: bool = False,
                 desc: str | None = None) -> Features:
    """Encode one split. `tokenizer` is a `tokenizers.Tokenizer` (copied, never modified);
    `zero_types` for models with a single token type (RoBERTa)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer.to_str())
    tok.no_padding()
    tok.enable_truncation(max_length=max_len, strategy="longest_first")
    ids, types, lengths = [], [], [0]
    with console.progress(desc or f"tokenizing {split.name}", total=len(split)) as bar:
        for start in range(0, len(split), CHUNK):
            a = split.text_a[start:start + CHUNK]
            inputs = list(zip(a, split.text_b[start:start + CHUNK])) if split.text_b is not None else a
            for enc in tok.encode_batch(inputs):
                ids.append(np.asarray(enc.ids, dtype=np.int32))
                types.append(np.asarray(enc.type_ids, dtype=np.int8))
                lengths.append(len(enc.ids))
            bar.advance(len(a))
    flat_types = np.concatenate(types)
    if zero_types:
        flat_types[:] = 0
    labels = {"labels": split.labels} if split.labels is not None else {}
    return Features(np.concatenate(ids), flat_types, np.cumsum(lengths, dtype=np.int64),
                    np.arange(len(split), dtype=np.int64), per_feature=labels)
