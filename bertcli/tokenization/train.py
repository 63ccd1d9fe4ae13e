"""Training a tokenizer: WordPiece (default), byte-level BPE or Unigram with `tokenizers`, and
writing a Hugging Face-compatible directory (the tokenizer stage, tokenization/build.py, runs
it on the corpus; tokenization/load.py reads any such directory back).

Special-token sets and their ids (first ids of the vocabulary, in this order):
    bert:    [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4
    roberta: <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4        (pad id 1: RoBERTa's padding_idx)
    albert:  <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4

Pipelines (each the one transformers' class rebuilds, so AutoTokenizer encodes identically):
    wordpiece  BertNormalizer (lowercase, strip_accents, CJK split per recipe), BertPreTokenizer,
               WordPiece with `##` continuations                         -> BertTokenizer
    bpe        byte-level (`Ġ`), no prefix space, case kept (RoBERTa)   -> RobertaTokenizer
    unigram    ALBERT's normalizer (``/'' -> ", NFKD + accents, lowercase), Metaspace `▁`
                                                                         -> AlbertTokenizer
Any other combination (e.g. lowercased BPE, roberta tokens on WordPiece or Unigram) is written
with tokenizer_class PreTrainedTokenizerFast, which transformers loads from tokenizer.json as is.
Templates: `[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]`, type ids 0/1;
roberta tokens: `<s> A </s>` / `<s> A </s></s> B </s>` (RobertaProcessing).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertcli.config.families import family_spec
from bertcli.config.sections import TokenizerConfig
from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.tokenization import reproducible
from bertcli.tokenization.alphabet import UnkCauses, alphabet_limit, alphabet_stats, character_counts
from bertcli.tokenization.load import CJK_CHAR, CJK_RANGES, ROLES, SPECIAL_TOKENS

EVAL_MAX_SENTENCES = 20000
_WORDS = re.compile(f"[{CJK_RANGES}]|[^\\s{CJK_RANGES}]+")




# --------------------------------------------------------------------------------- pipeline
def special_set(cfg: TokenizerConfig) -> str:
    """The recipe's special-token set (resolving the recipe fills in the model family's)."""
    assert cfg.special_tokens is not None, "recipe resolution always sets tokenizer.special_tokens"
    return cfg.special_tokens


def special_tokens(set_name: str) -> list[AddedToken]:
    """The set's special tokens in id order; RoBERTa's <mask> swallows the space before it."""
    spec = family_spec(set_name)
    return [AddedToken(t, special=True, normalized=False, lstrip=spec.mask_lstrip and role == "mask")
            for role, t in spec.special_tokens.items()]


def hf_class(cfg: TokenizerConfig) -> str:
    """The transformers class that rebuilds exactly this pipeline, else the generic one."""
    name = family_spec(special_set(cfg)).tokenizer_classes.get(cfg.kind, "PreTrainedTokenizerFast")
    if cfg.kind == "bpe" and (cfg.lowercase or cfg.strip_accents):
        return "PreTrainedTokenizerFast"  # byte-level BPE classes keep case and accents
    return name


def new_tokenizer(cfg: TokenizerConfig) -> Tokenizer:
    """An untrained tokenizer with the recipe's normalizer, pre-tokenizer and decoder."""
    unk = SPECIAL_TOKENS[special_set(cfg)]["unk"]
    if cfg.kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=unk, continuing_subword_prefix="##"))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=cfg.split_cjk,
                                                    strip_accents=cfg.strip_accents, lowercase=cfg.lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
    elif cfg.kind == "bpe":
        tok = Tokenizer(models.BPE())  # byte-level: every byte is in the vocabulary, no unknowns
        steps = _case_steps(cfg, nfkd=False)
        if steps:
            tok.normalizer = normalizers.Sequence(steps)
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    else:
        tok = Tokenizer(models.Unigram())
        # ALBERT's SentencePiece normalization, as AlbertTokenizer rebuilds it
        steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')] + _case_steps(cfg, nfkd=True)
        tok.normalizer = normalizers.Sequence(steps)
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tok


def _case_steps(cfg: TokenizerConfig, nfkd: bool) -> list:
    steps: list[normalizers.Normalizer] = []
    if cfg.strip_accents:
        steps += [normalizers.NFKD() if nfkd else normalizers.NFD(), normalizers.StripAccents()]
    if cfg.lowercase:
        steps.append(normalizers.Lowercase())
    return steps


