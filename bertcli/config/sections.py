"""One dataclass per recipe section. The docstring under each field is its help text
(`bertcli explain SECTION`). Fields left at `None` are resolved from the model's family
by `recipe.resolve`, so the recipe saved next to every output holds concrete values only.

Field metadata: `ge`/`gt`/`le` bound numbers; `hash=False` marks settings that do not change a
stage's output (e.g. number of processes) and so do not invalidate its cache. Every number
field declares its range with `num` (a count or interval used as a divisor is `ge=1`); whatever
the bounds, a float setting must be finite (nan and inf are refused for every field, in
`recipe.check_value`), and tests check that no numeric field is left without a range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar

from bertcli.config import bounds
from bertcli.config.families import FamilyName  # pure data: the model families' names, as a Literal
from bertcli.config.generator import GeneratorConfig

T = TypeVar("T")   # a field's default, and so its type


def num(default: T, *, ge: float | None = None, gt: float | None = None, le: float | None = None, hash: bool = True,
        signed: bool = False) -> T:
    """A field with numeric bounds checked at load time; hash=False keeps it out of the stage
    cache keys (settings that do not change what a stage writes); signed=True declares that any
    finite number is meaningful (a threshold, an offset), so it has no lower bound on purpose."""
    return field(default=default, metadata={"ge": ge, "gt": gt, "le": le, "hash": hash, "signed": signed})


def nohash(default: T, *, ge: float | None = None, gt: float | None = None, le: float | None = None) -> T:
    """A field that does not change what a stage writes (excluded from its cache key); numbers give their bounds as `num` does."""
    if ge is not None or gt is not None or le is not None:
        return num(default, ge=ge, gt=gt, le=le, hash=False)
    return field(default=default, metadata={"hash": False})


# ----------------------------------------------------------------------------------------- corpus
@dataclass
class SourceConfig:
    path: str
    """A text file, directory, glob, a `datasets` hub name, or `builtin` (the running Python's own
    documentation: about 2 MB of English prose, no download). A bare string in `sources` is this.
    Files may be compressed (.gz .bz2 .xz); a directory written by `datasets`' save_to_disk is read
    as a dataset. Relative paths are read from the current directory."""
    format: Literal["auto", "text", "jsonl", "json", "parquet", "csv", "hub", "builtin"] = "auto"
    """How to read `path`. `auto` picks by extension (.jsonl .json .parquet .csv .tsv; any other
    file is text), for each file of a directory or glob; a name that is no local path (`owner/name`)
    is a `datasets` hub dataset."""
    layout: Literal["sentences", "documents"] = "sentences"
    """Text files only. `sentences`: Google BERT format, one sentence per line and a blank line
    between documents. `documents`: one document per line, split into sentences by bertcli."""
    text_field: str = "text"
    """Column holding the text in jsonl/json/parquet/csv files and hub datasets."""
    name: str | None = None
    """Hub datasets: the configuration name (e.g. `wikitext-103-raw-v1`)."""
    split: str = "train"
    """Hub datasets: the split to read."""
    max_documents: int | None = num(None, ge=1, le=bounds.MAX_ROWS)
    """Read at most this many documents from this source."""


@dataclass
class CorpusConfig:
    sources: list[SourceConfig] = field(default_factory=lambda: [SourceConfig("builtin")])
    """Where the text comes from; documents of all sources are concatenated in order."""
    validation_fraction: float = num(0.01, ge=0.0, le=0.5)
    """Fraction of documents held out for validation, chosen by a hash of each document's text,
    so the split does not change when sources are added or reordered."""
    sentence_split: Literal["auto", "always", "never"] = "auto"
    """Split documents into sentences (English and CJK end punctuation). `auto`: only documents
    that do not come one sentence per line (jsonl, parquet, csv, hub, `layout: documents`)."""
    max_line_bytes: int = num(16 * 1024 * 1024, ge=1024, le=bounds.MAX_INT32)
    """A line (or record) longer than this is an error rather than a silent memory blow-up."""
    encoding_errors: Literal["error", "replace", "skip"] = "error"
    """Lines that are not valid UTF-8: `error` stops with where they are, `replace` keeps them
    with U+FFFD, `skip` drops them (both report how many)."""
    min_sentence_chars: int = num(1, ge=1, le=bounds.MAX_LENGTH)
    """Sentences shorter than this (after stripping) are dropped."""


# -------------------------------------------------------------------------------------- tokenizer
@dataclass
class TokenizerConfig:
    kind: Literal["wordpiece", "bpe", "unigram"] = "wordpiece"
    """WordPiece (BERT, ALBERT here), byte-level BPE (RoBERTa, GPT-2) or Unigram (SentencePiece-style)."""
    vocab_size: int = num(30522, ge=32, le=bounds.MAX_VOCAB)
    """Target vocabulary size, special tokens included. A corpus too small to fill it gives fewer."""
    special_tokens: FamilyName | None = None
    """Special-token set: bert `[PAD] [UNK] [CLS] [SEP] [MASK]`, roberta `<s> <pad> </s> <unk>
    <mask>`, albert `<pad> <unk> [CLS] [SEP] [MASK]`. Default: the model family's."""
    lowercase: bool = True
    """Lowercase text before tokenizing (BERT uncased). RoBERTa's byte-level BPE keeps case: the
    roberta recipes set false (a lowercased BPE is saved as a generic PreTrainedTokenizerFast)."""
    strip_accents: bool | None = None
    """Remove accents (NFD, drop combining marks). Default: same as `lowercase`, as in BERT."""
    split_cjk: bool = True
    """WordPiece: put spaces around CJK ideographs so each is its own word (BERT's
    tokenize_chinese_chars). Unigram and byte-level BPE learn pieces of CJK text themselves, as
    SentencePiece (ALBERT) and RoBERTa do, and ignore it."""
    min_frequency: int = num(2, ge=1, le=bounds.MAX_INT32)
    """Pieces seen fewer times than this are not added to the vocabulary."""
    limit_alphabet: Literal["auto"] | int = num("auto", ge=1, le=bounds.MAX_ALPHABET)
    """WordPiece: the characters of the initial alphabet; others become [UNK]. `auto`: every
    character seen at least `min_frequency` times (Chinese text needs thousands), and never fewer
    than the 1,000 most frequent (the `tokenizers` default; characters tied with the last are
    kept too). A number: at most that many, the most frequent. Byte-level BPE always keeps its
    256 bytes; Unigram keeps every character."""
    max_piece_length: int = num(16, ge=1, le=1024)
    """Unigram: longest piece, in characters."""
    sample_documents: int | None = num(None, ge=1, le=bounds.MAX_ROWS)
    """Train on the first N documents only (the whole corpus is still used for data)."""
    model_max_length: int = num(512, ge=8, le=bounds.MAX_INT32)
    """Written to tokenizer_config.json for transformers."""
    extend: int | None = num(None, ge=1, le=bounds.MAX_VOCAB)
    """With model.init_from only: add up to N tokens to the adopted tokenizer, the corpus words
    (or pieces) it splits into two or more pieces, most frequent first; their embedding rows and
    MLM decoder bias start as the mean of those pieces' (bertcli/tokenization/extend.py)."""


