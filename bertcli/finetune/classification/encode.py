"""A classification split -> fine-tuning's flat features, with the predict featurizer's own
tokenizer settings (bertcli.tasks.classification), so a model trains on the windows it is
served."""

from __future__ import annotations

import numpy as np

from bertcli.core import console
from bertcli.finetune.classification.glue_data import Split
from bertcli.finetune.task import Features
from bertcli.tasks.featurizer import truncating

CHUNK = 8192  # examples per encode_batch call (bounds memory, feeds the progress bar)


def encode_split(tokenizer, split: Split, max_len: int, zero_types: bool = False,
                 desc: str | None = None) -> Features:
    """Encode one split with SequenceFeaturizer's tokenizer. `tokenizer` is a
    `tokenizers.Tokenizer` (copied, never modified); `zero_types` for models with a single token
    type (RoBERTa)."""
    tok = truncating(tokenizer, max_len)
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
