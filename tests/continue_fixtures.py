"""Tiny starting checkpoints written by transformers itself (random init, save_pretrained) and
synthetic general / domain text, for the continued-pretraining tests (no download)."""

from __future__ import annotations

import random
from pathlib import Path

from finetune_fixtures import byte_level_bpe, tokenizer_of

GENERAL = ("the a this that report said on in at of and but very new old city team club after before today "
           "yesterday will was is met visited from with for people river school music garden house").split()
# words a general vocabulary splits into several pieces: the "domain" of the vocabulary tests
DOMAIN = ("methylbenzoate hydroxyproline ethanolamine polymerase acetylcholine chlorophyllase "
          "glucosamine phosphorylation carboxylase dehydrogenase").split()
LINK = "binds inhibits reduces activates with and in the of a".split()


def general_documents(n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    return [[" ".join(rng.choices(GENERAL, k=rng.randint(5, 12))) + " ." for _ in range(rng.randint(3, 6))]
            for _ in range(n)]


def domain_documents(n: int, seed: int = 1) -> list[list[str]]:
    """Sentences that pair domain words in a fixed pattern (word i binds word i+1), so a model
    can learn them in a few steps."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        sents = []
        for _ in range(rng.randint(3, 6)):
            i = rng.randrange(len(DOMAIN) - 1)
            sents.append(f"the {DOMAIN[i]} {rng.choice(LINK[:4])} {DOMAIN[i + 1]} in the cell .")
        docs.append(sents)
    return docs


def write_corpus(path: Path, docs: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    return path


def _modernbert_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE with bertcli's ModernBERT special tokens in their id order."""
    from tokenizers import processors

    tok = byte_level_bpe(texts, vocab_size, ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"])
    tok.post_processor = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0",
                                                       pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    return tok


KIND = {"bert": "wordpiece", "roberta": "bpe", "albert": "unigram", "modernbert": "bpe"}
SPECIALS = {
    "bert": dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]"),
    "roberta": dict(bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>", unk_token="<unk>",
                    pad_token="<pad>", mask_token="<mask>"),
    "albert": dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="<pad>", unk_token="<unk>", mask_token="[MASK]"),
    "modernbert": dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]"),
}


def hf_checkpoint(path: Path, family: str, texts: list[str], arch: str = "pretraining", vocab_size: int = 300,
                  hidden: int = 32, positions: int = 64, seed: int = 0) -> Path:
    """A randomly initialized transformers model of `family` saved with save_pretrained, and a
    tokenizer trained on `texts` saved by transformers next to it. arch: `pretraining`
    (*ForPreTraining, or *ForMaskedLM for the MLM-only families), `mlm` (*ForMaskedLM) or
    `base` (the bare *Model, as sentence-transformers ships encoders)."""
    import torch
    import transformers as tf

    tok = _modernbert_tokenizer(texts, vocab_size) if family == "modernbert" else \
        tokenizer_of(KIND[family], texts, vocab_size)
    fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIALS[family])
    fast.save_pretrained(path)
    V = tok.get_vocab_size()
    common = dict(vocab_size=V, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=2 * hidden)
    if family == "bert":
        cfg, prefix = tf.BertConfig(max_position_embeddings=positions, pad_token_id=0, **common), "Bert"
    elif family == "roberta":
        cfg, prefix = tf.RobertaConfig(max_position_embeddings=positions + 2, type_vocab_size=1, pad_token_id=1,
                                       bos_token_id=0, eos_token_id=2, **common), "Roberta"
    elif family == "albert":
        cfg, prefix = tf.AlbertConfig(embedding_size=16, max_position_embeddings=positions, pad_token_id=0,
                                      **common), "Albert"
    else:
        cfg, prefix = tf.ModernBertConfig(max_position_embeddings=positions, pad_token_id=3, bos_token_id=1,
                                          eos_token_id=2, cls_token_id=1, sep_token_id=2, local_attention=16,
                                          global_attn_every_n_layers=2, **common), "ModernBert"
    head = {"pretraining": "ForPreTraining" if family in ("bert", "albert") else "ForMaskedLM", "mlm": "ForMaskedLM",
            "base": "Model"}[arch]
    torch.manual_seed(seed)
    getattr(tf, prefix + head)(cfg).save_pretrained(path)
    return path
