"""Tokenizer stage: train WordPiece (default), byte-level BPE or Unigram with `tokenizers` and
write a Hugging Face-compatible directory.

CONTRACT (used by the data builder, trainer, fill-mask and fine-tuning):

    run_tokenize(recipe, force=False) -> StageResult      # `bertcli tokenize`
    ensure_tokenizer(recipe) -> StageResult              # reuse when complete, else build
    load_tokenizer(path) -> TokenizerInfo                # any HF tokenizer dir (tokenizer.json or vocab.txt)

    TokenizerInfo fields: path, tokenizer (tokenizers.Tokenizer, with its post-processor),
    kind ("wordpiece" | "bpe" | "unigram"), vocab_size (len incl. special tokens),
    pad_id, unk_id, cls_id, sep_id, mask_id (for roberta: cls = <s>, sep = </s>),
    special_ids (frozenset of all special-token ids).

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
Any other combination (e.g. lowercased BPE, roberta tokens on WordPiece or Unigram) is written with tokenizer_class
PreTrainedTokenizerFast, which transformers loads
from tokenizer.json as is. Templates: `[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]`, type ids 0/1;
roberta tokens: `<s> A </s>` / `<s> A </s></s> B </s>` (RobertaProcessing).
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertcli import console, reproducible
from bertcli.alphabet import UnkCauses, alphabet_limit, alphabet_stats, character_counts, unk_warning
from bertcli.errors import UserError
from bertcli.model.families import FAMILIES, family_spec
from bertcli.recipe import Recipe
from bertcli.sections import TokenizerConfig
from bertcli.stages import STAGE_VERSIONS, StageResult, building, is_complete, stage_dir, stage_guard

TOKENIZER_VERSION = STAGE_VERSIONS["tokenizer"]
INFO_FILE = "tokenizer_info.json"
ROLES = ("pad", "unk", "cls", "sep", "mask")
# token per role, in vocabulary order (the order is the id): each family's set (FamilySpec.special_tokens)
SPECIAL_TOKENS = {name: dict(spec.special_tokens) for name, spec in FAMILIES.items()}
EVAL_MAX_SENTENCES = 20000
# CJK ideographs: the ranges of BERT's tokenization._is_chinese_char, which the BERT normalizer
# splits into single characters (also the data stage's test for Chinese text).
_CJK = ("\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f"
        "\U0002b820-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f")
_WORDS = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")
CJK_CHAR = re.compile(f"[{_CJK}]")


@dataclass
class TokenizerInfo:
    path: Path
    tokenizer: Tokenizer
    kind: str
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    special_ids: frozenset
    tokens: dict = field(default_factory=dict)  # role -> token string, e.g. {"cls": "[CLS]", ...}


# --------------------------------------------------------------------------------- pipeline
def special_tokens(set_name: str) -> list[AddedToken]:
    """The set's special tokens in id order; RoBERTa's <mask> swallows the space before it."""
    spec = family_spec(set_name)
    return [AddedToken(t, special=True, normalized=False, lstrip=spec.mask_lstrip and role == "mask")
            for role, t in spec.special_tokens.items()]


def hf_class(cfg: TokenizerConfig) -> str:
    """The transformers class that rebuilds exactly this pipeline, else the generic one."""
    name = family_spec(cfg.special_tokens).tokenizer_classes.get(cfg.kind, "PreTrainedTokenizerFast")
    if cfg.kind == "bpe" and (cfg.lowercase or cfg.strip_accents):
        return "PreTrainedTokenizerFast"  # byte-level BPE classes keep case and accents
    return name


def new_tokenizer(cfg: TokenizerConfig) -> Tokenizer:
    """An untrained tokenizer with the recipe's normalizer, pre-tokenizer and decoder."""
    unk = SPECIAL_TOKENS[cfg.special_tokens]["unk"]
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
    steps = []
    if cfg.strip_accents:
        steps += [normalizers.NFKD() if nfkd else normalizers.NFD(), normalizers.StripAccents()]
    if cfg.lowercase:
        steps.append(normalizers.Lowercase())
    return steps


def new_trainer(cfg: TokenizerConfig, show_progress: bool, seed: reproducible.WordPieceSeed | None = None,
                limit_alphabet: int | None = None):
    """`seed`: WordPiece's alphabet and `##` pieces, fixed in advance (bertcli/reproducible.py);
    without it `limit_alphabet` (alphabet_limit's resolved number) or the recipe's number."""
    specials = special_tokens(cfg.special_tokens)
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
        return trainers.BpeTrainer(vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency,
                                   special_tokens=specials,
                                   **({} if explicit is None else {"limit_alphabet": max(explicit, 256)}),
                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                   show_progress=show_progress)
    return trainers.UnigramTrainer(vocab_size=cfg.vocab_size, special_tokens=specials,
                                   unk_token=SPECIAL_TOKENS[cfg.special_tokens]["unk"],
                                   max_piece_length=cfg.max_piece_length, show_progress=show_progress)


