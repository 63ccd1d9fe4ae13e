"""Learning-rate schedules: linear warmup from 0 to the peak, then linear / polynomial / cosine
decay to `min_lr_ratio * peak` at `max_steps`, or constant, or warmup-stable-decay.

`wsd` (warmup-stable-decay, the trapezoid of ModernBERT, Warner et al. 2024, section 2.2.2):
linear warmup, then the peak held constant, then over the last `decay_fraction` of `max_steps`
a decay to `min_lr_ratio * peak` shaped 1 - sqrt(progress) (ModernBERT's "1-sqrt" decay, as in
Hägele et al. 2024). A run can be stopped at the end of the stable phase and decayed later.

Steps are counted from 1: `lr_multiplier(s)` is the multiplier of the s-th optimizer update, so
update 1 runs at peak / warmup_steps, update `warmup_steps` at the peak, and update `max_steps`
at `min_lr_ratio * peak` (exactly as Google BERT's and ALBERT's polynomial_decay with power 1).
"""

from __future__ import annotations

import math
from functools import partial

import torch

KINDS = ("linear", "polynomial", "cosine", "constant", "wsd")


def lr_multiplier(step: float, warmup_steps: float, max_steps: float, kind: str = "linear",
                  power: float = 1.0, min_lr_ratio: float = 0.0, decay_fraction: float = 0.1) -> float:
    """Multiplier of the peak learning rate for update number `step` (1-based)."""
    if kind not in KINDS:
        raise ValueError(f"unknown schedule {kind!r}; expected one of {KINDS}")
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    if kind == "constant":
        return 1.0
    start = warmup_steps
    if kind == "wsd":  # the decay takes the last decay_fraction of the run (never the warmup)
        start = max(warmup_steps, max_steps - round(decay_fraction * max_steps))
    decay_steps = max(1, max_steps - start)
    progress = min(1.0, max(0.0, (step - start) / decay_steps))
    if kind == "wsd":
        shape = 1.0 - math.sqrt(progress)
    elif kind == "linear":
        shape = 1.0 - progress
    elif kind == "polynomial":
        shape = (1.0 - progress) ** power
    else:  # cosine: half a period, from 1 down to 0
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr_ratio + (1.0 - min_lr_ratio) * shape


def build_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int, max_steps: int,
                    kind: str = "linear", power: float = 1.0, min_lr_ratio: float = 0.0,
                    decay_fraction: float = 0.1) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR following `lr_multiplier`; call `scheduler.step()` after each optimizer step.

    LambdaLR evaluates its function at 0 on construction (the lr of the first update) and at k
    after k calls to step(), hence the +1."""
    fn = partial(_shifted, warmup_steps=warmup_steps, max_steps=max_steps, kind=kind, power=power,
                 min_lr_ratio=min_lr_ratio, decay_fraction=decay_fraction)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)


def _shifted(epoch: int, **kw) -> float:
    return lr_multiplier(epoch + 1, **kw)
