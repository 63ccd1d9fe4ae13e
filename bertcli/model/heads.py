"""Heads on the encoder: pretraining (MLM + NSP / SOP / none) and sequence classification.
Which head a family has is read from its spec (pair_head, mlm_activation, task_head).

Layouts follow transformers so checkpoints load both ways:
    bert     BertForPreTraining     MLM (dense H->H, act, LN, tied decoder) + NSP on the pooler
    roberta  RobertaForMaskedLM     MLM (dense, exact GELU, LN, tied decoder), no pair head
    albert   AlbertForPreTraining   MLM (dense H->E, act, LN, decoder tied to the E-sized
                                    embeddings) + SOP (dropout, linear) on the pooler
    *ForSequenceClassification      bert/albert: pooler, dropout, linear;
                                    roberta: <s>, dropout, dense, tanh, dropout, linear
                                    electra (a BERT layout): [CLS], dropout, dense, gelu, dropout, linear
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertcli.config.model import EncoderConfig, encoder_config
from bertcli.config.sections import ModelConfig
from bertcli.model.encoder import Encoder, activation, bucketed, first_positions, layer_norm, linear


@dataclass
class PreTrainingOutput:
    mlm_logits: Tensor | None   # [N, V] at mlm_positions, or [B, T, V] without them
    pair_logits: Tensor | None  # [B, 2] NSP / SOP; None for roberta
    # [M', V], M' = bucketed(N): mlm_logits (its first N rows, a view) and rows of logits of a
    # zero input. The loss reads these with ignored labels, so its [M', V] tensors repeat in size
    # from step to step (bertcli.train.heap); None without mlm_positions.
    mlm_rows: Tensor | None = None


class PredictionHead(nn.Module):
    """dense H->width, activation, LayerNorm: the MLM transform, and ModernBERT's `head` before
    every fine-tuning classifier (ModernBertPredictionHead)."""

    def __init__(self, c: EncoderConfig, width: int):
        super().__init__()
        self.dense = linear(c, c.hidden_size, width)
        # RobertaLMHead always uses exact GELU, whatever hidden_act says.
        self.act = activation(c.hidden_act if c.spec.mlm_activation == "hidden_act" else c.spec.mlm_activation)
        self.norm = layer_norm(c, width)

    def forward(self, h: Tensor) -> Tensor:                   # [..., H] -> [..., width]
        return self.norm(self.act(self.dense(h)))


def prediction_head(c: EncoderConfig) -> PredictionHead | None:
    """The transform before fine-tuning classifiers (ModernBERT's `head`), None for families
    whose classifiers read the encoder (or the pooler) directly."""
    return PredictionHead(c, c.hidden_size) if c.spec.task_head == "prediction_head" else None


class MLMHead(PredictionHead):
    """The transform to E, then the decoder: the (tied) word embeddings + bias."""

    def __init__(self, c: EncoderConfig):
        super().__init__(c, c.embedding_size)
        self.bias = nn.Parameter(torch.zeros(c.vocab_size))

    # The tied decoder weight is an argument: a narrower signature than PredictionHead's, on purpose.
    def forward(self, h: Tensor, decoder: Tensor) -> Tensor:  # type: ignore[override]  # [..., H], [V, E] -> [..., V]
        return F.linear(super().forward(h), decoder, self.bias)


class PreTrainingModel(nn.Module):
    """Encoder + MLM head (+ NSP head for bert, SOP head for albert)."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.config = c
        self.encoder = Encoder(c)
        self.mlm = MLMHead(c)
        self.pair = nn.Linear(c.hidden_size, 2) if c.spec.pair_head != "none" else None
        # AlbertSOPHead applies dropout (classifier_dropout_prob) to the pooled output; BERT's NSP does not.
        self.pair_dropout = nn.Dropout(c.classifier_dropout) if c.spec.pair_dropout else nn.Identity()
        # The last layer runs only where the heads read it (masked positions, [CLS]).
        self.sparse_last_layer = True
        init_weights(self)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None,
                mlm_positions: Tensor | None = None) -> PreTrainingOutput:
        keep = None  # the positions the heads read: masked tokens, and [CLS] for the pair head
        if mlm_positions is not None and self.sparse_last_layer:
            keep = mlm_positions
            if self.pair is not None:
                keep = torch.cat([keep, first_positions(input_ids.shape[0], input_ids.shape[1], input_ids.device)])
        out = self.encoder(input_ids, attention_mask, token_type_ids, keep=keep)
        # Sparse prediction: the vocabulary-sized decoder runs only at the masked positions.
        decoder = self.encoder.embeddings.word.weight
        mlm_rows = None
        if mlm_positions is None:
            mlm_logits = self.mlm(out.padded(), decoder)                 # [B, T, V]
        else:
            h = out.at(mlm_positions)                                    # [N, H]
            n = h.shape[0]
            # static shapes (export, torch.compile) have no data-dependent sizes to round
            pad = 0 if self.encoder.static or torch.compiler.is_compiling() else bucketed(n) - n
            mlm_rows = self.mlm(F.pad(h, (0, 0, 0, pad)) if pad else h, decoder)  # [M', V]
            mlm_logits = mlm_rows[:n]                                    # [N, V]
        pair_logits = None
        if self.pair is not None:
            pair_logits = self.pair(self.pair_dropout(self.encoder.pool(out)))  # [B, 2]
        return PreTrainingOutput(mlm_logits, pair_logits, mlm_rows)