def add_post_processor(tok: Tokenizer, set_name: str) -> None:
    t = SPECIAL_TOKENS[set_name]
    cls, sep = (t["cls"], tok.token_to_id(t["cls"])), (t["sep"], tok.token_to_id(t["sep"]))
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
    n_special = len(SPECIAL_TOKENS[cfg.special_tokens])
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
    def batches(bar):
        yield from _sentence_batches(ds, bar)
        console.log(f"learning the {cfg.kind} vocabulary ({cfg.vocab_size:,} tokens) from the counts")

    with console.progress(f"training {cfg.kind} tokenizer (documents read)", total=len(ds)) as bar:
        tok.train_from_iterator(batches(bar), trainer=trainer, length=len(ds))
    tok = reproducible.canonical(tok, cfg.kind, seed)
    add_post_processor(tok, cfg.special_tokens)
    return readable_scores(tok)


def _alphabet_of(ds) -> str:
    chars: set = set()
    for batch in _sentence_batches(ds, _NoBar()):
        for s in batch:
            chars.update(s)
    return "".join(sorted(chars))


class _NoBar:
    def advance(self, n):
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
    out = Tokenizer.from_str(json.dumps(obj, ensure_ascii=False))
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
    t = SPECIAL_TOKENS[cfg.special_tokens]
    roles = {f"{r}_token": t[r] for r in ROLES}
    spec = family_spec(cfg.special_tokens)
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
    _write_json(out / "tokenizer_config.json", config)
    _write_json(out / "special_tokens_map.json", roles)


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------ stage
def tokenizer_dir(recipe: Recipe) -> Path:
    return stage_dir(recipe, "tokenizer")


def run_tokenize(recipe: Recipe, force: bool = False) -> StageResult:
    """`bertcli tokenize`: train the tokenizer (and read the corpus) unless cached; --force
    rebuilds both."""
    path = tokenizer_dir(recipe)
    with stage_guard(path, "tokenizer"):
        if is_complete(path) and not force:
            return _reused(path)
        return _build(recipe, path, force)


def ensure_tokenizer(recipe: Recipe) -> StageResult:
    """The cached tokenizer, built first when missing (what later stages call)."""
    return run_tokenize(recipe)


def _reused(path: Path) -> StageResult:
    info = json.loads((path / INFO_FILE).read_text(encoding="utf-8"))
    _warn(info)
    return StageResult("tokenizer", path, True, _summary(info, reused=True))


def _build(recipe: Recipe, path: Path, force: bool) -> StageResult:
    from bertcli.corpus import build_corpus, corpus_info, corpus_summary_rows

    start = time.perf_counter()
    corpus = build_corpus(recipe, force=force)
    import datasets  # after the corpus: its errors need no datasets import (fast error messages)

    cinfo = corpus_info(corpus.path)
    dd = datasets.load_from_disk(str(corpus.path))
    cfg = recipe.tokenizer
    train_start, train_cpu = time.perf_counter(), time.process_time()
    stats: dict = {}
    tok = train_tokenizer(cfg, dd["train"], cinfo["alphabet"], where=recipe.source, stats=stats)
    train_s, train_cpu = time.perf_counter() - train_start, time.process_time() - train_cpu
    size = tok.get_vocab_size(with_added_tokens=True)
    if size > cfg.vocab_size:
        console.log(f"note: the trained vocabulary has {size:,} tokens, more than tokenizer.vocab_size "
                    f"{cfg.vocab_size:,} (every character of the alphabet is kept)")
    elif size < cfg.vocab_size:
        console.log(f"note: the corpus only supports {size:,} tokens of the {cfg.vocab_size:,} asked "
                    "(tokenizer.vocab_size); a larger corpus fills it")
    unk_id = tok.token_to_id(SPECIAL_TOKENS[cfg.special_tokens]["unk"])
    split = "validation" if len(dd["validation"]) else "train"
    causes = UnkCauses(tok, unk_id, stats.get("counts"), cfg.min_frequency)
    quality = measure_unk_rate(tok, unk_id, dd[split], causes)
    with building(path, recipe) as tmp:
        write_hf_files(tok, cfg, tmp)
        info = {"version": TOKENIZER_VERSION, "kind": cfg.kind, "vocab_size": size, "hf_class": hf_class(cfg),
                "corpus": str(corpus.path), "corpus_reused": corpus.reused,
                "documents": cinfo["train"]["documents"] + cinfo["validation"]["documents"],
                "sentences": cinfo["train"]["sentences"] + cinfo["validation"]["sentences"],
                "characters": cinfo["train"]["characters"] + cinfo["validation"]["characters"],
                "trained_on_documents": min(len(dd["train"]), cfg.sample_documents or len(dd["train"])),
                "evaluated_on": split, **{f"eval_{k}": v for k, v in quality.items()},
                # what the alphabet kept and why tokens are [UNK]: the warning above 1% (alphabet.py)
                "min_frequency": cfg.min_frequency, "alphabet": stats.get("alphabet"),
                "unk_causes": causes.result(),
                "train_seconds": round(train_s, 3), "train_cpu_seconds": round(train_cpu, 3),
                "seconds": round(time.perf_counter() - start, 3),
                # non-UTF-8 lines replaced or skipped, documents cut: shown with the tokenizer's summary
                "corpus_notes": corpus_summary_rows(cinfo)[3:]}
        _write_json(tmp / INFO_FILE, info)
    _warn(info)
    return StageResult("tokenizer", path, False, _summary(info, reused=False))


