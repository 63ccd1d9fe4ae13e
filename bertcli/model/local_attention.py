"""Sliding-window attention that skips the blocks outside the window (ModernBERT's local layers).

A local layer lets the query at position i see the keys j with |i - j| <= w. Applied as a mask
over full attention it still computes (and softmaxes) all T x T scores, of which only about
(2w + 1) / T are kept. Here the T positions are cut into n chunks of C = 2w queries; chunk c
(positions cC .. cC + C - 1) can only see the keys cC - w .. cC + C - 1 + w, a block of
K = C + 2w = 4w keys, so one scaled_dot_product_attention over [B, A * n, C, K] computes T * 4w
scores instead of T * T (SDPA's fused CPU kernel takes the extra batch dimension as heads).
The blocks copy K and V about twice (overlapping by 2w), which is why the chunking only starts
once it skips at least half of the scores: T > 8w (measured: about break-even at T = 8w, the gain
growing with T / w).

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
    window: int   # w
    chunk: int    # C = 2w queries per chunk
    chunks: int   # n = ceil(T / C)
    mask: Tensor  # [B|1, 1, n, C, K] bool, K = C + 2w keys, True = attend


def banded(length: int, window: int, padding: Tensor | None, device: torch.device) -> Banded | None:
    """The chunking for T = `length`, w = `window`, key padding [B, 1, 1, T] (None: nothing
    padded); None where it would skip less than half of the scores (T <= 8w)."""
    w, C = window, 2 * window
    if w < 1 or length <= 4 * C:
        return None
    n, K = -(-length // C), C + 2 * w
    q_pos = torch.arange(n * C, device=device).view(n, C)                             # [n, C]
    k_pos = torch.arange(n, device=device)[:, None] * C - w + torch.arange(K, device=device)  # [n, K]
    band = (q_pos[:, :, None] - k_pos[:, None, :]).abs() <= w                         # [n, C, K]
    if padding is not None:
        real = padding[:, 0, 0]                                                       # [B, T]
        k_real = F.pad(real, (w, n * C - length + w)).unfold(1, K, C)                 # [B, n, K]
        q_real = F.pad(real, (0, n * C - length)).view(-1, n, C)                      # [B, n, C]
    else:
        k_real = ((k_pos >= 0) & (k_pos < length))[None]                              # [1, n, K]
        q_real = (q_pos < length)[None]                                               # [1, n, C]
    # real queries: the real keys of the band; the others: every key of the band (never empty)
    mask = band & (k_real[:, :, None, :] | ~q_real[:, :, :, None])                    # [B|1, n, C, K]
    return Banded(length, w, C, n, mask[:, None])


def banded_attention(q: Tensor, k: Tensor, v: Tensor, b: Banded, dropout_p: float = 0.0) -> Tensor:
    """q, k, v [B, A, T, D] -> [B, A, T, D], attending within the window only."""
    B, A, T, D = q.shape
    w, C, n = b.window, b.chunk, b.chunks
    K, fill = C + 2 * w, n * C - T

    def blocks(x: Tensor) -> Tensor:      # [B, A, T, D] -> [B, A * n, K, D], zero keys at the edges
        return F.pad(x, (0, 0, w, fill + w)).unfold(2, K, C).transpose(-1, -2).reshape(B, A * n, K, D)

    qc = F.pad(q, (0, 0, 0, fill)).reshape(B, A * n, C, D)                            # a view when contiguous
    mask = b.mask.expand(B, A, n, C, K).reshape(B, A * n, C, K)
    out = F.scaled_dot_product_attention(qc, blocks(k), blocks(v), attn_mask=mask, dropout_p=dropout_p)
    return out.view(B, A, n * C, D)[:, :, :T]
