"""The global batch under torchrun: every process's embeddings (and text ids), with the gradient
kept for the local slice only.

Each process holds a contiguous shard of the global batch (finetune/ddp.py: `np.array_split`, so
shards may differ in size, a short last batch giving the last ranks fewer rows or none). The
step gathers every shard's embeddings into the ONE-PROCESS layout of the global batch and every
process computes the one-process loss over it: the same value everywhere, whose gradient reaches
only the local slice (the other slices are constants here). The sum over processes of those
gradients (the engine's all-reduce) is then exactly the one-process gradient: every term of the
loss that involves shard r's embeddings is differentiated on rank r. The loss itself is cheap
next to the encoder (a [N, N (1 + k)] similarity matrix), so computing it on every rank costs
little and needs no collective in the backward pass (GradCache's re-forwards stay local).

Uneven shards are gathered at their own sizes: each is padded to the largest for the
collective, and the padding is cut off again before anything is scored, so no row is repeated
(a repeated row would be a false negative of its own anchor) and none is masked.

Single process (or torch.distributed not initialized): the tensors themselves.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without an initialized process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Shards:
    """Every process's number of examples in this step's global batch (one all_gather of a count,
    made once per step), and the gathers that reassemble the global batch from the shards."""

    def __init__(self, local: int, device: torch.device):
        self.rank, size = world()
        self.sizes = [local]
        if size > 1:
            counts = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(size)]
            dist.all_gather(counts, torch.tensor([local], dtype=torch.int64, device=device))
            self.sizes = [int(c.item()) for c in counts]

    @property
    def total(self) -> int:
        return sum(self.sizes)

    def parts(self, x: Tensor, rows: int = 1) -> list[Tensor]:
        """x [rows * n_local, ...] -> every rank's x [rows * n_r, ...], in rank order; this rank's
        part is `x` itself (with its graph), the others are constants."""
        if len(self.sizes) == 1:
            return [x]
        longest = rows * max(self.sizes)
        padded = x.detach().new_zeros((longest, *x.shape[1:]))
        padded[:len(x)] = x.detach()
        buffers = [torch.empty_like(padded) for _ in self.sizes]
        dist.all_gather(buffers, padded.contiguous())
        out = [b[:rows * n] for b, n in zip(buffers, self.sizes)]     # the padding cut off
        out[self.rank] = x
        return out

    def whole(self, x: Tensor, rows: int = 1) -> Tensor:
        """The global batch in the one-process layout: x [rows * n_local, ...] laid out as `rows`
        blocks of the shard's n_local examples (anchors; positives; each hard-negative column)
        -> [rows * N, ...], the same blocks over all N examples in rank (= example) order."""
        parts = self.parts(x, rows)
        if len(parts) == 1:
            return x
        tail = x.shape[1:]
        blocks = [p.reshape(rows, n, *tail) for p, n in zip(parts, self.sizes)]   # [rows, n_r, ...]
        return torch.cat(blocks, dim=1).reshape(rows * self.total, *tail)
