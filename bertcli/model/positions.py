"""Rotary positions and sliding-window masks (ModernBERT), built once per forward for each kind
of layer (global / local) and handed to the attention sublayers.

Rotary (Su et al. 2021, as transformers' ModernBERT): the query and key of a token at position p
are rotated pairwise (dimension i with i + D/2) by angles p * theta^(-2i/D); theta differs between
global and local layers. Positions count 0..T-1 within each row, padding at the end.

Sliding window: a query at position i sees keys j with |i - j| <= window (transformers'
`sliding_window` = local_attention // 2, inclusive, so local_attention 128 sees 64 either side).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from bertcli.model.local_attention import Banded


@dataclass
class Rotary:
    cos: Tensor  # [n, 1, D] float32, one row per token row of the sublayer
    sin: Tensor

    def apply(self, x: Tensor, heads: int) -> Tensor:
        """[n, A*D] -> [n, A*D], rotated in float32 (as transformers) and cast back."""
        xf = x.float().view(x.shape[0], heads, -1)                  # [n, A, D]
        x1, x2 = xf.chunk(2, dim=-1)
        out = xf * self.cos + torch.cat((-x2, x1), dim=-1) * self.sin
        return out.to(x.dtype).flatten(1)


def rotary(theta: float, head_dim: int, positions: Tensor) -> Rotary:
    """The rotation of tokens at `positions` [n] (position within their row)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device) / head_dim))
    freqs = positions.float()[:, None] * inv_freq                  # [n, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]            # [n, 1, D]
    return Rotary(emb.cos(), emb.sin())


def window_mask(length: int, window: int, padding: Tensor | None, device: torch.device,
                query_pos: Tensor | None = None) -> Tensor | None:
    """Boolean attention mask (True = attend) of a local layer: [B|1, 1, T|Q, T].

    padding: [B, 1, 1, T] key mask of the batch (None: nothing padded). query_pos: [B, Q]
    positions of the queries when only some rows are computed (default: every position).
    Padded query rows see every real key, so no row is empty (SDPA would return NaN there, and
    NaN times a zero gradient is still NaN)."""
    if length - 1 <= window:
        return padding                                             # the window covers every row
    keys = torch.arange(length, device=device)
    queries = keys[None, :] if query_pos is None else query_pos    # [1|B, Q]
    band = (queries[:, :, None] - keys).abs() <= window            # [1|B, Q, T]
    if padding is not None:
        real = padding[:, 0, 0]                                    # [B, T]
        if query_pos is None:
            band = band | ~real[:, :, None]
        band = band & real[:, None, :]
    return band[:, None]


@dataclass
class AttentionInputs:
    """What one kind of layer (global or local) adds to the attention of the batch."""

    mask: Tensor | None                 # SDPA mask over the key rows
    rope: Rotary | None = None          # rotation of the N token rows (queries and keys)
    query_rope: Rotary | None = None    # sparse last layer: rotation of its query rows
    banded: Banded | None = None        # local layers over T > 3w: chunked attention (mask unused)
