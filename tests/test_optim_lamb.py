"""LAMB's multi-tensor step (bertcli.train.optim.Lamb) against the per-tensor formula of You et
al. 2020 (Algorithm 2) written out below, over several steps: two parameter groups (trust ratio
on and off, as param_groups builds them), weight decay, bias correction on and off, a tensor
that starts at zero (norm 0: trust ratio 1); and a state_dict round trip that continues
bitwise (what resume needs)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from bertcli.train.optim import Lamb, param_groups


def reference_step(params_groups, state, lr, b1, b2, eps, bias_correction):
    """The per-tensor formula (the implementation before the multi-tensor one)."""
    with torch.no_grad():
        for group in params_groups:
            for p in group["params"]:
                st = state.setdefault(p, {"t": 0, "m": torch.zeros_like(p), "v": torch.zeros_like(p)})
                st["t"] += 1
                t, m, v, g = st["t"], st["m"], st["v"], p.grad
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat, v_hat = (m / (1 - b1 ** t), v / (1 - b2 ** t)) if bias_correction else (m, v)
                update = m_hat / (v_hat.sqrt() + eps)
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                if group["trust_ratio"]:
                    w, u = p.norm(), update.norm()
                    update.mul_(torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w)))
                p.add_(update, alpha=-lr)


def model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 3))
    with torch.no_grad():
        m[2].weight.zero_()        # norm 0 at the first step: trust ratio 1
    return m


def grads(m: nn.Module, step: int) -> None:
    g = torch.Generator().manual_seed(100 + step)
    for p in m.parameters():
        p.grad = torch.randn(p.shape, generator=g)


@pytest.mark.parametrize("bias_correction", [True, False])
def test_multi_tensor_lamb_equals_the_per_tensor_formula(bias_correction):
    ours, ref = model(0), model(0)
    opt = Lamb(param_groups(ours, 0.01), lr=0.05, betas=(0.9, 0.98), eps=1e-6, bias_correction=bias_correction)
    ref_groups, state = param_groups(ref, 0.01), {}
    assert [g["trust_ratio"] for g in ref_groups] == [True, False]
    for step in range(6):
        grads(ours, step)
        grads(ref, step)
        opt.step()
        reference_step(ref_groups, state, 0.05, 0.9, 0.98, 1e-6, bias_correction)
    for (name, a), b in zip(ours.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
    assert (ours[2].weight != 0).any()                 # the zero tensor moved (ratio 1, not 0/0)


def test_state_dict_round_trip_continues_bitwise():
    a = model(1)
    opt = Lamb(param_groups(a, 0.01), lr=0.01)
    for step in range(3):
        grads(a, step)
        opt.step()
    b = copy.deepcopy(a)
    resumed = Lamb(param_groups(b, 0.01), lr=0.01)
    resumed.load_state_dict(copy.deepcopy(opt.state_dict()))
    for step in range(3, 6):
        grads(a, step)
        grads(b, step)
        opt.step()
        resumed.step()
    for x, y in zip(a.parameters(), b.parameters()):
        assert torch.equal(x, y)
    assert all(float(s["step"]) == 6 for s in resumed.state.values())


def test_sparse_gradients_are_refused():
    p = nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3).to_sparse()
    with pytest.raises(RuntimeError, match="sparse"):
        Lamb([p]).step()
