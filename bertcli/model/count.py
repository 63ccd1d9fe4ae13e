"""Model size and training cost, for `bertcli info`.

Parameters are counted from the configuration, module by module as bertcli.model.encoder and
bertcli.model.heads build them (tied decoder counted once, with the embeddings), so that `info`
and the memory check before training need no torch. tests/test_model_count.py holds the count
equal to the real module's, built on the `meta` device, for every family and sharing mode.
"""

from __future__ import annotations

from bertcli.config.families import FAMILIES
from bertcli.config.model import EncoderConfig, encoder_config
from bertcli.config.sections import ModelConfig

# The padding id each family's tokenizer uses (it only decides RoBERTa's position offset here).
DEFAULT_PAD = {name: spec.pad_id for name, spec in FAMILIES.items()}


def _linear(inp: int, out: int, bias: bool = True) -> int:
    return inp * out + (out if bias else 0)


def _norm(c: EncoderConfig, width: int) -> int:
    return width * (2 if c.spec.biases else 1)     # weight (+ bias unless the family has none)


def _attention(c: EncoderConfig, index: int) -> int:
    """encoder.Attention: fused Q/K/V, output projection, its LayerNorm (ModernBERT's first
    layer has none: it reads the normalized embeddings)."""
    H, b = c.hidden_size, c.spec.biases
    identity = c.norm == "pre" and index == 0 and not c.spec.first_attention_norm
    return _linear(H, 3 * H, b) + _linear(H, H, b) + (0 if identity else _norm(c, H))


def _ffn(c: EncoderConfig) -> int:
    """encoder.FeedForward: H -> I (GeGLU: 2I), I -> H, its LayerNorm."""
    H, inner, b = c.hidden_size, c.intermediate_size, c.spec.biases
    return _linear(H, inner * (2 if c.spec.feed_forward == "geglu" else 1), b) + _linear(inner, H, b) + _norm(c, H)


def parameter_counts(model_cfg: ModelConfig, vocab_size: int) -> dict[str, int]:
    """Parameters of the model with its pretraining heads.

    total = embeddings + encoder + heads, stored ("unique") parameters; transformers' count of
    BertForPreTraining / RobertaForMaskedLM / AlbertForPreTraining of the same config.
    embeddings: word, position, token-type tables, their LayerNorm, the E->H projection.
    encoder: the stored layers (shared sublayers once; pre-LN's final LayerNorm included).
    heads: pooler, MLM transform + output bias (its decoder is the word embeddings), NSP/SOP.
    *_effective: as if every layer had its own weights (what each token flows through); equal
    to the unique figures without sharing.
    """
    c = encoder_config(model_cfg, vocab_size, DEFAULT_PAD[model_cfg.family])
    spec, H, E = c.spec, c.hidden_size, c.embedding_size
    embeddings = c.vocab_size * E + _norm(c, E)
    if spec.positions != "rotary":
        embeddings += c.max_position_embeddings * E
    if spec.token_type_embeddings:
        embeddings += c.type_vocab_size * E
    if c.has_projection:
        embeddings += _linear(E, H)
    final_norm = _norm(c, H) if c.norm == "pre" else 0
    attention = [_attention(c, i) for i in range(c.num_attention_blocks)]
    ffn = _ffn(c)
    encoder = sum(attention) + ffn * c.num_ffn_blocks + final_norm
    encoder_effective = sum(attention[a] + ffn for a, _ in c.layer_plan) + final_norm
    heads = (_linear(H, H) if c.has_pooler else 0) + _linear(H, E, spec.biases) + _norm(c, E) + c.vocab_size
    if spec.pair_head != "none":
        heads += _linear(H, 2)
    total = embeddings + encoder + heads
    return {
        "total": total,
        "embeddings": embeddings,
        "encoder": encoder,
        "heads": heads,
        "encoder_effective": encoder_effective,
        "total_effective": total - encoder + encoder_effective,
    }


def flops_per_token(model_cfg: ModelConfig, vocab_size: int, seq_len: int, mlm_fraction: float) -> float:
    """Training FLOPs per token of bertcli's pretraining step (forward + backward = 3 x forward,
    2 FLOPs per multiply-add).

    Counted: the E->H projection; every layer's Q/K/V/output projections (4 H^2), feed-forward
    (2 H I; GeGLU 3 H I), attention scores and weighted sum over `seq_len` keys (2 T H; sliding
    windows are masked, not skipped, so local layers cost the same); the MLM head (H E + E V)
    only at the `mlm_fraction` of tokens that are predicted (sparse prediction); pooler and pair
    head once per sequence. The last layer computes keys and values for every token but the rest
    only where the heads read it (the masked tokens and [CLS]). Embedding look-ups, LayerNorm,
    activations and softmax are not matrix products and are left out (under 1% at base size).
    """
    cfg = encoder_config(model_cfg, vocab_size, DEFAULT_PAD[model_cfg.family])
    H, E, I, V, T = cfg.hidden_size, cfg.embedding_size, cfg.intermediate_size, cfg.vocab_size, seq_len  # noqa: E741 (the docstring's letters)
    pair = cfg.spec.pair_head != "none"
    ffn = (3 if cfg.spec.feed_forward == "geglu" else 2) * H * I
    layer = 4 * H * H + ffn + 2 * T * H
    kept = mlm_fraction + (1 / T if pair else 0.0)  # tokens the last layer computes in full
    macs = (cfg.num_hidden_layers - 1) * layer + 2 * H * H + kept * (layer - 2 * H * H)
    if cfg.has_projection:
        macs += E * H
    macs += mlm_fraction * (H * E + E * V)
    if pair:
        macs += (H * H + 2 * H) / T
    return float(6 * macs)
