"""The encoder's complete, resolved configuration.

`ModelConfig` (the recipe section) leaves family-dependent fields at None until
`resolve_model` fills them from the family's spec (`recipe.resolve` calls it); `EncoderConfig`
is what the modules are built from: every field concrete, plus what comes from the tokenizer
(vocabulary size, padding id) and the head (labels). Behaviour that is the family's, not a
setting, is read from `config.spec` (bertcli.config.families).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypeVar

from bertcli.config.families import FAMILIES, LAYOUTS, FamilySpec, family_spec, layout_spec, position_offset
from bertcli.config.sections import ModelConfig
from bertcli.core.errors import UserError

ACTIVATIONS = ("gelu", "gelu_new")
T = TypeVar("T")


@dataclass(frozen=True)
class EncoderConfig:
    family: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    embedding_size: int
    hidden_act: str
    hidden_dropout_prob: float
    attention_probs_dropout_prob: float
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    initializer_range: float
    sharing: str
    num_hidden_groups: int
    norm: str
    classifier_dropout: float
    pad_token_id: int
    # Fine-tuning head only: label names (len 1 = regression).
    labels: tuple[str, ...] | None = None
    # Alternating attention (spec.attention): sliding window of `local_attention` tokens (a
    # token sees those within local_attention // 2 on each side) except on every
    # `global_attn_every_n_layers`-th layer, from layer 0. 0 = every layer global.
    local_attention: int = 0
    global_attn_every_n_layers: int = 1
    # Rotary positions (spec.positions == "rotary"): base of the frequencies per layer kind.
    global_rope_theta: float = 10000.0
    local_rope_theta: float = 10000.0
    # ModernBERT's fine-tuning heads: [CLS] or the mean over real tokens.
    classifier_pooling: str = "cls"
    # The transformers format the family is read from / written in: "" its own, "electra" (the
    # BERT family as transformers' Electra classes; bertcli.config.families.LAYOUTS).
    layout: str = ""

    # ---------------------------------------------------------------- derived shapes
    @property
    def spec(self) -> FamilySpec:
        return layout_spec(self.family, self.layout)

    @property
    def has_projection(self) -> bool:
        """ALBERT always maps E -> H (transformers' AlbertTransformer has the layer even when
        E == H); the other families only when E != H."""
        return self.spec.always_project or self.embedding_size != self.hidden_size

    @property
    def has_pooler(self) -> bool:
        """BERT and ALBERT pool [CLS] through dense + tanh; RoBERTa has no pooler."""
        return self.spec.pooler

    @property
    def position_offset(self) -> int:
        """RoBERTa numbers positions from padding_idx + 1 (fairseq's make_positions)."""
        return position_offset(self.spec, self.pad_token_id)

    def is_global(self, layer: int) -> bool:
        """Whether layer `layer` attends over the whole sequence (else a sliding window)."""
        return self.local_attention == 0 or layer % self.global_attn_every_n_layers == 0

    @property
    def window(self) -> int:
        """Tokens a local layer sees on each side (transformers' sliding_window)."""
        return self.local_attention // 2

    @property
    def group_size(self) -> int:
        return self.num_hidden_layers // self.num_hidden_groups

    def attention_index(self, layer: int) -> int:
        """Which stored attention sublayer layer `layer` uses (ALBERT: int(i / (L / G)))."""
        return layer // self.group_size if self.sharing in ("all", "attention") else layer

    def ffn_index(self, layer: int) -> int:
        """Which stored feed-forward sublayer layer `layer` uses."""
        return layer // self.group_size if self.sharing in ("all", "ffn") else layer

    @property
    def layer_plan(self) -> list[tuple[int, int]]:
        """(attention, feed-forward) sublayer indices of each layer, in order."""
        return [(self.attention_index(i), self.ffn_index(i)) for i in range(self.num_hidden_layers)]

    @property
    def num_attention_blocks(self) -> int:
        return self.num_hidden_groups if self.sharing in ("all", "attention") else self.num_hidden_layers

    @property
    def num_ffn_blocks(self) -> int:
        return self.num_hidden_groups if self.sharing in ("all", "ffn") else self.num_hidden_layers

    def replace(self, **changes) -> EncoderConfig:
        return dataclasses.replace(self, **changes)

    def validate(self, where: str | None = None) -> EncoderConfig:
        """Check the rules the modules rely on; raise UserError naming the field."""

        def fail(what: str, fix: str | None = None):
            raise UserError(what, where=where, fix=fix)

        if self.family not in FAMILIES:
            fail(f"unsupported model family {self.family!r}", "use one of: " + ", ".join(FAMILIES))
        if self.layout and (self.layout not in LAYOUTS or LAYOUTS[self.layout].name != self.family):
            fail(f"unsupported layout {self.layout!r} for the {self.family} family")
        if self.layout and self.norm != LAYOUTS[self.layout].norm:
            fail(f"{self.norm}-LN in the {self.layout} layout: transformers' {self.layout} has {LAYOUTS[self.layout].norm}-LN "
                 "layers only", f"write a {self.norm}-LN model in the {self.family} family's own layout")
        if self.hidden_act not in ACTIVATIONS:
            fail(f"unsupported activation {self.hidden_act!r}", "use gelu (exact) or gelu_new (tanh)")
        if self.num_attention_heads < 1 or self.hidden_size % self.num_attention_heads:
            fail(f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                 f"{self.num_attention_heads}")
        if self.sharing not in ("none", "all", "attention", "ffn"):
            fail(f"unsupported sharing {self.sharing!r}", "use none, all, attention or ffn")
        if self.num_hidden_groups < 1 or self.num_hidden_layers % self.num_hidden_groups:
            fail(f"num_hidden_layers {self.num_hidden_layers} is not a multiple of num_hidden_groups "
                 f"{self.num_hidden_groups}")
        if self.sharing == "none" and self.num_hidden_groups != 1:
            fail("num_hidden_groups > 1 needs sharing (all, attention or ffn)")
        if self.norm not in ("post", "pre"):
            fail(f"unsupported norm {self.norm!r}", "use post or pre")
        if not 0 <= self.pad_token_id < self.vocab_size:
            fail(f"pad_token_id {self.pad_token_id} is outside the vocabulary of {self.vocab_size}")
        if self.max_position_embeddings <= self.position_offset:
            fail(f"max_position_embeddings {self.max_position_embeddings} leaves no positions "
                 f"after the offset {self.position_offset}")
        spec = self.spec
        if spec.attention == "global" and self.local_attention:
            fail(f"local_attention {self.local_attention}: the {self.family} family attends globally "
                 "in every layer", "leave model.local_attention unset (0)")
        if self.local_attention < 0 or self.global_attn_every_n_layers < 1:
            fail("local_attention must be >= 0 and global_attn_every_n_layers >= 1")
        if spec.positions == "rotary" and (self.hidden_size // self.num_attention_heads) % 2:
            fail(f"rotary positions need an even head size, got {self.hidden_size // self.num_attention_heads}")
        if self.classifier_pooling not in ("cls", "mean"):
            fail(f"unsupported classifier_pooling {self.classifier_pooling!r}", "use cls or mean")
        if self.labels is not None and len(self.labels) < 1:
            fail("a classifier needs at least one label (one label = regression)")
        return self


def resolve_model(m: ModelConfig) -> ModelConfig:
    """Fill the `model` fields left at None with the family's defaults (in place; returns `m`):
    the spec's `defaults`, else E = H and the classifier dropout = the hidden dropout."""
    spec = family_spec(m.family)
    fallback = dict(embedding_size=m.hidden_size, classifier_dropout=m.hidden_dropout_prob, norm=spec.norm,
                    **NO_LOCAL_ATTENTION)
    for name, value in {**fallback, **spec.defaults}.items():
        if getattr(m, name) is None:
            setattr(m, name, value)
    return m


# What the families without alternating attention or rotary positions resolve to.
NO_LOCAL_ATTENTION = dict(local_attention=0, global_attn_every_n_layers=1, global_rope_theta=10000.0,
                          local_rope_theta=10000.0)


def resolved(value: T | None, name: str) -> T:
    """A `model` field that `resolve_model` has filled (every family resolves all of them)."""
    assert value is not None, f"model.{name} is still None after resolve_model"
    return value


def encoder_config(model_cfg: ModelConfig, vocab_size: int, pad_token_id: int,
                   labels: tuple[str, ...] | None = None) -> EncoderConfig:
    """Resolve a recipe `model` section (None fields take the family's defaults, by
    `resolve_model`, on a copy) into an EncoderConfig."""
    m = resolve_model(dataclasses.replace(model_cfg))
    if m.vocab_size is not None and m.vocab_size != vocab_size:
        raise UserError(f"model.vocab_size {m.vocab_size} differs from the tokenizer's {vocab_size}",
                        fix="leave model.vocab_size unset: it follows the tokenizer")
    cfg = EncoderConfig(
        family=m.family,
        vocab_size=int(vocab_size),
        hidden_size=m.hidden_size,
        num_hidden_layers=m.num_hidden_layers,
        num_attention_heads=m.num_attention_heads,
        intermediate_size=m.intermediate_size,
        embedding_size=resolved(m.embedding_size, "embedding_size"),
        hidden_act=resolved(m.hidden_act, "hidden_act"),
        hidden_dropout_prob=m.hidden_dropout_prob,
        attention_probs_dropout_prob=m.attention_probs_dropout_prob,
        max_position_embeddings=resolved(m.max_position_embeddings, "max_position_embeddings"),
        type_vocab_size=resolved(m.type_vocab_size, "type_vocab_size"),
        layer_norm_eps=resolved(m.layer_norm_eps, "layer_norm_eps"),
        initializer_range=m.initializer_range,
        sharing=resolved(m.sharing, "sharing"),
        num_hidden_groups=m.num_hidden_groups,
        norm=resolved(m.norm, "norm"),
        classifier_dropout=resolved(m.classifier_dropout, "classifier_dropout"),
        pad_token_id=int(pad_token_id),
        labels=tuple(labels) if labels is not None else None,
        local_attention=resolved(m.local_attention, "local_attention"),
        global_attn_every_n_layers=resolved(m.global_attn_every_n_layers, "global_attn_every_n_layers"),
        global_rope_theta=resolved(m.global_rope_theta, "global_rope_theta"),
        local_rope_theta=resolved(m.local_rope_theta, "local_rope_theta"),
        classifier_pooling=m.classifier_pooling,
    )
    return cfg.validate()
