"""`model.generator`: the shape of the ELECTRA generator that `train.objective: rtd` trains beside
the discriminator (bertcli.model.electra). Every field left at None is derived from the
discriminator's `model` section by `generator_shape`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from bertcli.config import bounds

T = TypeVar("T")


def _num(default: T, ge: float, le: float) -> T:
    # sections.num's metadata, written out: sections imports this module, not the reverse
    return field(default=default, metadata={"ge": ge, "gt": None, "le": le, "hash": True, "signed": False})


@dataclass
class GeneratorConfig:
    hidden_size: int | None = _num(None, ge=8, le=bounds.MAX_WIDTH)
    """Generator width. Default: a quarter of model.hidden_size, rounded to a multiple of the heads'
    width (the paper's generators are 1/4 to 1/3 as wide as their discriminators)."""
    num_hidden_layers: int | None = _num(None, ge=1, le=bounds.MAX_LAYERS)
    """Generator depth. Default: model.num_hidden_layers (ELECTRA shrinks width, not depth)."""
    num_attention_heads: int | None = _num(None, ge=1, le=bounds.MAX_LAYERS)
    """Generator heads. Default: model.num_attention_heads / 4 (at least 1), the discriminator's head width."""
    intermediate_size: int | None = _num(None, ge=1, le=bounds.MAX_WIDTH * 8)
    """Generator feed-forward width. Default: 4 x the generator's hidden_size."""


def generator_shape(g: GeneratorConfig, hidden_size: int, num_hidden_layers: int,
                    num_attention_heads: int) -> tuple[int, int, int, int]:
    """(hidden, layers, heads, intermediate) of the generator, defaults filled from the discriminator's."""
    heads = g.num_attention_heads or max(1, num_attention_heads // 4)
    head_width = hidden_size // num_attention_heads
    hidden = g.hidden_size or max(heads, round(hidden_size / 4 / head_width) * head_width, head_width)
    if g.num_attention_heads is None and hidden % heads:
        heads = 1
    return hidden, g.num_hidden_layers or num_hidden_layers, heads, g.intermediate_size or 4 * hidden
