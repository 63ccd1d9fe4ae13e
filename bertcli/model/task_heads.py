"""Per-token heads on the encoder: token classification (NER) and span extraction (QA).

Layouts follow transformers so checkpoints load both ways, for every family (ModernBERT puts its
`head` transform -- dense, act, norm -- and a dropout before either output layer):
    *ForTokenClassification    encoder without pooler -> dropout -> `classifier` (H -> C)
                               (dropout: classifier_dropout, else hidden_dropout_prob; ALBERT's
                               classifier_dropout_prob)
    *ForQuestionAnswering      encoder without pooler -> `qa_outputs` (H -> 2), split into
                               start and end logits (no dropout, as transformers)

Both read every token, so the last layer runs densely, except that training a tagger can ask
for the labelled positions only (`positions`: the first sub-token of each word), where the last
layer then computes just those rows (keys and values still from every token).
"""

from __future__ import annotations

from torch import Tensor, nn

from bertcli.config.model import EncoderConfig
from bertcli.model.encoder import Encoder
from bertcli.model.heads import init_weights, prediction_head


class TokenClassifier(nn.Module):
    """Encoder + dropout + linear per token -> logits [B, T, C], or [n, C] at `positions`."""

    head = "token"

    def __init__(self, c: EncoderConfig):
        super().__init__()
        if c.labels is None:
            raise ValueError("TokenClassifier needs config.labels")

        self.config = c
        self.encoder = Encoder(c)
        self.encoder.pooler = None            # transformers builds these without the pooler
        self.transform = prediction_head(c)   # ModernBERT's head (dense, act, norm); None elsewhere
        self.dropout = nn.Dropout(c.classifier_dropout)
        self.classifier = nn.Linear(c.hidden_size, len(c.labels))
        init_weights(self)

    @property
    def num_labels(self) -> int:
        return self.classifier.out_features              # len(config.labels)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, positions: Tensor | None = None) -> Tensor:
        """positions: flat indices into input_ids.view(-1) (real tokens) -> [n, C]; without: [B, T, C]
        (padding rows hold the classifier's bias)."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, keep=positions)
        h = out.padded() if positions is None else out.at(positions)     # [B, T, H] | [n, H]
        if self.transform is not None:
            h = self.transform(h)
        return self.classifier(self.dropout(h))


class SpanExtractor(nn.Module):
    """Encoder + `qa_outputs` -> (start_logits, end_logits), each [B, T] (padding: the bias)."""

    head = "qa"

    def __init__(self, c: EncoderConfig):
        super().__init__()

        self.config = c
        self.encoder = Encoder(c)
        self.encoder.pooler = None
        # ModernBertForQuestionAnswering: head, dropout, then its 2-logit `classifier`
        self.transform = prediction_head(c)
        self.dropout = nn.Dropout(c.classifier_dropout) if self.transform is not None else nn.Identity()
        self.qa_outputs = nn.Linear(c.hidden_size, 2)
        init_weights(self)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        h = self.encoder(input_ids, attention_mask, token_type_ids).padded()   # [B, T, H]
        if self.transform is not None:
            h = self.dropout(self.transform(h))
        start, end = self.qa_outputs(h).unbind(-1)                            # 2 x [B, T]
        return start, end


MODELS = {"token": TokenClassifier, "qa": SpanExtractor}
