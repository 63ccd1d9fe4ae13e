"""Candidates from the global batch under DDP: every process's embeddings (and text ids), with the
gradient kept for the local slice only.

Each process scores its own anchors against all processes' positives and negatives; the loss of
process r reaches only r's embeddings, and DDP's average of the parameter gradients combines
them (SimCLR's and OpenCLIP's `local_loss` scheme: the other processes' terms for r's
embeddings are computed by them, on their anchors). Every process must pass tensors of the same
shape (the same batch size: DDP's sampler pads the last batch to it).

Single process (or torch.distributed not initialized): the tensors themselves, rank 0.
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


def gather(x: Tensor) -> Tensor:
    """[W * n, ...] the concatenation over processes of x [n, ...], in rank order; this
    process's slice is `x` itself (with its graph), the others are constants."""
    rank, size = world()
    if size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x.detach().contiguous())
    parts[rank] = x
    return torch.cat(parts)

