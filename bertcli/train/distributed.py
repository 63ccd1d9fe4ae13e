"""torch.distributed glue for runs launched by torchrun (RANK / WORLD_SIZE / LOCAL_RANK in the
environment): nccl on GPUs, gloo on CPUs, and small collectives used by the trainer.
Without torchrun every helper degrades to the single-process case."""

from __future__ import annotations

import atexit
import datetime
import gc
import json
import os
import typing
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bertcli.core import jsonout
from bertcli.train.precision import resolve_device


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def dropout_seed(self, seed: int) -> int:
        """The seed of this rank's dropout: each rank sees other rows, so it draws its own masks
        (one seed for all would repeat rank 0's masks on every rank's share)."""
        return seed * 1009 + self.rank


def init(device_spec: str = "auto", timeout_minutes: float = 120.0) -> Dist:
    """Join the process group torchrun set up (or none). The long timeout covers rank 0 building
    the tokenizer and data while the other ranks wait at a barrier."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_spec)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs: dict[str, typing.Any] = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=timeout_minutes), **kwargs)
        atexit.register(shutdown)   # fine-tuning keeps its group for the process (GLUE's tasks share it)
    return Dist(rank, world, local_rank, device)


def shutdown() -> None:
    """Leave the process group (a no-op when none is joined). The trainer's DDP wrapper outlives
    its run in a reference cycle, and its reducer holds the group and its last gloo work; left to
    the interpreter's teardown, gloo's threads can abort a finished process ("terminate called
    without an active exception", exit -6 after a complete run, seen in CI). So the cycle is
    collected first, while Python is whole, and destroy_process_group frees the group itself."""
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()


def all_reduce_sum(d: Dist, tensor: torch.Tensor) -> torch.Tensor:
    """In-place sum over processes (no-op alone); returns the tensor."""
    if d.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_gather_json(d: Dist, obj) -> list:
    """Every process's JSON-able `obj`, in rank order (as bytes over the process group: no pickle)."""
    if not d.enabled:
        return [obj]
    blob = torch.frombuffer(bytearray(jsonout.dumps(obj).encode()), dtype=torch.uint8).to(d.device)
    size = torch.tensor([blob.numel()], device=d.device)
    sizes = [torch.zeros_like(size) for _ in range(d.world_size)]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8, device=d.device)
    padded[: blob.numel()] = blob
    parts = [torch.zeros_like(padded) for _ in range(d.world_size)]
    dist.all_gather(parts, padded)
    return [json.loads(bytes(p[: int(s.item())].cpu().tolist()).decode()) for p, s in zip(parts, sizes)]
