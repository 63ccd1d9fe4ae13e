"""The fine-tuning engine under torchrun (RANK / WORLD_SIZE in the environment): what differs
from one process, in one place. The process group itself is pretraining's (train/distributed.py).

    finetune.batch_size is the global batch; each step the one-process batch (the same example
    order: every rank draws the same permutation) is cut into WORLD_SIZE contiguous shards, so
    it must divide by the world size (checked on every rank before the group is joined).
    Each rank's loss is its shard's sum over labelled units divided by the all-reduced global
    count (Task.loss_units), and the gradients are summed over ranks: the one-process mean.
    A task whose loss spans the global batch (Task.whole_batch_loss: embed's in-batch negatives,
    embed/gather.py) computes the one-process loss on every rank instead; distillation weights
    its soft and hard terms by their own global counts (distill/teacher.py).
    Dev/test batches are dealt out round-robin and the predictions gathered as JSON (arrays as
    raw bytes: exact, no pickle), so every rank decodes and scores the same full list and picks
    the same epoch. Only rank 0 writes (output_dir); the others build into a scratch folder that
    is thrown away. A stop signal on any rank is all-reduced with each step's unit count, so
    every rank stops at the same step. A dead rank makes the others fail within TIMEOUT_S.
Without torchrun (WORLD_SIZE unset or 1) every helper is the one-process case.
"""

from __future__ import annotations

import base64
import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertcli.core.errors import UserError

if TYPE_CHECKING:
    import torch

    from bertcli.train.distributed import Dist

# A collective that waits longer than this fails (gloo/nccl raise): a dead or stuck rank stops
# the others in about this many seconds instead of the default 30 minutes (pretraining's 120).
# Every rank does the same work between collectives (evaluation included), so waits are short.
TIMEOUT_S = 120


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def writes() -> bool:
    """True in the process that writes outputs, the marker, the lock and results.json (rank 0)."""
    return rank() == 0


def check_batch(batch_size: int) -> None:
    """Before the process group is joined, on every rank: the global batch must split evenly
    over the processes (each takes the same share, so that their gradients average alike)."""
    n = world_size()
    if n <= 1:
        return
    if batch_size % n:
        raise UserError(f"finetune.batch_size {batch_size} (the global batch) does not divide by the {n} processes "
                        f"torchrun started", fix=f"give --batch-size a multiple of {n}, or another --nproc_per_node")


def check_sweep(protocol: bool = False, shared: bool = False) -> None:
    """A sweep under torchrun runs each (rate, seed) run on all ranks, rank 0 writing the sweep
    folder (finetune/sweep.py); not a command's own protocol (GLUE's tasks, --from-mnli) nor a
    --shared folder, whose processes each choose their runs."""
    if world_size() > 1 and (protocol or shared):
        what = "--shared" if shared else "GLUE's sweep (its tasks, --from-mnli)"
        raise UserError(f"{what} does not run under torchrun (WORLD_SIZE={world_size()})",
                        fix="run it as one process per GPU (CUDA_VISIBLE_DEVICES=N), or each task as its own "
                            "torchrun sweep" if shared else "run each task as its own torchrun sweep, or run it as "
                            "one process")


def join(device_spec: str) -> Dist:
    """This process's place in the group (joined once: GLUE's tasks share it)."""
    from bertcli.train.distributed import init
    return init(device_spec, timeout_minutes=TIMEOUT_S / 60)


def shard(index: np.ndarray, d: Dist) -> np.ndarray:
    """This rank's contiguous part of a global batch (a short last batch gives the last ranks
    fewer rows, maybe none; no row is repeated)."""
    return np.array_split(index, d.world_size)[d.rank] if d.enabled else index


def sync_step(d: Dist, units: list[int], stopped: bool, device: torch.device) -> tuple[list[int], bool]:
    """(the step's global labelled units, per loss term; whether any rank was asked to stop): one all-reduce."""
    import torch

    from bertcli.train.distributed import all_reduce_sum
    t = all_reduce_sum(d, torch.tensor([*map(float, units), float(stopped)], dtype=torch.float64, device=device))
    return [int(v) for v in t[:-1].tolist()], bool(t[-1].item() > 0)


def reduce_grads(d: Dist, params: list, loss: torch.Tensor) -> float:
    """Sum every parameter's gradient and the loss over ranks, in one flat buffer. A parameter
    no rank gave a gradient keeps None (AdamW skips it, as in one process); the others get the
    sum, zeros standing in for a rank whose shard did not reach them. Returns the global loss."""
    import torch

    from bertcli.train.distributed import all_reduce_sum
    dev = loss.device
    has = all_reduce_sum(d, torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=dev))
    live = [p for p, h in zip(params, has.tolist()) if h > 0]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float() for p in live]
                     + [loss.detach().float().reshape(1)])
    all_reduce_sum(d, flat)
    at = 0
    for p in live:
        n = p.numel()
        p.grad = flat[at:at + n].view_as(p).to(p.dtype)
        at += n
    return float(flat[-1])


@contextlib.contextmanager
def peers(d: Dist | None) -> Iterator[None]:
    """Under torchrun, a collective that fails (a peer died: gloo sees its socket close; or
    TIMEOUT_S passed) becomes one message instead of the backend's traceback."""
    try:
        yield
    except RuntimeError as e:
        if d is None or not d.enabled:
            raise
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise UserError(f"rank {d.rank}: another process of this torchrun job stopped or stopped answering "
                        f"({first}); nothing was written by this run",
                        fix=f"see that process's own message; a silent one is given up on after {TIMEOUT_S} s") from e


# ------------------------------------------------------------------------ predictions as JSON
def _encode(x: Any) -> Any:
    if isinstance(x, np.ndarray | np.generic):
        a = np.asarray(x).copy(order="C")        # (ascontiguousarray would make a scalar 1-d)
        return {"b": base64.b64encode(a.tobytes()).decode(), "d": a.dtype.str, "s": list(a.shape),
                "scalar": isinstance(x, np.generic)}
    if isinstance(x, tuple | list):
        return {"t" if isinstance(x, tuple) else "l": [_encode(v) for v in x]}
    if x is None or isinstance(x, bool | int | float | str):
        return {"v": x}
    raise TypeError(f"cannot gather a {type(x).__name__} prediction row")


def _decode(x: dict) -> Any:
    if "b" in x:
        a = np.frombuffer(base64.b64decode(x["b"]), dtype=np.dtype(x["d"])).reshape(x["s"]).copy()
        return a[()] if x["scalar"] else a
    if "t" in x:
        return tuple(_decode(v) for v in x["t"])
    if "l" in x:
        return [_decode(v) for v in x["l"]]
    return x["v"]


def gather_rows(d: Dist, rows: dict[int, Any], n: int) -> list:
    """The rows every rank collected ({example index: row}), merged into one list of `n` in order."""
    if not d.enabled:
        return [rows.get(i) for i in range(n)]
    from bertcli.train.distributed import all_gather_json
    out: list = [None] * n
    for part in all_gather_json(d, [[int(i), _encode(r)] for i, r in rows.items()]):
        for i, r in part:
            out[i] = _decode(r)
    return out


@contextlib.contextmanager
def output_dir(d: Dist | None, build) -> Iterator[Path]:
    """`build()` (the engine's `building(final, recipe)`) on rank 0; elsewhere a scratch folder,
    removed after, so every rank runs the same code and only rank 0 leaves files."""
    if d is None or d.main:
        with build() as tmp:
            yield tmp
        return
    with tempfile.TemporaryDirectory(prefix="bertcli-rank") as scratch:
        yield Path(scratch)
