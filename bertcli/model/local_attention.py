"""Sliding-window attention that skips the blocks outside the window (ModernBERT's local layers).

A local layer lets the query at position i see the keys j with |i - j| <= w. Applied as a mask
over full attention it still computes (and softmaxes) all T x T scores, of which only about
(2w + 1) / T are kept. Here the T positions are cut into chunks of C = w: the queries of chunk c
can only see keys in chunks c - 1, c, c + 1 (|i - j| <= w = C), so each chunk attends to a block
of 3C keys through one scaled_dot_product_attention over [B * n, A, C, 3C]: T * 3w scores
instead of T * T, the gain growing with T / w.

Equal to the masked version at every real query (the same keys, the same scores); positions
beyond T (the last chunk's fill) and beyond each block's edge are zero keys, masked out.
Padded query rows (and the fill) see every key of their block, themselves included, so no row
is empty and nothing turns NaN: their outputs differ from the masked version's, which lets them
see every real key, but nothing reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class Banded:
    """The chunking of one batch for the local layers."""

    length: int   # T
    chunk: int    # C = w
    chunks: int   # n = ceil(T / C)
    mask: Tensor  # [B|1, n, 1, C, 3C] bool, True = attend (broadcast over heads)


def banded(length: int, window: int, padding: Tensor | None, device: torch.device) -> Banded | None:
    """The chunking for T = `length`, w = `window`, key padding [B, 1, 1, T] (None: nothing
    padded); None where blocks of 3w keys would not skip anything (T <= 3w)."""
    C = window
    if C < 1 or length <= 3 * C:
        return None
    n = -(-length // C)
    q_pos = torch.arange(n * C, device=device).view(n, C)                             # [n, C]
    k_pos = torch.arange(n, device=device)[:, None] * C - C + torch.arange(3 * C, device=device)  # [n, 3C]
    band = (q_pos[:, :, None] - k_pos[:, None, :]).abs() <= window                    # [n, C, 3C]
    k_in = (k_pos >= 0) & (k_pos < length)                                            # [n, 3C]
    q_in = q_pos < length                                                             # [n, C]
    if padding is not None:
        real = padding[:, 0, 0]                                                       # [B, T]
        k_real = F.pad(real, (C, n * C - length + C)).unfold(1, 3 * C, C)             # [B, n, 3C]
        q_real = F.pad(real, (0, n * C - length)).view(-1, n, C)                      # [B, n, C]
    else:
        k_real, q_real = k_in[None], q_in[None]                                       # [1, n, 3C], [1, n, C]
    # real queries: the real keys of the band; the others: every key of the band (never empty)
    mask = band & (k_real[:, :, None, :] | ~q_real[:, :, :, None])                    # [B|1, n, C, 3C]
    return Banded(length, C, n, mask[:, :, None])


def banded_attention(q: Tensor, k: Tensor, v: Tensor, b: Banded, dropout_p: float = 0.0) -> Tensor:
    """q, k, v [B, A, T, D] -> [B, A, T, D], attending within the window only."""
    B, A, T, D = q.shape
    C, n = b.chunk, b.chunks
    fill = n * C - T

    def blocks(x: Tensor) -> Tensor:      # [B, A, T, D] -> [B * n, A, 3C, D], zero keys at the edges
        x = F.pad(x, (0, 0, C, fill + C)).unfold(2, 3 * C, C)        # [B, A, n, D, 3C]
        return x.permute(0, 2, 1, 4, 3).reshape(B * n, A, 3 * C, D)

    qc = F.pad(q, (0, 0, 0, fill)).view(B, A, n, C, D).transpose(1, 2).reshape(B * n, A, C, D)
    mask = b.mask.expand(B, n, 1, C, 3 * C).reshape(B * n, 1, C, 3 * C)
    out = F.scaled_dot_product_attention(qc, blocks(k), blocks(v), attn_mask=mask, dropout_p=dropout_p)
    out = out.view(B, n, A, C, D).transpose(1, 2).reshape(B, A, n * C, D)            # [B, A, nC, D]
    return out[:, :, :T]
