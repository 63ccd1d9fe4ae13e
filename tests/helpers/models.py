"""Tiny models for the tests: the one tiny `model` section of every family, a padded batch, weights
far from the initial ones."""

from __future__ import annotations

from pathlib import Path

import torch

from bertcli.config.families import FAMILIES, family_spec
from bertcli.config.sections import ModelConfig

VOCAB = 101
PAD = {name: spec.pad_id for name, spec in FAMILIES.items()}  # bert 0, roberta 1, albert 0, modernbert 3


def tiny_section(family: str, **changes) -> ModelConfig:
    """A resolved tiny `model` section (what recipe.resolve would produce)."""
    base = dict(family=family, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=37, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                max_position_embeddings=40, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu",
                sharing="none", embedding_size=32, classifier_dropout=0.1)
    if family == "roberta":
        base.update(max_position_embeddings=42, type_vocab_size=1, layer_norm_eps=1e-5)
    if family == "albert":
        base.update(embedding_size=16, num_hidden_layers=4, sharing="all", hidden_act="gelu_new",
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if family == "modernbert":  # a window of 8 (+-4) on rows of up to 12 tokens; layers 0 and 3 global
        base.update(num_hidden_layers=4, type_vocab_size=1, layer_norm_eps=1e-5, norm="pre", local_attention=8,
                    global_attn_every_n_layers=3, global_rope_theta=160000.0, local_rope_theta=10000.0,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0)
    base.update(changes)
    return ModelConfig(**base)


def batch(family: str, lengths=(12, 7, 3), seed: int = 0, n_masked: int = 6) -> dict:
    """A right-padded batch with two segments, and masked positions on real tokens only."""
    g = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    pad = PAD[family]
    ids = torch.randint(5, VOCAB, (B, T), generator=g)
    mask = torch.zeros(B, T, dtype=torch.long)
    types = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
        ids[b, n:] = pad
        if family_spec(family).uses_token_types:
            types[b, n // 2:n] = 1
    real = mask.view(-1).nonzero().squeeze(1)
    positions = real[torch.randperm(len(real), generator=g)[:n_masked]].sort().values
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types, mlm_positions=positions)


@torch.no_grad()
def randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights far from the tiny initial ones, so every parameter shows in the outputs."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=g) * 0.2
        p.copy_(1.0 + noise if ("norm" in name.lower() and name.endswith("weight")) else noise)


def roberta_dir(path: Path, texts: list[str]) -> Path:
    """A tiny RoBERTa saved by transformers (model + fast tokenizer), randomly initialized."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaForMaskedLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                   cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = RobertaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1)
    RobertaForMaskedLM(cfg).save_pretrained(path)
    return path
