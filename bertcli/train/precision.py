"""Devices, mixed precision and the gradient step guard, shared by pretraining and fine-tuning.

    resolve_device("auto" | "cpu" | "cuda" | "cuda:1" | "mps") -> torch.device
    autocast(precision, device)      context: fp32 = nothing, bf16 / fp16 = torch.autocast
    make_grad_scaler(precision, device)  a GradScaler, enabled for fp16 only
    clip_and_check(params, max_norm, scaler) -> grad norm (float; inf/nan when not finite)
    StepGuard(max_bad_steps)         counts skipped non-finite steps, stops after too many
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterable

import torch

from bertcli.core.errors import Diverged, UserError

PRECISIONS = ("fp32", "bf16", "fp16")


def resolve_device(spec: str = "auto", where: str = "train.device") -> torch.device:
    """`auto`: the CUDA device of this process (LOCAL_RANK under torchrun) when CUDA is available,
    else the CPU. Explicit specs are checked so a typo or a missing GPU is a clear error naming
    the recipe key `where`."""
    import os

    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        return torch.device("cpu")
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError):
        raise UserError(f"device {spec!r} is not a torch device", where=where,
                        fix="use auto, cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {spec!r}: CUDA is not available on this machine", where=where,
                            fix="use device: auto or cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"device {spec!r}: only {torch.cuda.device_count()} CUDA device(s)",
                            where=where)
    elif device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise UserError("device 'mps' is not available on this machine", where=where)
    elif device.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"device {spec!r} is not supported", where=where, fix="use auto, cpu or cuda")
    return device


def check_precision(precision: str, device: torch.device) -> None:
    """Raise a UserError for combinations that cannot run (fp16 loss scaling needs CUDA)."""
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r}", fix="use fp32, bf16 or fp16")
    if precision == "fp16" and device.type != "cuda":
        raise UserError(f"precision fp16 needs CUDA (loss scaling); this run is on {device.type}",
                        fix="use precision: bf16 or fp32 on CPU")
    if precision == "bf16" and device.type == "cuda" and not _cuda_bf16():
        raise UserError("precision bf16: this GPU does not support bfloat16", fix="use fp16 or fp32")


@functools.cache
def _cuda_bf16() -> bool:
    """Asked once: autocast checks the precision on every micro-batch."""
    return torch.cuda.is_bf16_supported()


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The forward-pass context for a precision: weights stay fp32, matmuls run in bf16/fp16."""
    check_precision(precision, device)
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """Dynamic loss scaling for fp16 (a no-op scaler otherwise, so callers need no branches)."""
    return torch.amp.GradScaler(device.type if device.type == "cuda" else "cpu", enabled=precision == "fp16")


def clip_and_check(params: Iterable[torch.Tensor], max_norm: float | None,
                   scaler: torch.amp.GradScaler | None = None,
                   optimizer: torch.optim.Optimizer | None = None) -> float:
    """Unscale the gradients (fp16: pass the scaler and the optimizer), compute their global L2
    norm and clip it to `max_norm` (None: no clipping). Returns the norm before clipping; inf or
    nan means the step must be skipped (the gradients are then left untouched)."""
    if scaler is not None and scaler.is_enabled():
        assert optimizer is not None, "fp16 unscaling needs the optimizer"
        scaler.unscale_(optimizer)
    params = [p for p in params if p.grad is not None]
    if not params:
        return 0.0
    norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None], norm_type=2.0)
    value = float(norm)
    if max_norm is not None and math.isfinite(value):
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return value


def optimizer_step(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, guard: StepGuard,
                   norm: float, *values: float, step: int | None = None) -> bool:
    """Apply one update after clip_and_check; True when it was applied. fp16: the scaler always
    steps and updates (it skips a step with overflowing gradients itself and lowers its scale, so
    overflows are not counted as bad steps); otherwise `guard` skips and counts steps whose
    gradient norm or `values` (e.g. the loss) are not finite."""
    if scaler.is_enabled():
        scaler.step(optimizer)
        scaler.update()
        return math.isfinite(norm) and all(math.isfinite(v) for v in values)
    if guard.ok(norm, *values, step=step):
        optimizer.step()
        return True
    return False


class StepGuard:
    """Skips optimizer steps whose loss or gradient norm is not finite and stops the run after
    more than `max_bad_steps` of them (0: the first one stops it)."""

    def __init__(self, max_bad_steps: int, what: str = "training"):
        self.max_bad_steps = max_bad_steps
        self.bad_steps = 0
        self.what = what

    def ok(self, *values: float, step: int | None = None) -> bool:
        """True when every value is finite; otherwise counts a bad step (raising when too many)."""
        if all(math.isfinite(v) for v in values):
            return True
        self.bad_steps += 1
        if self.bad_steps > self.max_bad_steps:
            at = f" (last at step {step})" if step is not None else ""
            raise Diverged(
                f"{self.what} diverged: {self.bad_steps} steps with a non-finite loss or gradient{at}, "
                f"more than max_bad_steps {self.max_bad_steps}",
                fix="lower the learning rate, raise warmup_steps, enable grad_clip, or use bf16/fp32 "
                    "instead of fp16; --resume auto continues from the last checkpoint")
        return False