def new_trainer(cfg: TokenizerConfig, show_progress: bool, seed: reproducible.WordPieceSeed | None = None,
                limit_alphabet: int | None = None):
    """`seed`: WordPiece's alphabet and `##` pieces, fixed in advance (bertcli/tokenization/reproducible.py);
    without it `limit_alphabet` (alphabet_limit's resolved number) or the recipe's number."""
    specials = special_tokens(special_set(cfg))
    explicit = None if cfg.limit_alphabet == "auto" else cfg.limit_alphabet
    if cfg.kind == "wordpiece":
        limit = limit_alphabet or explicit
        extra = dict(initial_alphabet=seed.alphabet, limit_alphabet=len(seed.alphabet)) if seed else \
            ({} if limit is None else {"limit_alphabet": limit})
        return trainers.WordPieceTrainer(vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency,
                                         special_tokens=specials + (reproducible.seed_tokens(seed) if seed else []),
                                         continuing_subword_prefix="##", show_progress=show_progress, **extra)
    if cfg.kind == "bpe":
        # the 256 byte symbols are the whole alphabet after the ByteLevel pre-tokenizer: no limit
        # cuts them (`auto` passes none; the trainers reject an explicit None)
        limit_kw: dict[str, Any] = {} if explicit is None else {"limit_alphabet": max(explicit, 256)}
        return trainers.BpeTrainer(vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency,
                                   special_tokens=specials, **limit_kw,
                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                   show_progress=show_progress)
    return trainers.UnigramTrainer(vocab_size=cfg.vocab_size, special_tokens=specials,
                                   unk_token=SPECIAL_TOKENS[special_set(cfg)]["unk"],
                                   max_piece_length=cfg.max_piece_length, show_progress=show_progress)


def add_post_processor(tok: Tokenizer, set_name: str) -> None:
    t = SPECIAL_TOKENS[set_name]
    cls_id, sep_id = tok.token_to_id(t["cls"]), tok.token_to_id(t["sep"])
    assert cls_id is not None and sep_id is not None, "training adds every special token to the vocabulary"
    cls, sep = (t["cls"], cls_id), (t["sep"], sep_id)
    if family_spec(set_name).pair_template == "double_sep":
        tok.post_processor = processors.RobertaProcessing(sep, cls, trim_offsets=True, add_prefix_space=False)
    else:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls[0]}:0 $A:0 {sep[0]}:0", pair=f"{cls[0]}:0 $A:0 {sep[0]}:0 $B:1 {sep[0]}:1",
            special_tokens=[cls, sep])


# ------------------------------------------------------------------------- vocabulary check
def minimum_vocab_size(cfg: TokenizerConfig, tok: Tokenizer, alphabet: str,
                       limit: int | None = None) -> tuple[int, str]:
    """The smallest vocabulary the trainer can produce for this alphabet, and how it was counted."""
    n_special = len(SPECIAL_TOKENS[special_set(cfg)])
    chars = set(tok.normalizer.normalize_str(alphabet)) if tok.normalizer else set(alphabet)
    chars = {c for c in chars if not c.isspace()}
    if cfg.kind == "bpe":
        return n_special + 256, f"{n_special} special tokens + the 256 byte values of byte-level BPE"
    if cfg.kind == "unigram":
        return (n_special + len(chars) + 1,
                f"{n_special} special tokens + {len(chars):,} distinct characters in the corpus + `▁`")
    limit = limit or (len(chars) if cfg.limit_alphabet == "auto" else cfg.limit_alphabet)
    kept = min(len(chars), limit)
    # characters that can continue a word also need their `##` form; punctuation (and CJK when
    # split) always stands alone
    inner = sum(1 for c in chars if not _is_punctuation(c) and not (cfg.split_cjk and CJK_CHAR.match(c)))
    cont = min(kept, inner)
    return (n_special + kept + cont,
            f"{n_special} special tokens + {kept:,} characters (of {len(chars):,} distinct in the corpus, "
            f"tokenizer.limit_alphabet {cfg.limit_alphabet}) + about {cont:,} of their `##` continuations")


def _is_punctuation(c: str) -> bool:
    o = ord(c)
    return 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126 or \
        unicodedata.category(c).startswith("P")


