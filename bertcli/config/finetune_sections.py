"""The `finetune:` section of a recipe, one dataclass per block (the engine's keys, each task's
overrides, distillation, embeddings), split from `sections.py` under the same rules: the
docstring under each field is its help text (`bertcli explain finetune.KEY`), and every number
field declares its range with `num`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from bertcli.config import bounds
from bertcli.config.sections import nohash, num


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
    """Overrides finetune.batch_size for this task (features per optimizer step: windows for NER
    and SQuAD)."""
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
    """Tag scheme; `auto` tells IOB1 (CoNLL-2003's files), IOB2 and BIOES apart from the training
    tags."""
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
    """Scored pairs: the first text (--text-column); unsupervised: the sentence (a .txt file's
    lines are `text`)."""
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
    """Peak learning rate (--lr); a number is used as given. `auto`: from the model's size
    (bertcli/finetune/auto_lr.py): 1e-3 up to 2M encoder weights (measured on the quickstart's
    bert-tiny), 1e-4 up to 30M (Turc et al. 2019's small BERTs), else the task's BERT-paper rate
    (GLUE / classify 2e-5, NER 5e-5, SQuAD 3e-5); the log and results.json say which rate and
    why."""
    epochs: float = num(3.0, gt=0.0, le=bounds.MAX_EPOCHS)
    """Passes over the training set."""
    batch_size: int = num(32, ge=1, le=bounds.MAX_BATCH)
    """Sequences per optimizer step (under torchrun: the global batch, split over the processes)."""
    micro_batch_size: int | Literal["auto"] | None = num(None, ge=1, le=bounds.MAX_BATCH, hash=False)
    """Sequences per forward/backward on one process; the rest of its share of batch_size
    accumulates, each micro-batch's loss weighted by its labelled units: the whole batch's step
    (a share that does not divide ends with a shorter micro-batch). `auto`: the largest divisor
    of the share that fits free memory, as train.micro_batch_size; null: the whole share."""
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
    """Intra-op CPU threads, as train.threads (`auto`: the free cores; OMP_NUM_THREADS overrides
    it)."""
    eval_batch_size: int = num(128, ge=1, le=bounds.MAX_BATCH, hash=False)
    """Sequences per evaluation batch."""
    max_train_examples: int | None = num(None, ge=1, le=bounds.MAX_ROWS)
    """Use only the first N training examples (quick experiments)."""
    dropout: float | None = num(0.1, ge=0.0, le=1.0)
    """Hidden, attention and classifier dropout while fine-tuning (BERT's GLUE setting), whatever
    the checkpoint was pretrained with; null keeps config.json's rates (e.g. ALBERT's 0 / 0.1)."""
    freeze_encoder: bool = False
    """Train only the pooler and classifier on the frozen encoder, run without dropout (BERT's
    feature-based approach)."""
    select: Literal["best", "last"] = "best"
    """The epoch whose weights are saved and reported: `best` (highest dev score; a tie goes to the
    later epoch when its training loss is lower) or `last` (as transformers' Trainer without
    load_best_model_at_end)."""
    report_to: list[Literal["tensorboard", "wandb", "mlflow"]] | Literal["none"] = nohash("none")
    """As train.report_to, live: one tracker run per (lr, seed), grouped under its sweep, files in
    its model folder."""
    save_model: bool = nohash(True)
    """Save the best epoch's classifier (a Hugging Face directory) in each task's output folder."""
    bad_rows: Literal["error", "skip"] = "error"
    """GLUE TSV rows with the wrong number of fields: `error` stops with the file and line, `skip`
    leaves them out (counted in results.json), as transformers' QQP reader does."""
    tasks: dict[str, TaskOverrides] = field(default_factory=dict)
    """Per-task overrides of GLUE tasks, e.g. `tasks: {rte: {epochs: 10, learning_rate: 3e-5}}`."""
    classify: ClassifyConfig = field(default_factory=ClassifyConfig)
    """`bertcli finetune classify` (your own files): columns, regression, overrides."""
    ner: NerConfig = field(default_factory=NerConfig)
    """`bertcli finetune ner` (CoNLL-2003 style tagging): tag column and scheme, windows, the
    paper's settings."""
    squad: SquadConfig = field(default_factory=SquadConfig)
    """`bertcli finetune squad` (v1.1) settings: `bertcli explain finetune.squad`."""
    squad_v2: SquadConfig = field(default_factory=SquadConfig)
    """`bertcli finetune squad --squad-version 2` settings: `bertcli explain finetune.squad_v2`."""
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    """`bertcli finetune embed` (sentence embeddings): columns, loss, pooling, GradCache,
    Matryoshka dimensions."""
    distill: DistillConfig = field(default_factory=DistillConfig)
    """`bertcli distill` (a smaller student from a fine-tuned teacher): temperature, loss weights."""
