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


# --------------------------------------------------------------------------------------- finetune
@dataclass
class TaskOverrides:
    """The training keys a task's block may set over the finetune section's (null: the section's
    value). Every task block (finetune.tasks.<glue task>, classify, ner, squad, squad_v2) has
    them; a task's shipped recipe (recipes/<task>.yaml) sets its paper's values. A general key
    given on the command line (`--set finetune.epochs=2`, `--epochs 2`) applies over a block
    value of the recipe file, and the log says so."""

    learning_rate: float | None = num(None, gt=0.0, le=bounds.MAX_LR)
    """Overrides finetune.learning_rate for this task."""
    epochs: float | None = num(None, gt=0.0, le=bounds.MAX_EPOCHS)
    """Overrides finetune.epochs for this task (passes over its training examples)."""
    batch_size: int | None = num(None, ge=1, le=bounds.MAX_BATCH)
    """Overrides finetune.batch_size for this task (features per optimizer step: windows for NER and SQuAD)."""
    max_seq_length: int | None = num(None, ge=8, le=bounds.MAX_LENGTH)
    """Overrides finetune.max_seq_length for this task (tokens per feature, special tokens
    included: pairs are truncated longest segment first, NER sentences and SQuAD contexts are
    windowed)."""
    warmup_ratio: float | None = num(None, ge=0.0, le=1.0)
    """Overrides finetune.warmup_ratio for this task."""
    weight_decay: float | None = num(None, ge=0.0, le=bounds.MAX_WEIGHT_DECAY)
    """Overrides finetune.weight_decay for this task."""


@dataclass
class SquadConfig(TaskOverrides):
    """`finetune.squad` (v1.1) and `finetune.squad_v2` (v2.0): BERT's SQuAD settings. The squad
    recipe sets Google BERT's run_squad.py README values: lr 3e-5, 2 epochs, batch 32, 384
    tokens, warmup 0.1."""

    doc_stride: int = num(128, ge=1, le=bounds.MAX_LENGTH)
    """Tokens between the starts of consecutive windows over a long context (Google BERT's
    meaning; transformers' run_qa.py passes its doc_stride as the overlap instead)."""
    max_query_length: int = num(64, ge=1, le=bounds.MAX_LENGTH)
    """Questions are cut to this many tokens; only the context is windowed."""
    n_best: int = num(20, ge=1, le=bounds.MAX_KEEP)
    """Start and end candidates per window, and entries per question in nbest_predictions.json."""
    max_answer_length: int = num(30, ge=1, le=bounds.MAX_LENGTH)
    """Longest answer in tokens."""
    null_threshold: float = num(0.0, ge=-bounds.MAX_LOGIT_GAP, le=bounds.MAX_LOGIT_GAP, signed=True)
    """v2.0: answer "" when null score - best span score exceeds this (run_squad.py's
    null_score_diff_threshold; results.json reports the best threshold on dev too)."""
    bad_answers: Literal["error", "repair", "skip"] = "error"
    """An answer_start that does not point at its answer text: `error` names the question;
    `repair` moves it to the nearest occurrence of the text in the context (left out when there
    is none); `skip` leaves the answer out. A question left without answers is left out."""
    scoring: Literal["auto", "words", "chars"] = "auto"
    """EM/F1 as the official SQuAD scripts (normalized words), or `chars` as CMRC 2018's
    cmrc2018_evaluate.py for text without spaces (each Chinese character a segment, F1 from the
    longest common run); `auto` picks chars when the dev contexts have almost no spaces."""


@dataclass
class ClassifyConfig(TaskOverrides):
    """`bertcli finetune classify`: your own labelled files. Training keys left null take the
    finetune section's values (the classify recipe's: BERT's GLUE settings)."""

    text_column: str = "text"
    """Column holding the text (--text-column)."""
    text_pair_column: str | None = None
    """Column holding the second text of a pair task (--text-pair-column); null: single texts."""
    label_column: str = "label"
    """Column holding the label: strings or ints (--label-column)."""
    id_column: str | None = None
    """Column whose values key the test predictions (default: the row number)."""
    regression: bool = False
    """Predict a number (mean squared error; Pearson and Spearman) instead of a class
    (--regression); the labels must all be numbers."""