class SequenceClassifier(nn.Module):
    """Encoder + a classification (C labels) or regression (1 label) head -> logits [B, C]."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        if c.labels is None:
            raise ValueError("SequenceClassifier needs config.labels")
        self.config = c
        self.encoder = Encoder(c)
        self.dropout = nn.Dropout(c.classifier_dropout)
        # RobertaClassificationHead: <s> -> dropout -> dense -> tanh -> dropout -> out_proj;
        # ElectraClassificationHead the same with exact GELU
        dense = c.spec.task_head in ("dense_tanh", "dense_gelu")
        self.dense = nn.Linear(c.hidden_size, c.hidden_size) if dense else None
        self.dense_act = torch.tanh if c.spec.task_head == "dense_tanh" else F.gelu
        # ModernBertForSequenceClassification: [CLS] or mean -> head (dense, act, norm) -> dropout -> classifier
        self.transform = prediction_head(c)
        self.classifier = nn.Linear(c.hidden_size, len(c.labels))
        self.sparse_last_layer = True  # the head reads [CLS] / <s> only
        init_weights(self)

    @property
    def num_labels(self) -> int:
        return self.classifier.out_features              # len(config.labels)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        mean = self.transform is not None and self.config.classifier_pooling == "mean"
        keep = None
        if self.sparse_last_layer and not mean:
            keep = first_positions(input_ids.shape[0], input_ids.shape[1], input_ids.device)
        out = self.encoder(input_ids, attention_mask, token_type_ids, keep=keep)
        if self.transform is not None:
            x = self.transform(mean_of_real(out, attention_mask) if mean else out.first())  # [B, H]
        elif self.dense is None:
            x = self.encoder.pool(out)                                  # [B, H]
        else:
            x = self.dense_act(self.dense(self.dropout(out.first())))    # [B, H]
        return self.classifier(self.dropout(x))                         # [B, C]


def mean_of_real(out, attention_mask: Tensor | None) -> Tensor:
    """[B, H] mean of the last hidden states over each row's real tokens."""
    h = out.padded()                                                    # [B, T, H], zeros at padding
    if attention_mask is None:
        return h.mean(1)
    m = attention_mask.to(h.dtype)[:, :, None]                          # [B, T, 1]
    return (h * m).sum(1) / m.sum(1)


@torch.no_grad()
def init_weights(model: nn.Module) -> None:
    """transformers' initialization: normal(0, initializer_range) for linear and embedding
    weights, zero biases and padding rows, LayerNorm weight 1 and bias 0. Families with
    init "scaled" (ModernBERT) draw from a normal truncated at 2 std, with std / sqrt(2L) for
    the projections that write into the residual stream (and the MLM / classifier transform),
    and H^-0.5 for fine-tuning classifiers."""
    c = typing.cast(EncoderConfig, model.config)   # every bertcli model carries its EncoderConfig
    std = c.initializer_range
    if c.spec.init == "scaled":
        return _scaled_init(model, std, c)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.weight.normal_(0.0, std)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.Embedding):
            m.weight.normal_(0.0, std)
            if m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, MLMHead):
            m.bias.zero_()


def _scaled_init(model: nn.Module, std: float, c: EncoderConfig) -> None:
    out_std = std / (2.0 * c.num_hidden_layers) ** 0.5
    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            s = std
            if name.endswith((".out", "mlm.dense", "transform.dense")):
                s = out_std                     # attention / feed-forward outputs, the head transforms
            elif name.rsplit(".", 1)[-1] in ("classifier", "qa_outputs"):
                s = c.hidden_size ** -0.5
            nn.init.trunc_normal_(m.weight, 0.0, s, -2 * s, 2 * s)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, MLMHead):
            m.bias.zero_()


def build_model(model_cfg: ModelConfig, vocab_size: int, pad_token_id: int, head: str = "pretraining",
                labels: Sequence[str] | None = None, num_labels: int | None = None):
    """A freshly initialized PreTrainingModel (head="pretraining") or SequenceClassifier
    (head="classification", with `labels` names or `num_labels`; 1 label = regression)."""
    if head == "pretraining":
        return PreTrainingModel(encoder_config(model_cfg, vocab_size, pad_token_id))
    if head == "classification":
        names = default_labels(labels, num_labels)
        return SequenceClassifier(encoder_config(model_cfg, vocab_size, pad_token_id, labels=names))
    raise ValueError(f"unknown head {head!r} (pretraining or classification)")


def default_labels(labels: Sequence[str] | None, num_labels: int | None) -> tuple[str, ...]:
    """Label names: the given ones, else transformers' LABEL_0 ... LABEL_{C-1}."""
    if labels is not None:
        if num_labels is not None and num_labels != len(labels):
            raise ValueError(f"{len(labels)} label names for num_labels={num_labels}")
        return tuple(str(x) for x in labels)
    if num_labels is None or num_labels < 1:
        raise ValueError("a classification head needs labels or num_labels >= 1")
    return tuple(f"LABEL_{i}" for i in range(num_labels))