# ------------------------------------------------------------------------------------------- data
@dataclass
class DataConfig:
    objective: Literal["nsp", "sop", "none"] = "nsp"
    """Sentence-pair task: `nsp` (BERT: B is the next segment or a random one), `sop` (ALBERT:
    two consecutive segments, swapped half the time) or `none` (RoBERTa: MLM only, packed)."""
    max_seq_length: int = num(128, ge=8, le=bounds.MAX_LENGTH)
    """Tokens per row, special tokens included."""
    short_seq_prob: float = num(0.1, ge=0.0, le=1.0)
    """NSP/SOP: probability of a shorter target length, drawn in [2, max_seq_length - 3]."""
    packing: Literal["full_sentences", "doc_sentences"] = "full_sentences"
    """`objective: none` only: FULL-SENTENCES packs sentences across document boundaries (with a
    separator), DOC-SENTENCES stops at the end of each document (RoBERTa, section 4.2)."""
    masking: Literal["static", "dynamic"] = "static"
    """`static`: masks are drawn once per copy (`dupe_factor`) and stored. `dynamic`: a new mask
    each time a row is served, drawn from (seed, epoch, row index) so resume is exact."""
    dupe_factor: int = num(10, ge=1, le=1000)
    """Copies of the training documents, each with its own pairs and (static) masks. Packed rows
    with dynamic masking would be identical copies: one is built. Validation gets one copy."""
    mlm_probability: float = num(0.15, gt=0.0, le=1.0)
    """Fraction of (non-special) tokens selected for prediction."""
    mask_replace_prob: float = num(0.8, ge=0.0, le=1.0)
    """Of the selected tokens, fraction replaced by the mask token."""
    random_replace_prob: float = num(0.1, ge=0.0, le=1.0)
    """Of the selected tokens, fraction replaced by a random non-special token (the rest is kept)."""
    mask_count: Literal["fixed", "bernoulli"] = "fixed"
    """`fixed`: exactly min(max_predictions_per_seq, max(1, round(n * p))) per row, as Google's
    builder. `bernoulli`: each token independently with probability p, as transformers."""
    max_predictions_per_seq: int | None = num(20, ge=1, le=bounds.MAX_LENGTH)
    """Cap on selected tokens per row (Google: 20 at 128 tokens, 80 at 512). null: no cap."""
    whole_word: bool = False
    """Select whole words: all pieces of a word are masked together."""
    ngram: int = num(1, ge=1, le=10)
    """Longest span, in whole words, selected at once; the length n is drawn with P(n) ∝ 1/n
    (ALBERT: 3, i.e. 6/11, 3/11, 2/11). 1 turns n-gram masking off."""
    word_segmenter: Literal["none", "jieba"] = "none"
    """Chinese whole-word masking: group CJK characters into words with jieba (`pip install
    bertcli[chinese]`). Without it every CJK character is its own word."""
    num_proc: int | None = num(None, ge=1, le=bounds.MAX_THREADS, hash=False)
    """Worker processes for building (default: all cores). The result does not depend on it."""
    documents_per_shard: int = num(1000, ge=1, le=bounds.MAX_INT32, hash=False)
    """Documents handed to a worker at a time; bounds memory, does not change the result."""


