"""Model size and training cost, for `bertcli info`.

Parameters are counted on a model built on the `meta` device (no memory, no initialization
cost), so every figure is the real module's, tied decoder counted once (with the embeddings).
"""

from __future__ import annotations

import torch

from bertcli.config.families import FAMILIES
from bertcli.config.model import encoder_config
from bertcli.config.sections import ModelConfig
from bertcli.model.heads import PreTrainingModel

# The padding id each family's tokenizer uses (it only decides RoBERTa's position offset here).
DEFAULT_PAD = {name: spec.pad_id for name, spec in FAMILIES.items()}


def _numel(module: torch.nn.Module | None) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


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
    cfg = encoder_config(model_cfg, vocab_size, DEFAULT_PAD[model_cfg.family])
    with torch.device("meta"):
        model = PreTrainingModel(cfg)
    enc = model.encoder
    embeddings = _numel(enc.embeddings) + _numel(enc.proj)
    encoder = _numel(enc.attention) + _numel(enc.ffn) + _numel(enc.final_norm)
    heads = _numel(enc.pooler) + _numel(model.mlm) + _numel(model.pair)
    per_layer = [_numel(enc.attention[a]) + _numel(enc.ffn[f]) for a, f in enc.layer_plan]
    encoder_effective = sum(per_layer) + _numel(enc.final_norm)
    total = embeddings + encoder + heads
    assert total == _numel(model), "every parameter belongs to one group"
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
