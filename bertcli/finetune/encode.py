"""Tokenize GLUE splits once, then serve padded batches.

Pairs are encoded by the checkpoint's own `tokenizers.Tokenizer` with its post-processor
(`[CLS] A [SEP] B [SEP]`, RoBERTa's `<s> A </s></s> B </s>`) and truncated longest-first to
max_seq_length special tokens included: the same code path as transformers' fast tokenizers,
so inputs equal those of transformers' run_glue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertcli import console
from bertcli.finetune.readers import Split

CHUNK = 8192  # examples per encode_batch call (bounds memory, feeds the progress bar)


@dataclass
class Encoded:
    """Token ids of a whole split, flat: example i is ids[offsets[i]:offsets[i + 1]]."""

    ids: np.ndarray          # int32 [total tokens]
    types: np.ndarray        # int8  [total tokens]
    offsets: np.ndarray      # int64 [n + 1]
    labels: np.ndarray | None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def encode_split(tokenizer, split: Split, max_len: int, zero_types: bool = False,
                 desc: str | None = None) -> Encoded:
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
    return Encoded(np.concatenate(ids), flat_types, np.cumsum(lengths, dtype=np.int64), split.labels)


def collate(data: Encoded, index: np.ndarray, pad_id: int, multiple: int = 8) -> dict[str, torch.Tensor]:
    """Batch of the examples `index`, right-padded to the longest rounded up to `multiple`.

    input_ids, token_type_ids, attention_mask: LongTensor [B, T]; labels: [B] (long, or float
    for regression) when the split has labels.
    """
    starts, ends = data.offsets[index], data.offsets[index + 1]
    longest = int((ends - starts).max())
    width = -(-longest // multiple) * multiple
    ids = np.full((len(index), width), pad_id, dtype=np.int64)
    types = np.zeros((len(index), width), dtype=np.int64)
    mask = np.zeros((len(index), width), dtype=np.int64)
    for row, (s, e) in enumerate(zip(starts, ends)):
        n = e - s
        ids[row, :n] = data.ids[s:e]
        types[row, :n] = data.types[s:e]
        mask[row, :n] = 1
    batch = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(types),
             "attention_mask": torch.from_numpy(mask)}
    if data.labels is not None:
        batch["labels"] = torch.from_numpy(data.labels[index])
    return batch


def eval_batches(data: Encoded, batch_size: int) -> list[np.ndarray]:
    """Example indices in batches of similar length (less padding); predictions are put back in
    order by the caller through these indices."""
    order = np.argsort(data.lengths, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