# ------------------------------------------------------------------------------------------ model
@dataclass
class ModelConfig:
    family: FamilyName = "bert"
    """Which checkpoint format and heads: bert (BertForPreTraining: MLM + NSP head), roberta
    (RobertaForMaskedLM: MLM head only), albert (AlbertForPreTraining: MLM + SOP head),
    modernbert (ModernBertForMaskedLM: rotary, GeGLU, no biases, alternating local/global
    attention; MLM head only)."""
    vocab_size: int | None = num(None, ge=8, le=bounds.MAX_VOCAB)
    """Default: the trained tokenizer's size. When set, the tokenizer must have exactly this many."""
    hidden_size: int = num(768, ge=8, le=bounds.MAX_WIDTH)
    """Width H of every layer."""
    num_hidden_layers: int = num(12, ge=1, le=bounds.MAX_LAYERS)
    """Depth L."""
    num_attention_heads: int = num(12, ge=1, le=bounds.MAX_LAYERS)
    """Heads A; must divide hidden_size."""
    intermediate_size: int = num(3072, ge=1, le=bounds.MAX_WIDTH * 8)
    """Feed-forward width (4H in the papers)."""
    embedding_size: int | None = num(None, ge=8, le=bounds.MAX_WIDTH)
    """Embedding width E; E ≠ H adds an E→H projection (ALBERT's factorization; albert models
    always have it). Default: H, or 128 for albert. transformers cannot load bert/roberta
    checkpoints with E ≠ H (bertcli can)."""
    hidden_act: Literal["gelu", "gelu_new"] | None = None
    """`gelu` (exact erf) or `gelu_new` (tanh approximation). Default: gelu, gelu_new for albert.
    modernbert's GeGLU gates with it."""
    hidden_dropout_prob: float = num(0.1, ge=0.0, le=1.0)
    """Dropout on embeddings and sublayer outputs (ALBERT's paper: 0)."""
    attention_probs_dropout_prob: float = num(0.1, ge=0.0, le=1.0)
    """Dropout on attention probabilities."""
    max_position_embeddings: int | None = num(None, ge=8, le=bounds.MAX_LENGTH)
    """Learned positions. Default: 512, or 514 for roberta, whose positions start at
    padding_idx + 1 = 2. modernbert (rotary, no table): the longest sequence, 8192."""
    type_vocab_size: int | None = num(None, ge=1, le=bounds.MAX_LAYERS)
    """Token-type (segment) embeddings. Default: 2, or 1 for roberta (modernbert has none)."""
    layer_norm_eps: float | None = num(None, gt=0.0, le=1.0)
    """Default: 1e-12, or 1e-5 for roberta and modernbert."""
    initializer_range: float = num(0.02, gt=0.0, le=1.0)
    """Std of the initialization, as transformers: normal(0, std) for linear and embedding
    weights, zero biases, LayerNorm 1 and 0."""
    sharing: Literal["none", "all", "attention", "ffn"] | None = None
    """Cross-layer parameter sharing: `all` (ALBERT), or only the attention or feed-forward
    sublayers (ALBERT's ablation). Default: none, all for albert."""
    num_hidden_groups: int = num(1, ge=1, le=bounds.MAX_LAYERS)
    """With sharing: number of distinct layer groups (ALBERT: 1 = every layer the same)."""
    norm: Literal["post", "pre"] | None = None
    """LayerNorm after each residual (the papers) or before each sublayer, plus a final LayerNorm
    (more stable at depth). Default: post, pre for modernbert. A checkpoint whose placement is
    not its family's round-trips in bertcli (config.json's `bertcli` block) but transformers
    would run it the family's way: a warning says so when saving."""
    classifier_dropout: float | None = num(None, ge=0.0, le=1.0)
    """Dropout before a fine-tuning head. Default: hidden_dropout_prob (0.1 for albert)."""
    local_attention: int | None = num(None, ge=0, le=bounds.MAX_LENGTH)
    """Sliding-window width in tokens of the local attention layers (modernbert: 128, i.e. each
    token sees 64 on either side, as transformers' `local_attention`). 0: every layer global.
    Default: 128 for modernbert; families with global attention only take 0."""
    global_attn_every_n_layers: int | None = num(None, ge=1, le=bounds.MAX_LAYERS)
    """With local attention: every n-th layer (from layer 0) attends globally. Default: 3."""
    global_rope_theta: float | None = num(None, gt=0.0, le=bounds.MAX_ROPE_THETA)
    """Rotary positions: base of the frequencies on global layers. Default: 160,000 (modernbert)."""
    local_rope_theta: float | None = num(None, gt=0.0, le=bounds.MAX_ROPE_THETA)
    """Rotary positions: base of the frequencies on local layers. Default: 10,000 (modernbert)."""
    classifier_pooling: Literal["cls", "mean"] = "cls"
    """modernbert's sequence classifier reads [CLS] (`cls`) or the mean of the real tokens
    (`mean`), as transformers' `classifier_pooling`; the other families pool [CLS]."""
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    """The ELECTRA generator of `train.objective: rtd` (same family, shared embeddings): its shape."""
    init_from: str | None = None
    """Continued pretraining: a checkpoint directory written by bertcli or transformers' save_pretrained
    (*ForPreTraining, *ForMaskedLM or a bare *Model) to start from instead of random weights. The shape
    keys come from its config.json (a recipe key that contradicts it is an error; dropout may change,
    max_position_embeddings may grow); its tokenizer is adopted, not trained (CLI: --init-from)."""