def _warn(info: dict) -> None:
    """The [UNK] warning, each time the tokenizer is built or reused (so `pretrain` shows it)."""
    message = unk_warning(info)
    if message:
        console.log(f"warning: {message}")


def _summary(info: dict, reused: bool) -> list[tuple[str, object]]:
    rate, tpw = info["eval_unk_rate"], info["eval_tokens_per_word"]
    split = info["evaluated_on"]
    return [
        ("documents", info["documents"]),
        ("sentences", info["sentences"]),
        ("characters", info["characters"]),
        ("vocab size", f"{info['vocab_size']:,} ({info['kind']}, {info['hf_class']})"),
        (f"{split} UNK rate", "n/a" if rate is None else f"{rate:.4%}"),
        ("avg tokens per word", "n/a" if tpw is None else f"{tpw:.3f}"),
        ("seconds", f"{info['seconds']:.1f} (training {info['train_seconds']:.1f})"
                    + (", when it was built" if reused else "")),
        ("reused", reused),
    ] + [tuple(row) for row in info.get("corpus_notes", [])]


# ------------------------------------------------------------------------------------- load
_FALLBACK = {"pad": ("[PAD]", "<pad>"), "unk": ("[UNK]", "<unk>"), "cls": ("[CLS]", "<s>"),
             "sep": ("[SEP]", "</s>"), "mask": ("[MASK]", "<mask>")}
_KINDS = {"WordPiece": "wordpiece", "BPE": "bpe", "Unigram": "unigram"}
LOADABLE = ("tokenizer.json", "vocab.txt")   # what load_tokenizer reads (vocab.txt: WordPiece only)


def load_tokenizer(path) -> TokenizerInfo:
    """Load any Hugging Face tokenizer directory: tokenizer.json (bertcli's, or one written by
    transformers for bert/roberta/albert), or an older BERT directory with only vocab.txt;
    special tokens are looked up by name, never assumed."""
    path = Path(path)
    config: dict = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (path / name).is_file():
            try:
                more = json.loads((path / name).read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise UserError(f"{name} is not valid JSON: {e}", where=str(path / name))
            if not isinstance(more, dict):
                raise UserError(f"{name} does not hold a JSON object", where=str(path / name))
            config.update(more)
    file = path / LOADABLE[0]
    if file.is_file():
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as e:  # tokenizers raises a bare Exception for a malformed file
            raise UserError(f"tokenizer.json cannot be read: {e}", where=str(file))
    elif (path / LOADABLE[1]).is_file():  # older BERT checkpoints: the WordPiece vocabulary only
        from tokenizers.implementations import BertWordPieceTokenizer

        tok = BertWordPieceTokenizer(str(path / "vocab.txt"), lowercase=bool(config.get("do_lower_case", True)))._tokenizer
    else:
        raise UserError(f"{path} has no tokenizer (tokenizer.json, or vocab.txt for WordPiece)", where=str(path),
                        fix="point at a directory written by `bertcli tokenize` or by transformers' "
                            "save_pretrained (a fast tokenizer)")
    tok.no_truncation()
    tok.no_padding()
    kind = _KINDS.get(type(tok.model).__name__)
    if kind is None:
        raise UserError("the tokenizer is neither a WordPiece, a BPE nor a Unigram model", where=str(path))
    tokens, ids = {}, {}
    for role in ROLES:
        names = [_token_name(config.get(f"{role}_token"))]
        if role in ("cls", "sep"):
            names.append(_token_name(config.get("bos_token" if role == "cls" else "eos_token")))
        names += _FALLBACK[role]
        found = next(((n, tok.token_to_id(n)) for n in names if n and tok.token_to_id(n) is not None), None)
        if found is None:
            raise UserError(f"the tokenizer has no {role} token (looked for {', '.join(n for n in names if n)})",
                            where=str(path), fix=f"set {role}_token in tokenizer_config.json")
        tokens[role], ids[role] = found
    special = {i for i, a in tok.get_added_tokens_decoder().items() if a.special} | set(ids.values())
    return TokenizerInfo(path=path, tokenizer=tok, kind=kind, vocab_size=tok.get_vocab_size(with_added_tokens=True),
                         pad_id=ids["pad"], unk_id=ids["unk"], cls_id=ids["cls"], sep_id=ids["sep"],
                         mask_id=ids["mask"], special_ids=frozenset(special), tokens=tokens)


def _token_name(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None