def check_vocab_size(cfg: TokenizerConfig, tok: Tokenizer, alphabet: str, where: str,
                     limit: int | None = None) -> None:
    need, how = minimum_vocab_size(cfg, tok, alphabet, limit)
    if cfg.vocab_size < need:
        fix = f"set tokenizer.vocab_size to at least {need:,} (useful sizes are in the thousands: 8k-50k)"
        if cfg.kind == "wordpiece":
            fix += ", or set tokenizer.limit_alphabet to a number to keep fewer rare characters"
        raise UserError(f"tokenizer.vocab_size {cfg.vocab_size:,} is smaller than the {need:,} tokens the "
                        f"trainer must keep: {how}", where=where, fix=fix)


# ---------------------------------------------------------------------------------- training
def _sentence_batches(ds, bar, batch_docs: int = 1000):
    """Lists of sentences, `batch_docs` documents at a time, straight from the Arrow columns."""
    import pyarrow.compute as pc

    for batch in ds.with_format("arrow").iter(batch_size=batch_docs):
        yield pc.list_flatten(batch.column("sentences")).to_pylist()
        bar.advance(batch.num_rows)


def text_encoder(tok: Tokenizer) -> Tokenizer:
    """A copy of `tok` for encoding corpus text (call with add_special_tokens=False):
    - a literal "[SEP]", "</s>" or "<pad>" in the text is text, split like any other word, never
      the special token (which would plant a fake separator or padding inside a segment);
    - no post-processor: it runs even with add_special_tokens=False and costs 5-10% of the
      encoding time for nothing."""
    bare = Tokenizer.from_str(tok.to_str())
    bare.post_processor = None
    bare.encode_special_tokens = True
    return bare


def iter_encoded(tok: Tokenizer, ds, batch_documents: int = 1000):
    """Encodings (no special tokens) of every sentence of a corpus split, batch by batch: one list
    of `tokenizers.Encoding` per `batch_documents` documents, in corpus order."""
    bare = text_encoder(tok)
    for batch in _sentence_batches(ds, _NoBar(), batch_documents):
        yield bare.encode_batch(batch, add_special_tokens=False)


def train_tokenizer(cfg: TokenizerConfig, ds, alphabet: str, where: str,
                    stats: dict | None = None) -> Tokenizer:
    """Train on the `sentences` column of a corpus split (a datasets.Dataset). WordPiece fills
    `stats` (when given) with the training text's character counts and the alphabet kept."""
    if cfg.sample_documents is not None and cfg.sample_documents < len(ds):
        ds = ds.select(range(cfg.sample_documents))
        alphabet = _alphabet_of(ds)
    tok = new_tokenizer(cfg)
    limit = seed = None
    if cfg.kind == "wordpiece":
        counts = character_counts(tok, _sentence_batches(ds, _NoBar()))
        limit = alphabet_limit(cfg.limit_alphabet, cfg.min_frequency, counts)
        if stats is not None:
            stats.update(counts=counts, alphabet=alphabet_stats(cfg.limit_alphabet, cfg.min_frequency, counts, limit))
        seed = reproducible.wordpiece_seed(counts, limit, lambda c: not _is_punctuation(c) and
                                           not (cfg.split_cjk and CJK_CHAR.match(c)))
    check_vocab_size(cfg, tok, alphabet, where, limit)
    trainer = new_trainer(cfg, show_progress=False, seed=seed)
    def batches(bar: console.Advancing) -> Iterator[list[str]]:
        yield from _sentence_batches(ds, bar)
        console.log(f"learning the {cfg.kind} vocabulary ({cfg.vocab_size:,} tokens) from the counts")

    with console.progress(f"training {cfg.kind} tokenizer (documents read)", total=len(ds)) as bar:
        tok.train_from_iterator(batches(bar), trainer=trainer, length=len(ds))
    tok = reproducible.canonical(tok, cfg.kind, seed)
    add_post_processor(tok, special_set(cfg))
    # no readable_scores here: canonical already wrote Unigram's scores with 6 decimals, which
    # both JSON readers read exactly, so it would be a no-op round trip of the whole tokenizer
    # (a tenth of a second at 30k pieces: the Python overhead left in Unigram's train_s)
    return tok


def _alphabet_of(ds) -> str:
    chars: set = set()
    for batch in _sentence_batches(ds, _NoBar()):
        for s in batch:
            chars.update(s)
    return "".join(sorted(chars))


class _NoBar:
    def advance(self, n: float = 1) -> None:
        pass