# ------------------------------------------------------------------------------------------ train
@dataclass
class PhaseConfig:
    """One phase of a multi-phase run (train.phases); see bertcli.train.phases."""

    name: str | None = None
    """Name in metrics.jsonl, logs and checkpoints. Default: phase1, phase2, ..."""
    steps: int | None = num(None, ge=1, le=bounds.MAX_STEPS)
    """Optimizer steps of this phase (give this or `fraction`)."""
    fraction: float | None = num(None, gt=0.0, le=1.0)
    """This phase's share of train.max_steps (rounded; the last phase given by a fraction takes
    the rounding). The phases' lengths must add up to train.max_steps."""
    data: dict[str, object] = field(default_factory=dict)
    """Data settings of this phase over the data section's, e.g. {max_seq_length: 512,
    max_predictions_per_seq: 80}; any data key. Each phase's data is a stage of its own, built
    when the phase starts (or by `bertcli build-data --all-phases`)."""
    batch_size: int | None = num(None, ge=1, le=bounds.MAX_BATCH)
    """Global batch of this phase. Default: train.batch_size."""
    micro_batch_size: int | None = num(None, ge=1, le=bounds.MAX_BATCH, hash=False)
    """Micro-batch of this phase (longer rows need smaller ones). Default: train.micro_batch_size."""
    learning_rate: float | None = num(None, gt=0.0, le=bounds.MAX_LR)
    """Peak learning rate of this phase's own schedule."""
    warmup_steps: int | None = num(None, ge=0, le=bounds.MAX_STEPS)
    """Warmup of this phase's own schedule, from its first step."""
    schedule: str | None = None
    """Decay of this phase's own schedule (a train.schedule kind). A phase that sets
    learning_rate, warmup_steps or schedule runs a schedule of its own over its steps: warmup from
    its first step, decay to train.min_lr_ratio at its last (NVIDIA's phase 2, the unset ones from
    train.*). A phase that sets none follows the run's schedule over train.max_steps (BERT)."""


