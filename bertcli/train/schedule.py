"""Learning-rate schedules: linear warmup from 0 to the peak, then linear / polynomial / cosine
decay to `min_lr_ratio * peak` at `max_steps`, or constant.

Steps are counted from 1: `lr_multiplier(s)` is the multiplier of the s-th optimizer update, so
update 1 runs at peak / warmup_steps, update `warmup_steps` at the peak, and update `max_steps`
at `min_lr_ratio * peak` (exactly as Google BERT's and ALBERT's polynomial_decay with power 1).
"""

from __future__ import annotations

import math
from functools import partial

import torch

KINDS = ("linear", "polynomial", "cosine", "constant")


def lr_multiplier(step: int, warmup_steps: int, max_steps: int, kind: str = "linear",
                  power: float = 1.0, min_lr_ratio: float = 0.0) -> float:
    """Multiplier of the peak learning rate for update number `step` (1-based)."""
    if kind not in KINDS:
        raise ValueError(f"unknown schedule {kind!r}; expected one of {KINDS}")
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    if kind == "constant":
        return 1.0
    decay_steps = max(1, max_steps - warmup_steps)
    progress = min(1.0, max(0.0, (step - warmup_steps) / decay_steps))
    if kind == "linear":
        shape = 1.0 - progress
    elif kind == "polynomial":
        shape = (1.0 - progress) ** power
    else:  # cosine: half a period, from 1 down to 0
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr_ratio + (1.0 - min_lr_ratio) * shape


def build_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int, max_steps: int,
                    kind: str = "linear", power: float = 1.0, min_lr_ratio: float = 0.0
                    ) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR following `lr_multiplier`; call `scheduler.step()` after each optimizer step.

    LambdaLR evaluates its function at 0 on construction (the lr of the first update) and at k
    after k calls to step(), hence the +1."""
    fn = partial(_shifted, warmup_steps=warmup_steps, max_steps=max_steps, kind=kind, power=power,
                 min_lr_ratio=min_lr_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)


def _shifted(epoch: int, **kw) -> float:
    return lr_multiplier(epoch + 1, **kw)
