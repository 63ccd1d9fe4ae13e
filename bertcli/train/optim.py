"""Optimizers: AdamW (fused or foreach when the device has them) and LAMB, with parameter groups
that keep weight decay off biases and normalization weights.

Generic on purpose: fine-tuning builds its optimizer with the same two functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import overload

import torch
from torch import nn

from bertcli.core.errors import UserError

_NORM_TYPES = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d) + ((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ())


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weights with `weight_decay`, and biases + normalization weights without.

    A parameter shared by several modules (ALBERT's cross-layer sharing, tied embeddings) is
    listed once, in the group of the first module that owns it. Frozen parameters are left out.
    The no-decay group carries `trust_ratio=False`, which LAMB reads (ALBERT excludes the same
    parameters from layer adaptation as from weight decay); AdamW ignores the key."""
    decay, no_decay, seen = [], [], set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            # ndim < 2 also catches biases and norm scales of modules that are not nn norms.
            if isinstance(module, _NORM_TYPES) or name == "bias" or name.endswith("bias") or p.ndim < 2:
                no_decay.append(p)
            else:
                decay.append(p)
    groups = [{"params": decay, "weight_decay": weight_decay, "trust_ratio": True},
              {"params": no_decay, "weight_decay": 0.0, "trust_ratio": False}]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, name: str, lr: float, betas: tuple[float, float], eps: float,
                    weight_decay: float, device: torch.device | str) -> torch.optim.Optimizer:
    """AdamW or LAMB over `param_groups(model, weight_decay)`.

    AdamW uses the fused kernel where this torch build has one for `device` (CUDA, CPU), else the
    foreach (multi-tensor) path; both give the update of torch's reference AdamW."""
    groups = param_groups(model, weight_decay)
    device = torch.device(device)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=(betas[0], betas[1]), eps=eps, **_fast_adamw_kwargs(device))
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=(betas[0], betas[1]), eps=eps)
    raise UserError(f"unknown optimizer {name!r}", fix="use adamw or lamb")


def _fast_adamw_kwargs(device: torch.device) -> dict:
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    try:
        if device.type in _get_fused_kernels_supported_devices():
            return {"fused": True}
    except Exception:  # private helper: fall back quietly when its shape changes
        pass
    return {"foreach": True}


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning", Algorithm 2).

    For each parameter tensor x with gradient g, at step t:
        m = b1 m + (1 - b1) g ;  v = b2 v + (1 - b2) g^2
        m^ = m / (1 - b1^t) ;  v^ = v / (1 - b2^t)          (bias_correction=True)
        r = m^ / (sqrt(v^) + eps) + wd * x
        x = x - lr * (||x|| / ||r||) * r                     (trust ratio 1 when a norm is 0,
                                                              or when the group has trust_ratio False)
    Google's ALBERT implementation drops the bias correction: `bias_correction=False`.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, bias_correction: bool = True):
        if lr <= 0 or eps <= 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid LAMB hyperparameters lr={lr} betas={betas} eps={eps}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction, trust_ratio=True)
        super().__init__(params, defaults)

    @overload                                  # torch.optim.Optimizer.step's two forms
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One update of every group, the tensors of a group at once (torch._foreach_*: a few
        multi-tensor kernels instead of ~10 small ops per parameter). The same arithmetic as
        the per-tensor formula in the class docstring (tests/test_optim_lamb.py checks it)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            if any(p.grad.is_sparse for p in params):
                raise RuntimeError("LAMB does not support sparse gradients")
            b1, b2 = group["betas"]
            for p in params:
                state = self.state[p]
                if not state:
                    # `step` as a float32 tensor, like torch's Adam, so state_dict is all tensors.
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            states = [self.state[p] for p in params]
            steps = [st["step"] for st in states]
            torch._foreach_add_(steps, 1)
            grads = [p.grad for p in params]
            m = [st["exp_avg"] for st in states]
            v = [st["exp_avg_sq"] for st in states]
            torch._foreach_lerp_(m, grads, 1 - b1)
            torch._foreach_mul_(v, b2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - b2)
            # m^ / (sqrt(v^) + eps) with m^ = m / c1, v^ = v / c2, computed as
            # (m / (sqrt(v) / sqrt(c2) + eps)) / c1: two fewer parameter-sized temporaries
            denom = torch._foreach_sqrt(v)
            if group["bias_correction"]:
                ts = [t.item() for t in steps]   # CPU scalars: no device sync
                torch._foreach_div_(denom, [(1 - b2 ** t) ** 0.5 for t in ts])
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(m, denom)
            if group["bias_correction"]:
                torch._foreach_div_(update, [1 - b1 ** t for t in ts])
            if group["weight_decay"]:
                torch._foreach_add_(update, params, alpha=group["weight_decay"])
            if group["trust_ratio"]:
                w_norm = torch.stack(torch._foreach_norm(params))
                u_norm = torch.stack(torch._foreach_norm(update))
                ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                torch._foreach_mul_(update, list(ratio.unbind()))
            torch._foreach_add_(params, update, alpha=-group["lr"])
        return loss
