"""The distillation losses, and the hooks that read a model's hidden states and attention.

    soft_loss(student, teacher, T, mask)    KL(softmax(t/T) || softmax(s/T)) * T^2 per row,
                                            averaged over the rows where mask is True (Hinton et
                                            al. 2015; DistilBERT's L_ce)
    hidden_loss(s_states, t_states, map)    MSE of the mapped hidden states (TinyBERT's L_hidn,
                                            embeddings included as layer 0)
    attention_loss(s_probs, t_probs, map)   KL of the mapped layers' attention distributions,
                                            averaged over heads and real query tokens
    Capture(model)                          forward hooks collecting both while the model trains
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NEG = -1e4   # a logit that softmax turns into 0 without the NaN that -inf * 0 gives


def soft_loss(student: Tensor, teacher: Tensor, temperature: float, mask: Tensor | None = None) -> Tensor:
    """student, teacher: [R, C] logits (R rows: examples, tokens or QA windows; C: classes or
    positions), mask: [R, C] of allowed classes (QA: real tokens) or None. Returns the mean over
    rows of T^2 * KL(p_t || p_s), p = softmax(logits / T): zero, with zero gradients, when
    the student equals the teacher."""
    s, t = student.float() / temperature, teacher.float() / temperature
    if mask is not None:
        s, t = s.masked_fill(~mask, NEG), t.masked_fill(~mask, NEG)
    log_p_s = F.log_softmax(s, -1)
    log_p_t = F.log_softmax(t, -1)
    kl = (log_p_t.exp() * (log_p_t - log_p_s)).sum(-1)               # [R]
    return kl.mean() * temperature ** 2 if kl.numel() else student.sum() * 0.0


def regression_loss(student: Tensor, teacher: Tensor) -> Tensor:
    """[R, 1] scores: the MSE to the teacher's (a temperature has no meaning here)."""
    return F.mse_loss(student.float(), teacher.float())


def hidden_loss(student: list[Tensor], teacher: list[Tensor], layer_map: list[int],
                project: nn.Module | None = None) -> Tensor:
    """student: K + 1 states [N, Hs] (embeddings, then each layer), teacher: L + 1 [N, Ht];
    student layer m (1-based) learns teacher layer layer_map[m - 1] + 1, and the embeddings the
    embeddings. `project` maps Hs -> Ht when the widths differ (TinyBERT's W_h)."""
    pairs = [(0, 0)] + [(m + 1, t + 1) for m, t in enumerate(layer_map)]
    total = student[0].new_zeros((), dtype=torch.float32)
    for m, t in pairs:
        s = student[m].float()
        if project is not None:
            s = project(s)
        if s.shape != teacher[t].shape:     # never broadcast: the layouts must be the same rows
            raise ValueError(f"student state {tuple(s.shape)} vs teacher state {tuple(teacher[t].shape)}")
        total = total + F.mse_loss(s, teacher[t].float())
    return total / len(pairs)


def attention_loss(student: list[Tensor | None], teacher: list[Tensor | None], layer_map: list[int],
                   real: Tensor) -> Tensor:
    """student: K log-probabilities [B, A, T, T] (None: a layer whose queries were cut, the
    sparse last layer), teacher: L of them; real: [B, T] the real tokens. KL(teacher || student)
    per query row, averaged over heads and real query tokens, then over the mapped layers."""
    weight = real.float()[:, None, :]                                   # [B, 1, T]
    total, n = real.new_zeros((), dtype=torch.float32), 0
    for m, t in enumerate(layer_map):
        s, q = student[m], teacher[t]
        if s is None or q is None:
            continue
        kl = (q.exp() * (q - s)).sum(-1)                                # [B, A, T]
        total = total + (kl * weight).sum() / (weight.sum() * kl.shape[1])
        n += 1
    return total / max(n, 1)


def attention_log_probs(module, x: Tensor, layout, inputs) -> Tensor:
    """The attention distribution an `encoder.Attention` computes from input x [N, H]:
    log softmax(q k^T / sqrt(D) + mask) -> [B, A, T, T] (masked keys at NEG). Recomputed from
    the module's own weights, since SDPA returns no probabilities."""
    B, T, A = layout.batch, layout.length, module.heads
    h = module.norm(x) if module.pre_norm else x
    qkv = layout.padded(module.qkv(h))                                  # [B, T, 3H]
    q, k, _ = qkv.view(B, T, 3, A, -1).permute(2, 0, 3, 1, 4)          # [B, A, T, D] each
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])          # [B, A, T, T]
    mask = layout.mask if inputs is None else inputs.mask
    if mask is not None:                                                # [B, 1, 1, T] keys (or a window)
        scores = scores.masked_fill(~mask, NEG)
    return F.log_softmax(scores.float(), -1)


class Capture:
    """Hidden states (embeddings output, then each layer's, flat [N, H]) and attention
    log-probabilities ([B, A, T, T] per layer) of `model`'s encoder, collected on each forward
    pass while `on` is set (the teacher, always in eval mode) or, with `training`, while the
    module trains (the student: the engine's training forwards, not its evaluations). `take()`
    returns and clears them."""

    def __init__(self, model: Any, attention: bool, training: bool = False):
        enc = model.encoder
        self.on, self.training = False, training
        self.states: list[Tensor] = []
        self.probs: list[Tensor | None] = []
        first = enc.proj if enc.proj is not None else enc.embeddings
        self.handles = [first.register_forward_hook(self._state)]
        self.handles += [f.register_forward_hook(self._state) for f in enc.ffn]
        if attention:
            self.handles += [a.register_forward_pre_hook(self._attention, with_kwargs=True) for a in enc.attention]

    def _live(self, module) -> bool:
        return self.on or (self.training and module.training)

    def _state(self, module, args, output) -> None:
        if self._live(module):
            self.states.append(output)

    def _attention(self, module, args, kwargs) -> None:
        if not self._live(module):
            return
        x, layout = args[0], args[1]
        queries = args[2] if len(args) > 2 else kwargs.get("queries")
        inputs = args[3] if len(args) > 3 else kwargs.get("inputs")
        self.probs.append(None if queries is not None else attention_log_probs(module, x, layout, inputs))

    def take(self) -> tuple[list[Tensor], list[Tensor | None]]:
        out = self.states, self.probs
        self.states, self.probs = [], []
        return out

    def close(self) -> None:
        for h in self.handles:
            h.remove()
