"""One transformer encoder for every family (BERT, RoBERTa, ALBERT, ModernBERT); the families
differ only in config and in the flags of their spec (bertcli.config.families).

    ids [B, T] -> embeddings (word [+ token type] [+ position], LayerNorm, dropout)   [N, E]
               -> E -> H projection (ALBERT, or any E != H)                        [N, H]
               -> L layers: attention sublayer, feed-forward sublayer              [N, H]
               -> (pre-LN only) final LayerNorm                                    [N, H]

N is the number of tokens the dense layers run on: only the real tokens (B*T minus padding)
when the batch has padding, all B*T otherwise. N is rounded up (`bucketed`) by carrying a few
padding positions as rows too (dense layers are row-wise, attention masks them out as keys,
nothing reads them), so that the shapes repeat from batch to batch: tensors of ever-new sizes
left glibc's heap growing without bound over long runs (bertcli.train.heap). Only attention
needs the [B, T] layout, so the Q/K/V rows are scattered back into it just around scaled_dot_product_attention ("unpadding").
Pretraining reads the last layer only at the masked positions and [CLS], so the last layer can
compute just those n rows (`keep`): queries, output projection and feed-forward for n tokens,
keys and values for all.

Cross-layer sharing stores fewer sublayers than layers: layer i runs attention block
`config.attention_index(i)` and feed-forward block `config.ffn_index(i)` (ALBERT: every layer of
a group runs the same weights). Post-LN is the papers' layer: x = LN(x + sublayer(x)); pre-LN
is x = x + sublayer(LN(x)) with a final LayerNorm after the last layer (ModernBERT: the first
layer's attention reads the normalized embeddings without a LayerNorm of its own).

Spec flags: positions learned | offset (a table) or rotary (queries and keys rotated in
attention, bertcli.model.positions); feed-forward gelu or geglu; biases on or off; attention
global, or alternating: sliding-window layers with a global one every n layers, each kind with
its own mask and rotary base, built once per forward (`Encoder.attention_inputs`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertcli.config.model import EncoderConfig
from bertcli.model.local_attention import banded, banded_attention
from bertcli.model.positions import AttentionInputs, rotary, window_mask


def activation(name: str) -> Callable[[Tensor], Tensor]:
    """`gelu`: exact (erf); `gelu_new`: the tanh approximation (BERT's TF code, ALBERT)."""
    return functools.partial(F.gelu, approximate="tanh") if name == "gelu_new" else F.gelu


def layer_norm(c: EncoderConfig, width: int) -> nn.LayerNorm:
    """A LayerNorm, with a bias unless the family has none (ModernBERT)."""
    return nn.LayerNorm(width, eps=c.layer_norm_eps, bias=c.spec.biases)


def linear(c: EncoderConfig, inp: int, out: int) -> nn.Linear:
    """A linear layer, with a bias unless the family has none (ModernBERT)."""
    return nn.Linear(inp, out, bias=c.spec.biases)


def first_positions(batch: int, length: int, device) -> Tensor:
    """[B] flat positions of every sequence's first token ([CLS] / <s>)."""
    return torch.arange(batch, device=device) * length


def bucketed(n: int) -> int:
    """n rounded up to a multiple of a power-of-two step of about n/32..n/64: ~1% more rows on
    average, and at most a few dozen distinct sizes per doubling of n (n < 64: n itself)."""
    step = 1 << max(0, (n // 32).bit_length() - 1)
    return -(-n // step) * step


@dataclass
class Layout:
    """Where the N token rows the dense layers see sit in the [B, T] batch."""

    batch: int
    length: int
    mask: Tensor | None = None   # [B, 1, 1, T] bool, True = attend; None when nothing is padded
    index: Tensor | None = None  # [N] flat position (into B*T) of each row (real tokens, and the
                                    # padding carried to round N up); None: N = B*T
    rows: Tensor | None = None   # [B*T] row in [N] of each flat position (padding: a neighbour's)

    def flat(self, x: Tensor) -> Tensor:
        """[B, T, ...] -> [N, ...]: keep the real tokens."""
        x = x.reshape(self.batch * self.length, *x.shape[2:])
        return x if self.index is None else x.index_select(0, self.index)

    def padded(self, x: Tensor) -> Tensor:
        """[N, C] -> [B, T, C], zeros at padding."""
        if self.index is not None:
            full = x.new_zeros(self.batch * self.length, x.shape[-1])
            x = full.index_copy(0, self.index, x)
        return x.view(self.batch, self.length, x.shape[-1])

    def select(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rows of `x` [N, C] at flat positions [n] into B*T -> [n, C]."""
        return x.index_select(0, positions if self.rows is None else self.rows.index_select(0, positions))


def make_layout(attention_mask: Tensor | None, batch: int, length: int, unpad: bool,
                static: bool = False) -> Layout:
    if attention_mask is None:
        return Layout(batch, length)
    keep = attention_mask.bool()                       # [B, T]
    mask = keep[:, None, None, :]                      # [B, 1, 1, T], broadcast over heads, queries
    if static or torch.compiler.is_compiling():
        return Layout(batch, length, mask)             # static shapes: no data-dependent unpadding
    if not unpad:
        # no padding at all: SDPA may pick its fastest (mask-free) kernel
        return Layout(batch, length) if bool(keep.all()) else Layout(batch, length, mask)
    flat = keep.reshape(-1)                            # [B*T]
    # padding that may be carried as rows: in sequences with a real token (an all-padding
    # sequence's rows would attend to nothing and turn NaN)
    spare = ~flat & keep.any(1, keepdim=True).expand(batch, length).reshape(-1)
    real, spares = torch.stack([flat.sum(), spare.sum()]).tolist()  # one host sync
    if real == batch * length:
        return Layout(batch, length)                   # no padding at all
    n = real + min(bucketed(real) - real, spares)      # N: real tokens + the first few spare ones
    if n == batch * length:
        return Layout(batch, length, mask)
    rows_at = flat | (spare & (spare.cumsum(0) <= n - real))  # [B*T] True where a row is
    index = torch.nonzero_static(rows_at, size=n).squeeze(1)  # [N], ascending
    rows = (rows_at.long().cumsum(0) - 1).clamp_(min=0)       # [B*T]
    return Layout(batch, length, mask, index, rows)


@dataclass
class Queries:
    """A subset of positions whose outputs the last layer computes (the masked tokens and
    [CLS]): their queries are laid out [B, Q, ...], Q = the most kept in one sequence."""

    positions: Tensor  # [n] flat positions into B*T
    slots: Tensor      # [n] their places in [B*Q]
    per_seq: int       # Q

    def padded(self, x: Tensor, batch: int) -> Tensor:
        """[n, C] -> [B, Q, C]."""
        full = x.new_zeros(batch * self.per_seq, x.shape[-1]).index_copy(0, self.slots, x)
        return full.view(batch, self.per_seq, x.shape[-1])

    def flat(self, x: Tensor) -> Tensor:
        """[B, Q, ...] -> [n, ...]."""
        return x.reshape(-1, *x.shape[2:]).index_select(0, self.slots)


def bucketed_keep(keep: Tensor, layout: Layout) -> Tensor:
    """`keep` [n] and then a few more real positions, to bucketed(n) [n'] where there are enough:
    the sparse last layer's sizes then repeat too. The extra ones go to the sequences with the
    fewest kept first (the earliest not yet kept), so that Q, the most kept in one sequence,
    grows only when no other sequence has room below it."""
    n = keep.numel()
    extra = bucketed(n) - n
    if extra == 0:
        return keep
    B, T = layout.batch, layout.length
    free = torch.ones(B * T, dtype=torch.bool, device=keep.device) if layout.mask is None \
        else layout.mask.reshape(-1).clone()                          # [B*T] real tokens
    free[keep] = False
    seq = torch.arange(B * T, device=keep.device) // T                # [B*T]
    kept = torch.bincount(keep // T, minlength=B)                     # [B]
    # the level a free position would fill: its sequence's kept count + its rank among the free
    level = (free.view(B, T).long().cumsum(1).view(-1) + kept[seq])   # [B*T]
    order = torch.where(free, level * B + seq, (2 * T + 1) * B)       # fewest first, then by sequence
    extra = min(extra, int(free.sum()))
    return torch.cat([keep, order.topk(extra, largest=False).indices]) if extra else keep


def make_queries(positions: Tensor, layout: Layout) -> tuple[Queries, Layout]:
    """The Queries of `positions`, and the Layout of the last layer's [n, H] output rows."""
    B, T = layout.batch, layout.length
    seq = positions.div(T, rounding_mode="floor")                        # [n] sequence of each
    counts = torch.bincount(seq, minlength=B)                            # [B]
    order = torch.argsort(seq, stable=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=order.device) - (counts.cumsum(0) - counts)[seq[order]]
    per_seq = int(counts.max())
    slots = seq * per_seq + rank                                         # [n]
    rows = torch.zeros(B * T, dtype=torch.long, device=positions.device)
    rows = rows.index_copy(0, positions, torch.arange(len(positions), device=positions.device))
    return Queries(positions, slots, per_seq), Layout(B, T, layout.mask, positions, rows)


class Embeddings(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        E = c.embedding_size
        spec = c.spec
        self.word = nn.Embedding(c.vocab_size, E, padding_idx=c.pad_token_id)
        self.position = None   # rotary positions act inside attention instead
        if spec.positions != "rotary":
            # transformers' RobertaEmbeddings gives the position table a padding row too.
            pos_pad = c.pad_token_id if spec.position_padding_row else None
            self.position = nn.Embedding(c.max_position_embeddings, E, padding_idx=pos_pad)
        self.token_type = nn.Embedding(c.type_vocab_size, E) if spec.token_type_embeddings else None
        self.norm = layer_norm(c, E)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, ids: Tensor, positions: Tensor | None, token_types: Tensor | None) -> Tensor:
        # [N] x 3 -> [N, E]; summed in transformers' order (word + type, then + position)
        x = self.word(ids)
        if self.token_type is not None:
            x = x + self.token_type(token_types)
        if self.position is not None:
            x = x + self.position(positions)
        return self.dropout(self.norm(x))


class Attention(nn.Module):
    """Self-attention sublayer: fused Q/K/V projection (saved as transformers' query/key/value),
    SDPA, output projection, dropout, residual and LayerNorm."""

    def __init__(self, c: EncoderConfig, index: int = 0):
        super().__init__()
        H = c.hidden_size
        self.heads = c.num_attention_heads
        self.qkv = linear(c, H, 3 * H)
        self.out = linear(c, H, H)
        self.pre_norm = c.norm == "pre"
        # ModernBERT's first layer reads the (already normalized) embeddings as they are
        first_identity = self.pre_norm and index == 0 and not c.spec.first_attention_norm
        self.norm = nn.Identity() if first_identity else layer_norm(c, H)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)
        self.attn_dropout = c.attention_probs_dropout_prob

    def forward(self, x: Tensor, layout: Layout, queries: Queries | None = None,
                inputs: AttentionInputs | None = None) -> Tensor:
        """[N, H] -> [N, H]; with `queries`, only their rows: [n, H] (keys and values from all).
        `inputs`: the layer kind's mask and rotary positions (default: the padding mask)."""
        B, T, A = layout.batch, layout.length, self.heads
        mask = layout.mask if inputs is None else inputs.mask
        rope = None if inputs is None else inputs.rope
        h = self.norm(x) if self.pre_norm else x
        H = x.shape[-1]
        if queries is None:
            qkv = self.qkv(h)                                         # [N, 3H]
            if rope is not None:                                      # rotate queries and keys
                qkv = torch.cat([rope.apply(qkv[:, :2 * H], 2 * A), qkv[:, 2 * H:]], 1)  # q and k: 2A heads
            qkv = layout.padded(qkv)                                  # [B, T, 3H]
            q, k, v = qkv.view(B, T, 3, A, -1).permute(2, 0, 3, 1, 4)  # 3 x [B, A, T, D]
        else:
            w, b = self.qkv.weight, self.qkv.bias
            kv = F.linear(h, w[H:], None if b is None else b[H:])     # [N, 2H]
            if rope is not None:
                kv = torch.cat([rope.apply(kv[:, :H], A), kv[:, H:]], 1)
            kv = layout.padded(kv)                                    # [B, T, 2H]
            k, v = kv.view(B, T, 2, A, -1).permute(2, 0, 3, 1, 4)     # 2 x [B, A, T, D]
            hq = layout.select(h, queries.positions)                  # [n, H]
            x = hq if h is x else layout.select(x, queries.positions)  # post-LN: the same rows
            q = F.linear(hq, w[:H], None if b is None else b[:H])     # [n, H]
            if rope is not None:
                assert inputs is not None and inputs.query_rope is not None, "rotary queries come with their rows' rotation"
                q = inputs.query_rope.apply(q, A)
            q = queries.padded(q, B).view(B, queries.per_seq, A, -1).transpose(1, 2)  # [B, A, Q, D]
        dropout_p = self.attn_dropout if self.training else 0.0
        if queries is None and inputs is not None and inputs.banded is not None:
            a = banded_attention(q, k, v, inputs.banded, dropout_p)  # local layer: window blocks only
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        a = a.transpose(1, 2)                                         # [B, T|Q, A, D]
        a = layout.flat(a) if queries is None else queries.flat(a)    # [N|n, A, D]
        a = self.dropout(self.out(a.flatten(1)))                      # [N|n, H]
        return x + a if self.pre_norm else self.norm(x + a)


class FeedForward(nn.Module):
    """dense H -> I, activation, dense I -> H; GeGLU (ModernBERT): dense H -> 2I split into
    input and gate, act(input) * gate, dense I -> H."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.geglu = c.spec.feed_forward == "geglu"
        self.inp = linear(c, c.hidden_size, c.intermediate_size * (2 if self.geglu else 1))
        self.out = linear(c, c.intermediate_size, c.hidden_size)
        self.norm = layer_norm(c, c.hidden_size)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)
        self.act = activation(c.hidden_act)
        self.pre_norm = c.norm == "pre"

    def forward(self, x: Tensor) -> Tensor:                           # [N, H] -> [N, H]
        h = self.norm(x) if self.pre_norm else x
        h = self.inp(h)                                               # [N, I] | [N, 2I]
        if self.geglu:
            h, gate = h.chunk(2, dim=-1)
            h = self.act(h) * gate                                    # [N, I]
        else:
            h = self.act(h)
        h = self.dropout(self.out(h))
        return x + h if self.pre_norm else self.norm(x + h)


@dataclass
class EncoderOutput:
    hidden: Tensor   # [N, H] last hidden states of the real tokens (or of all B*T)
    layout: Layout

    def padded(self) -> Tensor:
        """[B, T, H]; zeros at padding when the batch was unpadded."""
        x = self.layout.padded(self.hidden)
        lay = self.layout
        if lay.index is not None and lay.mask is not None:   # padding carried as rows: zero it too
            x = x.masked_fill(~lay.mask.view(lay.batch, lay.length, 1), 0)
        return x

    def at(self, positions: Tensor) -> Tensor:
        """[n, H] at flat positions into input_ids.view(-1) (real tokens)."""
        return self.layout.select(self.hidden, positions)

    def first(self) -> Tensor:
        """[B, H] at position 0 ([CLS] / <s>) of every sequence."""
        return self.at(first_positions(self.layout.batch, self.layout.length, self.hidden.device))


class Encoder(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.config = c
        self.embeddings = Embeddings(c)
        self.proj = nn.Linear(c.embedding_size, c.hidden_size) if c.has_projection else None
        self.attention = nn.ModuleList(Attention(c, i) for i in range(c.num_attention_blocks))
        self.ffn = nn.ModuleList(FeedForward(c) for _ in range(c.num_ffn_blocks))
        self.final_norm = layer_norm(c, c.hidden_size) if c.norm == "pre" else None
        self.pooler = nn.Linear(c.hidden_size, c.hidden_size) if c.has_pooler else None
        self.layer_plan = c.layer_plan
        self.unpad = True  # run dense layers on real tokens only (turned off by benchmarks to compare)
        self.window_blocks = True  # local layers skip the blocks outside the window (off: masked, to compare)
        # Padded [B, T] layout always, the mask only in attention: no data-dependent shapes or host
        # syncs, so a graph traced once serves every batch (ONNX export). Overrides unpad and `keep`.
        self.static = False

    def positions(self, input_ids: Tensor) -> Tensor:
        """[B, T] position ids. Offset positions (RoBERTa): position_offset, +1, ... for real
        tokens and padding_idx for padding, computed from input_ids as transformers does; others
        0..T-1."""
        if self.config.spec.positions == "offset":
            pad = self.config.pad_token_id
            real = input_ids.ne(pad).long()
            return real.cumsum(1) * real + (self.config.position_offset - 1)
        B, T = input_ids.shape
        return torch.arange(T, device=input_ids.device).expand(B, T)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, keep: Tensor | None = None) -> EncoderOutput:
        """Last hidden states. With `keep` (flat positions into B*T), the last layer computes
        only those positions' outputs (their keys and values still come from every token), and
        only they can be read from the result."""
        B, T = input_ids.shape
        layout = make_layout(attention_mask, B, T, self.unpad, self.static)
        emb = self.embeddings
        x = emb(layout.flat(input_ids),
                None if emb.position is None else layout.flat(self.positions(input_ids)),
                None if emb.token_type is None else layout.flat(
                    torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids))  # [N, E]
        if self.proj is not None:
            x = self.proj(x)                                          # [N, H]
        plan, c = self.layer_plan, self.config
        kinds = self.attention_inputs(layout)   # per layer kind (global / local): None = padding mask only
        sparse_last = (keep is not None and keep.numel() > 0 and not self.static
                       and not torch.compiler.is_compiling())
        for i, (a, f) in enumerate(plan[:-1] if sparse_last else plan):
            x = self.ffn[f](self.attention[a](x, layout, inputs=kinds[c.is_global(i)]))
        if sparse_last:
            assert keep is not None  # sparse_last implies it
            queries, out_layout = make_queries(bucketed_keep(keep, layout), layout)
            a, f = plan[-1]
            last = self.attention_inputs(layout, queries)[c.is_global(len(plan) - 1)]
            x = self.ffn[f](self.attention[a](x, layout, queries, last))  # [n, H]
            layout = out_layout
        if self.final_norm is not None:
            x = self.final_norm(x)
        return EncoderOutput(x, layout)

    def attention_inputs(self, layout: Layout, queries: Queries | None = None
                         ) -> dict[bool, AttentionInputs | None]:
        """{is_global: AttentionInputs} for this batch: the sliding-window mask of local layers
        and the rotary positions of each kind; None where the padding mask is all there is.
        With `queries`, for the sparse last layer (masks and query rotations of its rows)."""
        c = self.config
        rotary_kind = c.spec.positions == "rotary"
        if not rotary_kind and c.local_attention == 0:
            return {True: None, False: None}
        B, T = layout.batch, layout.length
        device = self.embeddings.word.weight.device
        rows = layout.flat(torch.arange(T, device=device).expand(B, T))  # [N] position within each row
        query_pos = None
        if queries is not None:
            slot_pos = torch.zeros(B * queries.per_seq, dtype=torch.long, device=device)
            query_pos = slot_pos.index_copy(0, queries.slots, queries.positions % T).view(B, -1)  # [B, Q]
        out: dict[bool, AttentionInputs | None] = {}
        D = c.hidden_size // c.num_attention_heads
        # local layers of every row skip the blocks outside the window where that saves work;
        # the exported graph (static) and the sparse last layer's few queries keep the mask
        chunked = None if self.static or not self.window_blocks or queries is not None or not c.local_attention \
            else banded(T, c.window, layout.mask, device)
        for is_global in (True, False):
            theta = c.global_rope_theta if is_global else c.local_rope_theta
            mask = layout.mask if is_global else None if chunked is not None \
                else window_mask(T, c.window, layout.mask, device, query_pos)
            rope = rotary(theta, D, rows) if rotary_kind else None
            query_rope = rotary(theta, D, queries.positions % T) if rotary_kind and queries is not None else None
            out[is_global] = AttentionInputs(mask, rope, query_rope, None if is_global else chunked)
        return out

    def pool(self, out: EncoderOutput) -> Tensor:
        """BERT/ALBERT pooler: tanh(W h[CLS] + b) -> [B, H]."""
        assert self.pooler is not None, "only families with a pooler (config.has_pooler) pool"
        return torch.tanh(self.pooler(out.first()))
