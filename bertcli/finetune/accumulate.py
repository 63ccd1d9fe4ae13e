"""Gradient accumulation for fine-tuning (`finetune.micro_batch_size`), as pretraining's
train.micro_batch_size: each optimizer step's batch (under torchrun, this process's share of
the global batch, finetune/ddp.py) goes through forward/backward in micro-batches.

    choose(...)     the micro-batch size: an integer as given, `auto` the largest divisor of
                    the share that fits the device's free memory (bertcli.train.memory, probe
                    passes over the longest training rows), null / a size >= the share: none
                    (the engine's one-pass step, unchanged)
    backward(...)   one step's gradients from its micro-batches

The step is the whole batch's: each micro-batch's mean loss is weighted by its labelled units
(Task.loss_units) over the step's (global) count, so the summed gradient is the batch mean's,
equal to one pass at dropout 0 up to float rounding. A share that does not divide by the
micro-batch ends with a shorter one (nothing is padded or repeated; the weights make it exact).
embed (in-batch negatives: `--mini-batch-size` is its GradCache) and distill (a teacher's loss
terms) do not accumulate: `auto` gives them the whole share, an integer below it is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.finetune import ddp
from bertcli.train import memory
from bertcli.train.distributed import all_gather_json
from bertcli.train.precision import autocast

if TYPE_CHECKING:
    from bertcli.config.finetune_sections import FinetuneConfig
    from bertcli.finetune.task import Features, Task
    from bertcli.train.distributed import Dist

KEY = "finetune.micro_batch_size"
Collate = Callable[[np.ndarray], dict]     # training row indices -> their batch on the CPU (engine.collate)


def choose(task: Task, model: nn.Module, train: Features, cfg: FinetuneConfig, batch_size: int, batch_of: Collate,
           device: torch.device, d: Dist | None, teacher: object | None, optimizer: torch.optim.Optimizer) -> int | None:
    """The micro-batch of this process (None: the whole share in one pass). `batch_of(index)`:
    the engine's collate of those training rows."""
    want = cfg.micro_batch_size
    share = batch_size // (d.world_size if d is not None else 1)
    if want is None:
        return None
    if teacher is not None or not task.accumulates:
        what = "distill" if teacher is not None else task.name
        if want == "auto" or want >= share:
            return None
        raise UserError(f"{KEY} {want}: {what} does not accumulate gradients (its loss spans the batch)",
                        fix=f"set {KEY}: auto or null, or a smaller --batch-size"
                            + (" (embed: --mini-batch-size is its GradCache)" if what == "embed" else ""))
    if want != "auto":
        return None if want >= share else int(want)
    longest = np.argsort(-train.lengths, kind="stable")
    length = int(train.lengths[longest[0]]) if len(train) else 0

    def probe(m: int) -> None:            # forward + loss of the m longest training rows (what backward keeps)
        batch = {k: v.to(device) for k, v in batch_of(longest[:m]).items()}
        with autocast(cfg.precision, device):
            task.loss(task.forward(model, batch, train=True), batch)

    available, source = memory.available_bytes(device)
    per_seq, fixed = memory.measure(probe, model, sizes=(1, 2) if len(train) >= 2 else (1, 1))
    static = memory.static_bytes(model) - memory.resident_bytes(model, optimizer)
    plan = memory.plan(share, static, per_seq, fixed, available, source, None, length, key=KEY)
    micro = plan.micro
    if d is not None:                     # every process accumulates alike
        micro = min(all_gather_json(d, micro))
    console.log(f"{KEY} auto: {plan.describe(share, length)}"
                + (f"; {micro} to match the other processes" if micro != plan.micro else ""))
    return None if micro >= share else micro


def backward(model: nn.Module, task: Task, batch_of: Collate, index: np.ndarray, cfg: FinetuneConfig,
             device: torch.device, optimizer: torch.optim.Optimizer, scaler, params: list, micro: int,
             d: Dist | None, stopping: bool) -> tuple[float, bool]:
    """One step's gradients: this process's rows of `index` (the global batch) in micro-batches
    of `micro`, each loss weighted by its units over the step's global count, the gradients
    summed over processes under torchrun. (the batch's mean loss, whether any rank is stopping:
    then nothing is computed)."""
    local = ddp.shard(index, d) if d is not None else index
    batches = [batch_of(local[i:i + micro]) for i in range(0, len(local), micro)]   # on the CPU
    units = [task.loss_units(b) for b in batches]
    total, stopped = sum(units), False
    if d is not None:
        totals, stopped = ddp.sync_step(d, [total], stopping, device)
        total = totals[0]
    if stopped:
        return float("nan"), True
    optimizer.zero_grad(set_to_none=True)
    value = torch.zeros((), device=device)
    for batch, n in zip(batches, units):
        if not n:
            continue
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with autocast(cfg.precision, device):
            loss = task.loss(task.forward(model, batch, train=True), batch) * (n / total)   # its sum / the count
        scaler.scale(loss).backward()
        value = value + loss.detach().float()
    return (ddp.reduce_grads(d, params, value) if d is not None else float(value)), False