@dataclass
class NerConfig(TaskOverrides):
    """`bertcli finetune ner`: tagging, CoNLL-2003 style. The ner recipe sets BERT section 5.3's
    values (lr 5e-5, batch 32, 3 epochs, 128 sub-tokens per window; the first sub-token of each
    word labelled)."""

    window_overlap: int = num(32, ge=0, le=bounds.MAX_LENGTH)
    """Sub-tokens shared by consecutive windows of a long sentence (each word is still predicted
    once, by the window where it has the most context)."""
    tag_column: int = num(-1, ge=-64, le=63)
    """Column of the tag in CoNLL files (0-based; negative counts from the end: -1 = last)."""
    scheme: Literal["auto", "iob1", "iob2", "bioes"] = "auto"
    """Tag scheme; `auto` tells IOB1 (CoNLL-2003's files), IOB2 and BIOES apart from the training tags."""
    invalid_tags: Literal["repair", "error"] = "repair"
    """A tag sequence invalid for its scheme (IOB2: I-X after O): `repair` rewrites it validly
    with the same entities (conlleval's reading) and reports how many were repaired; `error`
    stops at the first."""


@dataclass
class DistillConfig:
    """`bertcli distill`: a smaller student taught by a fine-tuned teacher. The loss is
    soft_weight * KL(teacher || student at `temperature`) * T^2 + hard_weight * the task's loss
    + hidden_weight * hidden-state MSE + attention_weight * attention KL. Defaults follow
    DistilBERT (Sanh et al. 2019: T = 2, soft and hard losses together) with Hinton et al.
    2015's T^2 scaling; TinyBERT (Jiao et al. 2020) adds the intermediate-layer losses with
    weight 1 each (set hidden_weight and attention_weight to 1.0 for it)."""

    temperature: float = num(2.0, gt=0.0, le=bounds.MAX_TEMPERATURE)
    """Softmax temperature of both models' logits in the soft loss (DistilBERT: 2; TinyBERT's
    prediction layer: 1). The loss is scaled by T^2 so its gradients keep their size."""
    soft_weight: float = num(0.5, ge=0.0, le=bounds.MAX_LOSS_WEIGHT)
    """Weight of the soft-target loss (QA: start and end distributions; NER: the labels of
    each word's first sub-token; regression: MSE to the teacher's score)."""
    hard_weight: float = num(0.5, ge=0.0, le=bounds.MAX_LOSS_WEIGHT)
    """Weight of the task's own loss on the gold labels (unlabelled examples have none)."""
    hidden_weight: float = num(0.0, ge=0.0, le=bounds.MAX_LOSS_WEIGHT)
    """Weight of the MSE between mapped hidden states (embeddings and layers; TinyBERT: 1.0). A
    student of another hidden size learns a projection to the teacher's."""
    attention_weight: float = num(0.0, ge=0.0, le=bounds.MAX_LOSS_WEIGHT)
    """Weight of the KL between the mapped layers' attention distributions, averaged over heads
    and real tokens (TinyBERT, MiniLM: 1.0). Needs as many heads as the teacher, and absolute
    positions (not ModernBERT)."""
    cache_logits: bool = nohash(True)
    """Compute the teacher's logits once per training example and keep them on disk
    (safetensors, beside --out) for a rerun on the same data; off: the teacher runs every step.
    The teacher runs every step anyway when hidden_weight or attention_weight is set."""
    measure_speed: bool = nohash(False)
    """Also export teacher and student to ONNX (fp32 and dynamic int8) and time them with ONNX
    Runtime in this process: latency at batch 1, throughput at batch 32 (128 tokens), in
    results.json's `distill.speed` and the summary. Needs the `export` extra; adds minutes."""