def measure_unk_rate(tok: Tokenizer, unk_id: int, ds, causes: UnkCauses | None = None) -> dict:
    """UNK rate and tokens per word on (up to EVAL_MAX_SENTENCES sentences of) a split; words are
    whitespace-separated runs, each CJK ideograph counting as one word. `causes` is told about
    every sentence holding an [UNK]."""
    tokens = unks = words = sentences = 0
    for batch in _sentence_batches(ds, _NoBar()):
        batch = batch[: EVAL_MAX_SENTENCES - sentences]
        for text, enc in zip(batch, tok.encode_batch(batch, add_special_tokens=False)):
            tokens += len(enc.ids)
            n_unk = enc.ids.count(unk_id)
            unks += n_unk
            if n_unk and causes is not None:
                causes.add(text, enc)
        words += sum(len(_WORDS.findall(s)) for s in batch)
        sentences += len(batch)
        if sentences >= EVAL_MAX_SENTENCES:
            break
    return {"sentences": sentences, "tokens": tokens, "unk_rate": unks / tokens if tokens else None,
            "tokens_per_word": tokens / words if words else None}


# ------------------------------------------------------------------------------- HF files
def readable_scores(tok: Tokenizer) -> Tokenizer:
    """`tok` with its Unigram scores rounded to 15 significant digits, so that every reader of
    tokenizer.json gets the same numbers. `tokenizers` writes the shortest decimal of each score
    (16-17 digits) but its JSON reader (serde_json without float_roundtrip) reads such decimals up
    to one unit in the last place off, while Python's json (transformers' AlbertTokenizer rebuilds
    the model from it) reads them exactly: 1,393 of 8,000 scores differed, and segmentations of
    equal score ("─┼" + "─" * 39) came out differently. A decimal of at most 15 digits is read
    exactly by both (none of 200,000 differed). Other models are returned as they are."""
    if type(tok.model).__name__ != "Unigram":
        return tok
    obj = json.loads(tok.to_str())
    obj["model"]["vocab"] = [[piece, float(f"{score:.15g}")] for piece, score in obj["model"]["vocab"]]
    out = Tokenizer.from_str(jsonout.dumps(obj, ensure_ascii=False))
    out.encode_special_tokens = tok.encode_special_tokens
    return out


def write_hf_files(tok: Tokenizer, cfg: TokenizerConfig, out: Path) -> None:
    """tokenizer.json, vocab.txt (WordPiece), tokenizer_config.json, special_tokens_map.json."""
    out = Path(out)
    tok = readable_scores(tok)
    tok.save(str(out / "tokenizer.json"))
    if cfg.kind == "wordpiece":
        vocab = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
        (out / "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")
    t = SPECIAL_TOKENS[special_set(cfg)]
    roles = {f"{r}_token": t[r] for r in ROLES}
    spec = family_spec(special_set(cfg))
    if spec.pair_template == "double_sep" or cfg.kind == "unigram":  # what RobertaTokenizer / AlbertTokenizer expect
        roles.update(bos_token=t["cls"], eos_token=t["sep"])
    cls_name = hf_class(cfg)
    config = {"tokenizer_class": cls_name, **roles, "model_max_length": cfg.model_max_length,
              "do_lower_case": cfg.lowercase, "clean_up_tokenization_spaces": False}
    if cls_name == "BertTokenizer":
        config.update(strip_accents=cfg.strip_accents, tokenize_chinese_chars=cfg.split_cjk)
    elif cls_name == "RobertaTokenizer":
        config.update(add_prefix_space=False, trim_offsets=True, errors="replace")
    elif cls_name == "AlbertTokenizer":
        config.update(keep_accents=not cfg.strip_accents, add_prefix_space=True, trim_offsets=True)
    if cls_name != "AlbertTokenizer":
        config["model_input_names"] = (["input_ids", "token_type_ids", "attention_mask"] if spec.uses_token_types
                                       else ["input_ids", "attention_mask"])
    config["added_tokens_decoder"] = {
        str(i): {"content": a.content, "lstrip": a.lstrip, "normalized": a.normalized, "rstrip": a.rstrip,
                 "single_word": a.single_word, "special": a.special}
        for i, a in sorted(tok.get_added_tokens_decoder().items())}
    config["bertcli"] = {"kind": cfg.kind, "special_tokens": cfg.special_tokens}
    write_json(out / "tokenizer_config.json", config)
    write_json(out / "special_tokens_map.json", roles)


def write_json(path: Path, obj) -> None:
    path.write_text(jsonout.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


