"""train.compile: torch.compile of the encoder's layer blocks, not of the whole model.

Compiling the whole model would trace the unpadding and the sparse last layer away (their sizes
depend on the data, so under compilation the encoder falls back to the static padded layout).
Each attention and feed-forward block is compiled on its own instead (dynamic shapes: N, the
number of token rows, changes from batch to batch), where inductor fuses the bias adds, GELU,
dropout, residual adds and LayerNorms around the matrix products. nn.Module.compile keeps the
module tree, so state_dict keys, checkpoints and resume are those of the eager model.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from bertcli.model.encoder import Encoder


def compile_layers(setting: bool | Literal["auto"], device: torch.device) -> bool:
    """Whether train.compile = `setting` compiles on `device`: `auto` on CUDA only (on a CPU
    compiling takes minutes, ~3 for bert-tiny's 4 blocks, for +15% at bert-tiny and less at
    bert-base, whose step is ~85% matrix products that inductor leaves to the same kernels;
    docs/benchmarks.md has the profile and the figures)."""
    return device.type == "cuda" if setting == "auto" else bool(setting)


def compile_blocks(model: nn.Module) -> int:
    """Compile every attention and feed-forward block of `model.encoder` in place; the count."""
    encoder = model.encoder
    assert isinstance(encoder, Encoder), "compile_blocks takes a bertcli model (its .encoder)"
    blocks = [*encoder.attention, *encoder.ffn]
    for block in blocks:
        block.compile(dynamic=True)
    return len(blocks)