@dataclass
class EmbedConfig(TaskOverrides):
    """`bertcli finetune embed`: a sentence-embedding model from pairs, triplets, scored pairs or
    plain text (SimCSE). Training keys left null take the finetune section's values (the embed
    recipe's). sentence-transformers' defaults: MultipleNegativesRankingLoss scale 20, cosine
    similarity, mean pooling, CoSENT scale 20, CachedMultipleNegativesRankingLoss mini-batch 32.
    SimCSE (Gao, Yao, Chen 2021): lr 3e-5, batch 64, temperature 0.05 (= scale 20), dropout 0.1."""

    anchor_column: str = "anchor"
    """Column of the anchor (query) text of pairs and triplets (--anchor-column)."""
    positive_column: str = "positive"
    """Column of the text that belongs with the anchor (--positive-column)."""
    negative_columns: list[str] = field(default_factory=list)
    """Columns of hard negatives, one or more per anchor (--negative-column, repeatable or a
    comma list): they join the in-batch candidates."""
    text_column: str = "text"
    """Scored pairs: the first text (--text-column); unsupervised: the sentence (a .txt file's lines are `text`)."""
    text_pair_column: str = "text_pair"
    """Scored pairs: the second text (--text-pair-column)."""
    score_column: str | None = None
    """Scored pairs: the similarity score column (--score-column), any scale (0-1, 0-5: CoSENT
    uses only their order). Set, it selects the CoSENT loss instead of in-batch negatives."""
    unsupervised: bool = False
    """SimCSE (--unsupervised): each sentence of text_column is its own positive under a second
    dropout mask; the other sentences of the batch are the negatives."""
    scale: float = num(20.0, gt=0.0, le=bounds.MAX_SCALE)
    """Similarity scale (1 / temperature) of both losses: cosine x scale are the logits
    (sentence-transformers' default 20; SimCSE's temperature 0.05)."""
    symmetric: bool = False
    """In-batch negatives both ways: anchor -> candidates and positive -> anchors, averaged
    (sentence-transformers' MultipleNegativesSymmetricRankingLoss); false: anchor -> candidates
    only (MultipleNegativesRankingLoss)."""
    mini_batch_size: int | None = num(None, ge=1, le=bounds.MAX_BATCH)
    """GradCache (Gao et al. 2021): texts per forward pass, while the loss still sees the whole
    batch's embeddings (memory of a mini-batch, negatives of the batch; sentence-transformers'
    Cached* losses use 32). null: one pass over the batch."""
    dims: list[int] = field(default_factory=list,
                            metadata={"ge": 1, "gt": None, "le": bounds.MAX_WIDTH, "hash": True, "signed": False})
    """Matryoshka dimensions (Kusupati et al. 2022), e.g. [128, 64, 32]: the loss is summed over
    the embeddings truncated to each; [] trains the full width only. At most the hidden size."""
    pooling: Literal["mean", "cls", "max", "last-layer-mean"] = "mean"
    """How the last layer's token states become the sentence vector: mean over real tokens
    (sentence-transformers' default; `last-layer-mean` is the same), the first token ([CLS] /
    <s>), or the elementwise max. A sentence-transformers checkpoint's own pooling is the default
    when it is fine-tuned further."""
    normalize: bool = False
    """L2-normalize the vectors (a 2_Normalize module in the output): dot product = cosine."""
    gather: bool = True
    """Under torchrun: the loss spans the global batch (every process's embeddings gathered; the
    one-process loss and gradient). false: each process's negatives are its own share only."""


