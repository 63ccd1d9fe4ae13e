"""Shared pieces of the export / predict tests: tiny tokenizers and checkpoints of every family
and head kind, written the way bertcli writes them, and the comparison of two predictions. The
`exported` bundles of every family and kind are conftest.py's fixture."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bertcli.config.sections import ModelConfig
from bertcli.model import build_model, save_checkpoint
from helpers.models import tiny_section

SENTENCES = [
    "the cat sat on the mat", "a dog ran in the park", "paris is the capital of france",
    "which city is the capital of france", "exceptions are raised when an error is detected",
    "a module is a file containing definitions and statements", "it was raining in the park",
    "the quick brown fox jumps over the lazy dog",
]
SPECIAL = {"bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
           "roberta": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]}
PAD_ID = {"bert": 0, "albert": 0, "roberta": 1, "modernbert": 3}

LONG = " ".join(SENTENCES * 3)   # over the tiny models' 64 positions: NER and QA need windows


def write_tokenizer(directory: Path, family: str) -> int:
    """A small trained tokenizer (WordPiece for bert/albert, byte-level BPE for roberta) with its
    post-processor and tokenizer_config.json; returns the vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    directory.mkdir(parents=True, exist_ok=True)
    corpus = SENTENCES * 4
    if family == "modernbert":   # byte-level BPE with [CLS] / [SEP] / [PAD] / [MASK], as ModernBERT's
        sp = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
        tok = Tokenizer(models.BPE(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=sp,
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
        cfg = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
               "mask_token": "[MASK]", "model_input_names": ["input_ids", "attention_mask"]}
    elif family == "roberta":
        sp = SPECIAL["roberta"]
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=sp,
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
        cfg = {"bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>", "sep_token": "</s>",
               "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>",
               "model_input_names": ["input_ids", "attention_mask"]}
    else:
        sp = SPECIAL["bert"]
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        tok.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=120, special_tokens=sp))
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
        cfg = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
               "mask_token": "[MASK]"}
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return tok.get_vocab_size()


# What the export tests' checkpoints change in helpers.models.tiny_section: no dropout, room for
# longer rows, fewer layers (ModernBERT: global, local, local, with an 8-token window that matters).
EXPORT_SIZES = dict(intermediate_size=48, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                    max_position_embeddings=64, classifier_dropout=0.0)
EXPORT_FAMILY_SIZES = {"bert": {}, "roberta": dict(max_position_embeddings=66), "albert": dict(num_hidden_layers=2),
                       "modernbert": dict(num_hidden_layers=3, norm=None, global_rope_theta=None, local_rope_theta=None)}


def export_section(family: str, **changes) -> ModelConfig:
    """The tiny `model` section of the export tests' checkpoints."""
    return tiny_section(family, **{**EXPORT_SIZES, **EXPORT_FAMILY_SIZES[family], **changes})


@torch.no_grad()
def spread(model: torch.nn.Module, seed: int) -> None:
    """Weights far from the tiny initial ones (std 0.02 makes every output nearly the same), so
    a wrong graph shows in the outputs."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=g) * 0.15
        p.copy_(1.0 + noise if ("norm" in name and name.endswith("weight")) else noise)


NER_LABELS = ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")


def make_checkpoint(root: Path, family: str, head: str = "pretraining", labels=("negative", "positive"),
                    seed: int = 0, **changes) -> Path:
    """A tiny random checkpoint of `family` with the given head, saved with its tokenizer."""
    tok_dir = root / f"tok-{family}"
    vocab = write_tokenizer(tok_dir, family)
    torch.manual_seed(seed)
    section = export_section(family, **changes)
    if head in ("token", "qa"):
        from bertcli.config.model import encoder_config
        from bertcli.model.task_heads import MODELS

        c = encoder_config(section, vocab, PAD_ID[family], labels=tuple(labels) if head == "token" else None)
        model = MODELS[head](c)
    else:
        kw = {"labels": list(labels)} if head == "classification" else {}
        model = build_model(section, vocab, PAD_ID[family], head=head, **kw)
    spread(model, seed)
    out = root / f"{family}-{head}-{seed}"
    save_checkpoint(model.eval(), out, tokenizer_dir=tok_dir)
    return out


# (checkpoint head, --task) of every exportable kind; features come from the classifier, so
# the bare-encoder path is exercised on a checkpoint with another head.
KINDS = {"fill-mask": "pretraining", "classification": "classification", "features": "classification",
         "token-classification": "token", "question-answering": "qa"}
FAMILIES = ("bert", "roberta", "albert", "modernbert")


def same(a, b, where=""):
    """Equal predictions: identical labels, ids, spans and texts; probabilities and vectors within 1e-5."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (where, a, b)
    else:
        assert a == b, (where, a, b)
