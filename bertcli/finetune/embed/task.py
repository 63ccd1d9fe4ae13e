"""`bertcli finetune embed`: a sentence-embedding model, as a task of the fine-tuning engine.

The engine's loop fits: a batch is B examples; `forward(train=True)` embeds their texts and
returns the loss (in-batch negatives or CoSENT, over the whole batch's embeddings, GradCache's
hooked loss when finetune.embed.mini_batch_size is set, so `loss.backward()` in the engine runs
the re-forwards); `forward(train=False)` embeds dev texts, which `evaluate` scores (nDCG@10 on
a BEIR directory, Spearman on scored pairs); the best epoch is kept; `save_model` writes it as a
sentence-transformers directory (bertcli.model.sentence).

A training feature is an example without tokens of its own: its text ids (anchor, positive,
negatives, score) ride in the batch as per-feature arrays, and the texts' tokens live once in
the task's pool (`Features` of every distinct text), collated here per batch or mini-batch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertcli.config.checkpoint import read_config
from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.finetune import runner
from bertcli.finetune.classification.encode import encode_split
from bertcli.finetune.classification.glue_data import SequenceSplit
from bertcli.finetune.embed.data import EmbedSplit, kind_of, negative_columns, read_train
from bertcli.finetune.embed.dev import DevSet, read_dev
from bertcli.finetune.task import Features, Task, TaskSplits, overlay
from bertcli.io.text import DEFAULT_MAX_LINE_BYTES, LineOptions, check_encoding
from bertcli.model.pooling import Pooling, pool
from bertcli.model.sentence import is_sentence_dir, read_sentence_dir, write_sentence_dir

if TYPE_CHECKING:  # torch and the losses (embed.step) load where a batch is trained: a bad file is reported without them
    import torch
    from torch import nn

    from bertcli.config.finetune_sections import FinetuneConfig
    from bertcli.config.recipe import Recipe
    from bertcli.tokenization.load import TokenizerInfo

KIND_WORDS = {"pairs": "in-batch negatives", "scored": "CoSENT on scored pairs", "simcse": "unsupervised SimCSE"}


def check_block(block, batch_size: int, hidden_size: int, checkpoint: Path) -> None:
    """The settings that cannot train, before any text is read."""
    kind = kind_of(block)
    if batch_size < 2:
        what = "CoSENT compares the pairs of a batch" if kind == "scored" else "in-batch negatives need other examples"
        raise UserError(f"a batch of {batch_size}: {what}, so one example alone has nothing to learn from",
                        where="finetune.embed.batch_size", fix="--set finetune.embed.batch_size=32 (or 2 and more)")
    over = [d for d in block.dims if d > hidden_size]
    if over:
        raise UserError(f"--dims {over[0]} exceeds the hidden size {hidden_size} of {checkpoint}",
                        where="finetune.embed.dims", fix=f"give Matryoshka dimensions of at most {hidden_size}")


class EmbedTask(Task[EmbedSplit | DevSet, np.ndarray]):
    name = "embed"
    head = "pretraining"  # the encoder is all it reads; the checkpoint's own heads load and stay unused
    accumulates = False   # in-batch negatives: a micro-batch would see fewer (GradCache: --mini-batch-size)

    def __init__(self, cfg: FinetuneConfig, train: Path, dev: Path | None, checkpoint: Path, encoding: str | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES):
        self.cfg, self.block = cfg, cfg.embed
        self.hyper = overlay(cfg, cfg.embed)
        self.files, self.checkpoint = (train, dev), Path(checkpoint)
        self.opts = LineOptions(max_line_bytes=max_line_bytes, encoding=check_encoding(encoding))
        self.kind = kind_of(self.block)
        self.pooling = Pooling(self.block.pooling, self.block.normalize)
        self.pool_features: Features | None = None
        self.pad_id = 0

    # -- reading -----------------------------------------------------------------------------
    def read(self) -> TaskSplits:
        hidden = read_config(self.checkpoint).hidden_size
        check_block(self.block, self.hyper.batch_size, hidden, self.checkpoint)
        self.pooling = dataclasses.replace(self.pooling, dim=hidden)
        train_path, dev_path = self.files
        train = read_train(train_path, self.block, self.opts)
        devs = [read_dev(dev_path, self.block)] if dev_path is not None else []
        console.log(f"embed: {KIND_WORDS[self.kind]}, {len(train.texts):,} distinct texts"
                    + (f", {train.negatives.shape[1]} hard negative(s) per anchor" if train.negatives.shape[1] else ""))
        return TaskSplits(train, devs, [], "files", str(train_path),
                          {"kind": self.kind, "distinct_texts": len(train.texts)})

    def describe(self) -> str:
        cache = f", GradCache mini-batches of {self.block.mini_batch_size}" if self.block.mini_batch_size else ""
        return f"embed ({KIND_WORDS[self.kind]}, {self.pooling.mode} pooling{cache})"

    def featurize(self, split, tok: TokenizerInfo, zero_types: bool) -> Features:
        """Train: examples as per-feature text ids (no tokens; the pool holds them). Dev: every
        text to embed."""
        self.pad_id = tok.pad_id
        texts = split.texts
        feats = encode_split(tok.tokenizer, SequenceSplit(split.name, split.source, texts, None, None, []),
                             self.hyper.max_seq_length, zero_types, desc=f"tokenizing embed {split.name}")
        if not isinstance(split, EmbedSplit) or split.name != "train":
            return feats
        self.pool_features = feats
        n = len(split)
        per = {"anchor": split.anchor, "positive": split.positive, "negatives": split.negatives,
               "score": split.scores if split.scores is not None else np.zeros(n, np.float32)}
        return Features(np.zeros(0, np.int32), np.zeros(0, np.int8), np.zeros(n + 1, np.int64),
                        np.arange(n, dtype=np.int64), per_feature=per)

    # -- the model ---------------------------------------------------------------------------
    def embed(self, model, batch: dict) -> torch.Tensor:
        """[B, H] pooled (and, when asked, normalized) vectors of a collated batch."""
        hidden = model.encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).padded()
        return pool(hidden, batch["attention_mask"], self.pooling.mode, self.pooling.normalize)

    def objective(self, batch: dict):
        """loss(reps [N, H]) for reps = the embeddings of anchors, positives, then the negatives
        column by column (N = B (2 + k)): bertcli.finetune.embed.step."""
        from bertcli.finetune.embed import step

        return step.objective(self, batch)

    def forward(self, model: nn.Module, batch: dict, train: bool):
        if not train:
            return self.embed(model, batch)
        from bertcli.finetune.embed import step

        return step.train_loss(self, model, batch)

    def loss(self, outputs, batch: dict) -> torch.Tensor:
        return outputs                                 # forward(train=True) computed it

    def check_features(self, train: Features) -> Features:
        return self.pool_features if self.pool_features is not None else train   # the texts, tokenized

    @property
    def whole_batch_loss(self) -> bool:
        """Under torchrun, finetune.embed.gather: the loss of the global batch (embed/gather.py)."""
        return self.block.gather

    def collect(self, outputs, batch: dict):
        return outputs.float().cpu().numpy()           # [B, H]

    def decode(self, split, features: Features, collected: list) -> np.ndarray:
        return np.stack(collected) if collected else np.zeros((0, self.pooling.dim), np.float32)

    def evaluate(self, split: EmbedSplit | DevSet, predictions: np.ndarray) -> dict[str, float]:
        assert isinstance(split, DevSet), "only dev sets are evaluated"
        return split.evaluate(predictions)

    def score(self, dev_metrics: dict) -> float | None:
        """The dev set's main metric; None without a dev set (then every epoch replaces the kept
        one, so the last is kept, and results.json's score is null: nothing was scored)."""
        if not dev_metrics:
            return None
        return super().score(dev_metrics)

    def format(self, dev_metrics: dict) -> str:
        return super().format(dev_metrics) if dev_metrics else "no dev set"

    def summary_rows(self, results: dict):
        rows = super().summary_rows(results)
        loss = results["history"][-1]["train_loss"]
        return rows or [("train loss", "n/a" if loss is None else f"{loss:.4f}")]

    def save_model(self, model: nn.Module, directory: Path, checkpoint: Path) -> None:
        """The encoder checkpoint, then the sentence-transformers modules around it."""
        super().save_model(model, directory, checkpoint)
        write_sentence_dir(directory, self.pooling, self.hyper.max_seq_length)

    def results(self) -> dict:
        b = self.block
        return {"pooling": self.pooling.mode, "normalize": self.pooling.normalize, "kind": self.kind,
                "scale": b.scale, "symmetric": b.symmetric, "mini_batch_size": b.mini_batch_size, "dims": list(b.dims)}


def run_embed(recipe: Recipe, checkpoint: Path, train: Path, dev: Path | None = None, out: Path | None = None,
              encoding: str | None = None, **options) -> dict:
    """Fine-tune an embedding model; `options` override finetune.embed keys (the CLI flags)."""
    if "negative_columns" in options:
        options["negative_columns"] = negative_columns(options["negative_columns"])
    checkpoint = Path(checkpoint)
    if is_sentence_dir(checkpoint):   # sentence-transformers' (MiniLM-style): its encoder, its pooling by default
        st = read_sentence_dir(checkpoint)
        checkpoint = st.encoder
        options.setdefault("pooling", st.pooling.mode)
        options.setdefault("normalize", st.pooling.normalize)
    if options:
        cfg = dataclasses.replace(recipe.finetune, embed=dataclasses.replace(recipe.finetune.embed, **options))
        recipe = dataclasses.replace(recipe, finetune=cfg)       # the saved recipe.yaml shows them
    task = EmbedTask(recipe.finetune, train, dev, checkpoint, encoding, recipe.corpus.max_line_bytes)
    return runner.finetune_task(task, recipe, checkpoint, out)