@dataclass
class TrainConfig:
    optimizer: Literal["adamw", "lamb"] = "adamw"
    """AdamW (BERT, RoBERTa) or LAMB (ALBERT, large batches)."""
    learning_rate: float = num(1e-4, gt=0.0, le=bounds.MAX_LR)
    """Peak learning rate, reached at the end of warmup."""
    beta1: float = num(0.9, ge=0.0, le=1.0)
    """Adam/LAMB first-moment decay."""
    beta2: float = num(0.999, ge=0.0, le=1.0)
    """Adam/LAMB second-moment decay (RoBERTa: 0.98)."""
    eps: float = num(1e-6, gt=0.0, le=1.0)
    """Adam/LAMB epsilon (BERT: 1e-6)."""
    weight_decay: float = num(0.01, ge=0.0, le=bounds.MAX_WEIGHT_DECAY)
    """Decoupled weight decay; never applied to biases and LayerNorm weights."""
    schedule: Literal["linear", "polynomial", "cosine", "constant", "wsd"] = "linear"
    """Decay after warmup, to `min_lr_ratio * learning_rate` at `max_steps`. `wsd`
    (warmup-stable-decay, ModernBERT's trapezoid): the peak held until the last `decay_fraction`
    of the steps, then a 1 - sqrt decay."""
    warmup_steps: int = num(10000, ge=0, le=bounds.MAX_STEPS)
    """Linear warmup from 0 to the peak learning rate."""
    warmup_ratio: float | None = num(None, ge=0.0, le=1.0)
    """Warmup as a fraction of max_steps (e.g. 0.1). When set it replaces warmup_steps, so a
    run shortened with --set train.max_steps=N keeps the schedule's proportions."""
    power: float = num(1.0, gt=0.0, le=100.0)
    """Polynomial decay power (1.0 is linear)."""
    min_lr_ratio: float = num(0.0, ge=0.0, le=1.0)
    """Final learning rate as a fraction of the peak."""
    decay_fraction: float = num(0.1, gt=0.0, le=1.0)
    """`wsd` only: the fraction of `max_steps`, at the end, over which the learning rate decays
    (1 - sqrt shape; ModernBERT decayed over its last ~50B of ~2T tokens, cooldown studies use 10-20%)."""
    max_steps: int = num(1000000, ge=1, le=bounds.MAX_STEPS)
    """Optimizer steps (each of `batch_size` sequences)."""
    batch_size: int = num(256, ge=1, le=bounds.MAX_BATCH)
    """Global batch in sequences per optimizer step, across all processes."""
    micro_batch_size: int | Literal["auto"] | None = num("auto", ge=1, le=bounds.MAX_BATCH, hash=False)
    """Sequences per forward/backward on one process; the rest is gradient accumulation. `auto`:
    the largest divisor of batch_size / processes that fits the device's free memory (CPU: the
    kernel's MemAvailable and RLIMIT_AS) at data.max_seq_length, measured by probe forward passes;
    the choice is logged. null: the whole per-process batch. A size that cannot fit stops before
    the first step, naming the memory needed and available. Does not change the result (up to
    rounding)."""
    grad_clip: float | None = num(1.0, gt=0.0, le=bounds.MAX_GRAD_CLIP)
    """Clip the global gradient norm to this (null: no clipping)."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """fp32; bf16 autocast (CPU and CUDA); fp16 autocast with loss scaling (CUDA only)."""
    device: str = nohash("auto")
    """`auto` (cuda when available, else cpu), `cpu`, `cuda`, `cuda:1`, ..."""
    compile: bool | Literal["auto"] = nohash(False)
    """torch.compile each encoder layer's attention and feed-forward blocks (inductor fuses the
    pointwise ops around the matrix products; unpadding and the sparse last layer stay, the
    checkpoint's keys do not change). `auto`: on CUDA only; on a CPU compiling takes minutes for
    a modest gain (bert-tiny: ~3 min for +15%; a bert-base step is ~85% matrix products, which
    compiling leaves as they are), so set true only for long CPU runs (docs/benchmarks.md)."""
    threads: int | Literal["auto"] = num("auto", ge=1, le=bounds.MAX_THREADS, hash=False)
    """Intra-op CPU threads. `auto`: the cores other jobs leave free now, max(1, cores - round(the
    cores other processes use in a 100 ms sample)); OMP_NUM_THREADS in the environment overrides
    it. The count is recorded in every checkpoint and `--resume` uses it, so a resumed run gives
    the same bits (docs/threads.md)."""
    num_workers: int = num(1, ge=0, le=bounds.MAX_THREADS, hash=False)
    """Data-loading worker processes (0: load in the training process)."""
    log_every: int = nohash(10, ge=1, le=bounds.MAX_STEPS)
    """Log metrics every N steps."""
    eval_every: int = num(1000, ge=1, le=bounds.MAX_STEPS)
    """Validate on the held-out split every N steps (and at the end)."""
    eval_batches: int | None = num(50, ge=1, le=bounds.MAX_STEPS)
    """Validation batches of `batch_size` sequences per evaluation: always the same first rows of
    the held-out split (null: the whole validation split)."""
    save_every: int = nohash(1000, ge=1, le=bounds.MAX_STEPS)
    """Write a checkpoint every N steps (and at the end)."""
    keep_last: int = num(3, ge=1, le=bounds.MAX_KEEP, hash=False)
    """Keep the newest N step checkpoints (final/ is always kept)."""
    max_bad_steps: int = num(20, ge=0, le=bounds.MAX_STEPS)
    """Skip a step whose loss or gradients are not finite; stop after this many."""
    report_to: list[Literal["tensorboard", "wandb", "mlflow"]] | Literal["none"] = nohash("none")
    """Trackers given every metrics.jsonl record and the recipe: [tensorboard, wandb, mlflow] (extras:
    bertcli[wandb]) or none (default), files in the run dir; was train.tensorboard (true: [tensorboard] if installed)."""
    phases: list[PhaseConfig] = field(default_factory=list)
    """Multi-phase pretraining: phases run in order in one run (one step counter, one
    metrics.jsonl, optimizer state carried over), each with its own data settings and optionally
    batch and schedule (BERT: 90% of the steps at 128 tokens, 10% at 512). Empty: one phase."""
    objective: Literal["mlm", "rtd"] = "mlm"
    """`mlm`: masked LM. `rtd`: ELECTRA's replaced-token detection (bertcli.model.electra), MLM + 50 x RTD loss: a generator
    (model.generator) fills the masks, which are 85% [MASK] / 15% kept at data.mlm_probability, no random tokens."""
    max_time: str | None = None
    """Time budget of the training, e.g. 90s, 30m, 24h, 1h30m, 2d: the run stops at the first step
    that ends past it, and the schedule is laid out over it (progress = the larger of elapsed /
    max_time and step / max_steps, so max_steps stays a cap). Building stages does not count."""
