"""Replaced-token detection (ELECTRA, Clark et al. 2020): a small MLM generator and a
discriminator of the same family, sharing the embedding tables.

    generator      Encoder(generator config) + MLMHead; its Embeddings module IS the
                   discriminator's (word, position, token-type tables and their LayerNorm, as in
                   ELECTRA), with its own E -> H_g projection where E != H_g
    discriminator  Encoder(family config) + dense H->H, hidden_act, dense H->1
                   (transformers' ElectraDiscriminatorPredictions)

Losses of one micro-batch (sums; the loop scales them by the global counts):
    mlm_sum = sum CE(generator logits, original) over masked positions
    rtd_sum = sum BCE(discriminator logit, replaced) over positions with attention_mask == 1
              (special tokens included, as ElectraForPreTraining); a sampled token equal to the
              original counts as original
    loss    = mlm_sum / M + RTD_WEIGHT * rtd_sum / T_real
The replacement at each masked position is drawn from the generator's softmax by inverse CDF,
with no gradient, from a uniform number the collator draws from the row's keyed stream
(bertcli.data.rng): the same (seed, epoch, row) gives the same replacement, so resume is
bitwise and any process count gives the same draws.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertcli.config.families import LAYOUTS
from bertcli.config.model import EncoderConfig
from bertcli.model.encoder import Encoder, activation, linear
from bertcli.model.heads import MLMHead, PreTrainingOutput, init_weights

RTD_WEIGHT = 50.0  # the paper's lambda


def rtd_layout(c: EncoderConfig) -> EncoderConfig:
    """`c` in the transformers layout its RTD checkpoints are written in: ELECTRA's for the BERT
    family (post-LN only: transformers' Electra has no pre-LN layers), else the family's own."""
    spec = next((s for s in LAYOUTS.values() if s.name == c.family), None)
    return c.replace(layout=spec.layout) if spec is not None and c.norm == spec.norm else c


def generator_config(c: EncoderConfig, hidden_size: int, num_hidden_layers: int, num_attention_heads: int,
                     intermediate_size: int) -> EncoderConfig:
    """The discriminator's config at the generator's (smaller) shape; E stays shared."""
    return dataclasses.replace(c, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                               num_attention_heads=num_attention_heads, intermediate_size=intermediate_size,
                               labels=None)


class DiscriminatorHead(nn.Module):
    """dense H->H, hidden_act, dense H->1: one logit per position (ElectraDiscriminatorPredictions)."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.dense = linear(c, c.hidden_size, c.hidden_size)
        self.act = activation(c.hidden_act)
        self.prediction = linear(c, c.hidden_size, 1)

    def forward(self, h: Tensor) -> Tensor:                   # [..., H] -> [...]
        return self.prediction(self.act(self.dense(h))).squeeze(-1)


class Discriminator(nn.Module):
    """Encoder + DiscriminatorHead -> [B, T] logits (> 0: replaced): transformers'
    ElectraForPreTraining, the `discriminator` head of load_checkpoint / save_checkpoint. Its
    parameter names are RTDModel's (encoder.*, discriminator_head.*), so either loads the other."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.config = c
        self.encoder = Encoder(c)
        self.discriminator_head = DiscriminatorHead(c)
        init_weights(self)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        return self.discriminator_head(self.encoder(input_ids, attention_mask, token_type_ids).padded())


@dataclass
class RTDOutput:
    mlm_sum: Tensor       # [] generator CE summed over masked positions
    mlm_correct: Tensor   # [] generator argmax == original
    rtd_sum: Tensor       # [] BCE summed over real tokens
    rtd_correct: Tensor   # [] discriminator (logit > 0) == replaced, over real tokens
    replaced: Tensor      # [] positions whose sampled token differs from the original
    tokens: Tensor        # [] real tokens (attention_mask == 1)


class RTDModel(nn.Module):
    """Generator + discriminator; `.encoder` is the discriminator (what fine-tuning keeps)."""

    def __init__(self, c: EncoderConfig, g: EncoderConfig):
        super().__init__()
        if g.embedding_size != c.embedding_size or g.family != c.family:
            raise ValueError("the generator shares the discriminator's family and embedding size")
        self.config, self.generator_config = c, g
        self.encoder = Encoder(c)
        self.discriminator_head = DiscriminatorHead(c)
        self.generator = Encoder(g)
        self.generator_mlm = MLMHead(g)
        init_weights(self)
        # Shared after init: one module, so both losses reach the same parameters.
        self.generator.embeddings = self.encoder.embeddings
        # No loss reads a pooler (ELECTRA has none; the checkpoints carry them untrained): frozen,
        # so that DDP, which requires a gradient for every trainable parameter, accepts the model.
        for pooler in (self.encoder.pooler, self.generator.pooler):
            if pooler is not None:
                pooler.requires_grad_(False)

    def generator_logits(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None,
                         mlm_positions: Tensor) -> Tensor:
        """[N, V] generator logits at the flat masked positions (into B*T)."""
        out = self.generator(input_ids, attention_mask, token_type_ids)
        return self.generator_mlm(out.at(mlm_positions), self.encoder.embeddings.word.weight)

    def discriminator_logits(self, input_ids: Tensor, attention_mask: Tensor,
                             token_type_ids: Tensor | None) -> Tensor:
        """[B, T] one logit per position (> 0: replaced)."""
        return self.discriminator_head(self.encoder(input_ids, attention_mask, token_type_ids).padded())

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None,
                mlm_positions: Tensor, mlm_labels: Tensor | None = None,
                uniform: Tensor | None = None) -> RTDOutput | PreTrainingOutput:
        """input_ids [B, T] with masks applied, mlm_positions / mlm_labels / uniform [N]. Without
        labels: the generator's logits at mlm_positions, as PreTrainingModel's output (checks)."""
        if mlm_labels is None or uniform is None:
            return PreTrainingOutput(self.generator_logits(input_ids, attention_mask, token_type_ids, mlm_positions),
                                     None)
        logits = self.generator_logits(input_ids, attention_mask, token_type_ids, mlm_positions).float()
        mlm_sum = F.cross_entropy(logits, mlm_labels.long(), reduction="sum")
        mlm_correct = (logits.argmax(-1) == mlm_labels).sum()
        with torch.no_grad():  # sampling: no gradient reaches the generator through the discriminator
            sampled = sample(logits.detach(), uniform)                                       # [N]
            fake = input_ids.clone()
            fake.view(-1)[mlm_positions] = sampled
            replaced = torch.zeros_like(input_ids, dtype=torch.bool)
            replaced.view(-1)[mlm_positions] = sampled != mlm_labels                        # [B, T]
        d = self.discriminator_logits(fake, attention_mask, token_type_ids).float()          # [B, T]
        real = attention_mask.bool()
        target = replaced.float()
        rtd_sum = F.binary_cross_entropy_with_logits(d[real], target[real], reduction="sum")
        rtd_correct = ((d[real] > 0) == replaced[real]).sum()
        return RTDOutput(mlm_sum, mlm_correct, rtd_sum, rtd_correct, replaced.sum(), real.sum())


def sample(logits: Tensor, uniform: Tensor) -> Tensor:
    """[N, V] logits, [N] uniforms in [0, 1) -> [N] token ids by inverse CDF of the softmax
    (float64 cumulative sums, so that the draw does not depend on summation order noise)."""
    cdf = torch.softmax(logits.double(), -1).cumsum(-1)                     # [N, V]
    u = uniform.double().unsqueeze(-1) * cdf[:, -1:]                        # [N, 1], scaled to the total
    return torch.searchsorted(cdf, u).squeeze(-1).clamp_(max=logits.shape[-1] - 1)
