"""Tiny checkpoints and synthetic tagged data for the fine-tuning tests (no download)."""

from __future__ import annotations

import random
from pathlib import Path

FILL = ("the a this that report said on in at of and but very new old city team club after before "
        "today yesterday will was is met visited from with for".split())
PER = ["john", "mary", "peter", "anna", "ahmed", "li", "carlos", "olga"]
SURNAME = ["smith", "jones", "novak", "garcia", "chen", "kowalski"]
LOC = ["paris", "berlin", "tokyo", "lima", "cairo", "oslo", "quito"]
ORG = ["acme", "globex", "initech", "umbrella"]


def byte_level_bpe(texts: list[str], vocab_size: int, special_tokens: list[str]):
    """A byte-level BPE (RoBERTa's, ModernBERT's) trained on `texts`, `special_tokens` first in
    id order; no post-processor (the caller adds its family's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def tokenizer_of(kind: str, texts: list[str], vocab_size: int = 400):
    """A `tokenizers.Tokenizer` of each kind as bertcli / transformers build them: WordPiece
    (BERT), byte-level BPE (RoBERTa), Unigram with Metaspace (ALBERT)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        tok.train_from_iterator(texts, trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
        tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                       ("[CLS]", tok.token_to_id("[CLS]")))
    elif kind == "bpe":
        tok = byte_level_bpe(texts, vocab_size, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    else:
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        tok.train_from_iterator(texts, trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], unk_token="<unk>"))
        tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                       ("[CLS]", tok.token_to_id("[CLS]")))
    return tok


def tiny_checkpoint(path: Path, texts: list[str], kind: str = "wordpiece", hidden: int = 64, layers: int = 2,
                    positions: int = 130, init_range: float = 0.02) -> Path:
    """A randomly initialized pretraining checkpoint saved by transformers, with its tokenizer
    (`init_range`: the weights' std; large values make an untrained model's outputs differ
    from input to input)."""
    import torch
    import transformers as tf

    tok = tokenizer_of(kind, texts)
    if kind == "bpe":
        specials = dict(bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>", unk_token="<unk>",
                        pad_token="<pad>", mask_token="<mask>")
    else:
        specials = dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]" if kind == "wordpiece" else "<pad>",
                        unk_token="[UNK]" if kind == "wordpiece" else "<unk>", mask_token="[MASK]")
    tf.PreTrainedTokenizerFast(tokenizer_object=tok, **specials).save_pretrained(path)
    common = dict(vocab_size=tok.get_vocab_size(), hidden_size=hidden, num_hidden_layers=layers,
                  num_attention_heads=2, intermediate_size=2 * hidden, initializer_range=init_range)
    torch.manual_seed(0)
    if kind == "bpe":
        model = tf.RobertaForMaskedLM(tf.RobertaConfig(max_position_embeddings=positions + 2, type_vocab_size=1,
                                                       pad_token_id=1, **common))
    elif kind == "unigram":
        model = tf.AlbertForPreTraining(tf.AlbertConfig(embedding_size=32, max_position_embeddings=positions,
                                                        pad_token_id=0, **common))
    else:
        model = tf.BertForPreTraining(tf.BertConfig(max_position_embeddings=positions, pad_token_id=0, **common))
    model.save_pretrained(path)
    return path


def tagged_sentence(rng: random.Random, scheme: str = "iob1", adjacent: float = 0.15) -> tuple[list[str], list[str]]:
    """Filler words (O) around names (PER, one or two words), places (LOC) and companies (ORG),
    tagged in `scheme`; two entities of one type are adjacent with probability `adjacent`
    (IOB1's B- case)."""
    from bertcli.tasks.tagging.schemes import encode

    words, spans = [], []
    for _ in range(rng.randint(1, 3)):
        words += rng.choices(FILL, k=rng.randint(0, 4))
        kind = rng.choice(["PER", "LOC", "ORG"])
        for _ in range(2 if rng.random() < adjacent else 1):       # adjacent same-type entities
            start = len(words)
            if kind == "PER":
                words += [rng.choice(PER)] + ([rng.choice(SURNAME)] if rng.random() < 0.5 else [])
            else:
                words.append(rng.choice(LOC if kind == "LOC" else ORG))
            spans.append((kind, start, len(words) - 1))
    words += rng.choices(FILL, k=rng.randint(1, 3))
    return words, encode(spans, len(words), scheme)


def write_conll(path: Path, sentences, docstart: bool = True) -> Path:
    """CoNLL-2003 layout: `token POS chunk tag`, -DOCSTART- lines, blank lines between sentences."""
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for words, tags in sentences:
        lines += [f"{w} NN I-NP {t}" for w, t in zip(words, tags)] + [""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def corpus_texts(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(tagged_sentence(rng)[0]) for _ in range(n)]
