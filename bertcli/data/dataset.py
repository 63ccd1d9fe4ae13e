"""Reading built data: the DatasetDict and a torch Dataset of rows keyed by (epoch, index)
(the trainer's sampler, bertcli.train.sampler, yields those keys).

Rows are served as numpy views straight from the memory-mapped Arrow columns (no Python lists),
so a DataLoader worker spends its time in the collator, not in conversions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bertcli.core.errors import UserError

if TYPE_CHECKING:
    import pyarrow as pa

COLUMNS = ("input_ids", "token_type_ids", "pair_label", "masked_positions", "masked_ids", "word_starts")


def load_data(path: str | Path):
    """The built DatasetDict (train, validation) of a data directory."""
    import datasets

    path = Path(path)
    if not (path / "dataset_dict.json").is_file():
        raise UserError("not a built data directory (no dataset_dict.json)", where=str(path),
                        fix="build it with `bertcli build-data --recipe R`")
    return datasets.load_from_disk(str(path))


class _Column:
    """One Arrow column as numpy chunks: row i -> values[offsets[i]:offsets[i+1]] (lists) or
    values[i] (scalars)."""

    def __init__(self, chunked: pa.ChunkedArray) -> None:
        import pyarrow as pa

        self.is_list = pa.types.is_list(chunked.type) or pa.types.is_large_list(chunked.type)
        self.chunks = []
        sizes = []
        for ch in chunked.chunks:
            if self.is_list:
                self.chunks.append((ch.offsets.to_numpy(), ch.values.to_numpy(zero_copy_only=False)))
            else:
                self.chunks.append(ch.to_numpy(zero_copy_only=False))
            sizes.append(len(ch))
        self.first = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)

    def __getitem__(self, i: int):
        c = int(np.searchsorted(self.first, i, side="right")) - 1
        j = i - int(self.first[c])
        if self.is_list:
            offsets, values = self.chunks[c]
            return values[offsets[j] : offsets[j + 1]]
        return self.chunks[c][j]


class PretrainDataset(torch.utils.data.Dataset):
    """Rows of one split. `ds[(epoch, index)]` (or `ds[index]`, epoch 0) -> dict of the split's
    columns (numpy arrays; pair_label an int) plus "epoch" and "index"."""

    def __init__(self, split) -> None:
        self.split = split
        self.columns = [c for c in COLUMNS if c in split.column_names]
        self._cols: dict | None = None

    def __len__(self) -> int:
        return len(self.split)

    def __getstate__(self) -> dict[str, Any]:
        return {"split": self.split, "columns": self.columns, "_cols": None}

    def _columns(self) -> dict:
        if self._cols is None:
            table = self.split.data.table
            self._cols = {c: _Column(table.column(c)) for c in self.columns}
        return self._cols

    def __getitem__(self, key) -> dict:
        epoch, index = key if isinstance(key, tuple) else (0, key)
        index = int(index)
        if not 0 <= index < len(self.split):
            raise IndexError(index)
        if self.split._indices is not None:  # a select()/shuffle() view: go through datasets
            raw = self.split[index]
            row = {c: (np.asarray(raw[c]) if isinstance(raw[c], list) else raw[c]) for c in self.columns}
        else:
            cols = self._columns()
            row = {c: cols[c][index] for c in self.columns}
        if "pair_label" in row:
            row["pair_label"] = int(row["pair_label"])
        row["epoch"], row["index"] = int(epoch), index
        return row

    def __getitems__(self, keys) -> list[dict]:
        return [self[k] for k in keys]
