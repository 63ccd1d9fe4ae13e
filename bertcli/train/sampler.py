"""Deterministic data order with a cursor, so a resumed run reads exactly the rows an
uninterrupted run would have read, without replaying the consumed ones.

The training stream is an endless sequence of positions 0, 1, 2, ...; position p is row
`perm_e[p % n]` of epoch e = p // n, where perm_e is a permutation drawn from (seed, e). Global
batch s is positions [s*B, (s+1)*B); process r of W reads its contiguous share
[s*B + r*B/W, s*B + (r+1)*B/W), cut into micro-batches. The cursor is the number of samples
consumed, always a multiple of B. Items are (epoch, index) pairs: dynamic masking draws from
(seed, epoch, index), so the masks do not depend on the number of processes or workers either.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from torch.utils.data import Sampler

from bertcli.core.errors import UserError


class EpochOrder:
    """Position -> (epoch, row) over `n` rows, shuffled per epoch from (seed, epoch)."""

    def __init__(self, n: int, seed: int, shuffle: bool = True):
        if n <= 0:
            raise UserError("the training split of the built data is empty",
                            fix="use a larger corpus or a smaller data.max_seq_length")
        self.n, self.seed, self.shuffle = n, seed, shuffle
        self._epoch, self._perm = -1, np.empty(0, dtype=np.int64)  # no epoch yet

    def permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._epoch = epoch
            if self.shuffle:
                self._perm = np.random.default_rng([self.seed, epoch, 0x5EED]).permutation(self.n)
            else:
                self._perm = np.arange(self.n)
        return self._perm

    def __getitem__(self, position: int) -> tuple[int, int]:
        epoch, offset = divmod(position, self.n)
        return epoch, int(self.permutation(epoch)[offset])


def split_batch(global_batch: int, world_size: int, micro_batch: int | None) -> tuple[int, int, int]:
    """(local batch, micro batch, accumulation steps) of one process, or a UserError."""
    if global_batch % world_size:
        raise UserError(f"train.batch_size {global_batch} is not divisible by the {world_size} processes",
                        fix="pick a batch size that is a multiple of the number of processes")
    local = global_batch // world_size
    micro = micro_batch or local
    if micro > local or local % micro:
        raise UserError(f"train.micro_batch_size {micro} does not divide the per-process batch {local} "
                        f"(batch_size {global_batch} / {world_size} processes)",
                        fix="choose a micro_batch_size that divides batch_size / processes")
    return local, micro, local // micro


class TrainBatchSampler(Sampler):
    """Endless micro-batches of (epoch, index) for one process, starting at `start_sample`."""

    def __init__(self, n_rows: int, global_batch: int, micro_batch: int, rank: int, world_size: int,
                 seed: int, start_sample: int = 0, shuffle: bool = True):
        if start_sample % global_batch:
            raise ValueError("the data cursor must sit at a global-batch boundary")
        self.order = EpochOrder(n_rows, seed, shuffle)
        self.global_batch, self.micro, self.rank, self.world = global_batch, micro_batch, rank, world_size
        self.local = global_batch // world_size
        self.start_sample = start_sample

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        base = self.start_sample
        while True:
            first = base + self.rank * self.local
            for k in range(0, self.local, self.micro):
                yield [self.order[p] for p in range(first + k, first + k + self.micro)]
            base += self.global_batch


class EvalBatchSampler(Sampler):
    """The first `max_rows` rows of the validation split in order (epoch 0), cut into batches of
    `micro_batch`, batch b on process b % W: the rows evaluated, and so the metrics, depend on
    neither the micro-batch size nor the number of processes, and do not change between runs."""

    def __init__(self, n_rows: int, micro_batch: int, rank: int, world_size: int, max_rows: int | None):
        n = n_rows if max_rows is None else min(n_rows, max_rows)
        chunks = [[(0, i) for i in range(start, min(n, start + micro_batch))] for start in range(0, n, micro_batch)]
        self.batches = chunks[rank::world_size]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)