@dataclass
class FinetuneConfig:
    learning_rate: float | Literal["auto"] = num("auto", gt=0.0, le=bounds.MAX_LR)
    """Peak learning rate (--lr); a number is used as given. `auto`: from the model's size (bertcli/finetune/auto_lr.py): 1e-3
    up to 2M encoder weights (measured on the quickstart's bert-tiny), 1e-4 up to 30M (Turc et al. 2019's small BERTs), else
    the task's BERT-paper rate (GLUE / classify 2e-5, NER 5e-5, SQuAD 3e-5); the log and results.json say which rate and why."""
    epochs: float = num(3.0, gt=0.0, le=bounds.MAX_EPOCHS)
    """Passes over the training set."""
    batch_size: int = num(32, ge=1, le=bounds.MAX_BATCH)
    """Sequences per optimizer step (under torchrun: the global batch, split over the processes)."""
    micro_batch_size: int | Literal["auto"] | None = num(None, ge=1, le=bounds.MAX_BATCH, hash=False)
    """Sequences per forward/backward on one process; the rest of its share of batch_size accumulates, each micro-batch's loss
    weighted by its labelled units: the whole batch's step (a share that does not divide ends with a shorter micro-batch).
    `auto`: the largest divisor of the share that fits free memory, as train.micro_batch_size; null: the whole share."""
    max_seq_length: int = num(128, ge=8, le=bounds.MAX_LENGTH)
    """Longer pairs are truncated, longest segment first."""
    warmup_ratio: float = num(0.1, ge=0.0, le=1.0)
    """Fraction of steps with linear warmup; then linear decay to 0."""
    weight_decay: float = num(0.01, ge=0.0, le=bounds.MAX_WEIGHT_DECAY)
    """AdamW weight decay (not on biases and LayerNorm)."""
    beta1: float = num(0.9, ge=0.0, le=1.0)
    """AdamW first-moment decay."""
    beta2: float = num(0.999, ge=0.0, le=1.0)
    """AdamW second-moment decay."""
    eps: float = num(1e-6, gt=0.0, le=1.0)
    """AdamW epsilon."""
    grad_clip: float | None = num(1.0, gt=0.0, le=bounds.MAX_GRAD_CLIP)
    """Clip the global gradient norm (null: no clipping)."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """As train.precision."""
    device: str = nohash("auto")
    """As train.device."""
    threads: int | Literal["auto"] = num("auto", ge=1, le=bounds.MAX_THREADS, hash=False)
    """Intra-op CPU threads, as train.threads (`auto`: the free cores; OMP_NUM_THREADS overrides it)."""
    eval_batch_size: int = num(128, ge=1, le=bounds.MAX_BATCH, hash=False)
    """Sequences per evaluation batch."""
    max_train_examples: int | None = num(None, ge=1, le=bounds.MAX_ROWS)
    """Use only the first N training examples (quick experiments)."""
    dropout: float | None = num(0.1, ge=0.0, le=1.0)
    """Hidden, attention and classifier dropout while fine-tuning (BERT's GLUE setting), whatever the checkpoint was
    pretrained with; null keeps config.json's rates (e.g. ALBERT's 0 / 0.1)."""
    freeze_encoder: bool = False
    """Train only the pooler and classifier on the frozen encoder, run without dropout (BERT's feature-based approach)."""
    select: Literal["best", "last"] = "best"
    """The epoch whose weights are saved and reported: `best` (highest dev score; a tie goes to the later epoch when its
    training loss is lower) or `last` (as transformers' Trainer without load_best_model_at_end)."""
    report_to: list[Literal["tensorboard", "wandb", "mlflow"]] | Literal["none"] = nohash("none")
    """As train.report_to, live: one tracker run per (lr, seed), grouped under its sweep, files in its model folder."""
    save_model: bool = nohash(True)
    """Save the best epoch's classifier (a Hugging Face directory) in each task's output folder."""
    bad_rows: Literal["error", "skip"] = "error"
    """GLUE TSV rows with the wrong number of fields: `error` stops with the file and line, `skip` leaves them out
    (counted in results.json), as transformers' QQP reader does."""
    tasks: dict[str, TaskOverrides] = field(default_factory=dict)
    """Per-task overrides of GLUE tasks, e.g. `tasks: {rte: {epochs: 10, learning_rate: 3e-5}}`."""
    classify: ClassifyConfig = field(default_factory=ClassifyConfig)
    """`bertcli finetune classify` (your own files): columns, regression, overrides."""
    ner: NerConfig = field(default_factory=NerConfig)
    """`bertcli finetune ner` (CoNLL-2003 style tagging): tag column and scheme, windows, the paper's settings."""
    squad: SquadConfig = field(default_factory=SquadConfig)
    """`bertcli finetune squad` (v1.1) settings: `bertcli explain finetune.squad`."""
    squad_v2: SquadConfig = field(default_factory=SquadConfig)
    """`bertcli finetune squad --squad-version 2` settings: `bertcli explain finetune.squad_v2`."""
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    """`bertcli finetune embed` (sentence embeddings): columns, loss, pooling, GradCache, Matryoshka dimensions."""
    distill: DistillConfig = field(default_factory=DistillConfig)
    """`bertcli distill` (a smaller student from a fine-tuned teacher): temperature, loss weights."""
