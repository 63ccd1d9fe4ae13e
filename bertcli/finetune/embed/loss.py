"""The objectives of `bertcli finetune embed`, on embedding tensors (no model in here).

In-batch negatives (`ranking_loss`): InfoNCE over scaled cosine similarities, as DPR, SimCSE and
sentence-transformers' MultipleNegativesRankingLoss. Anchor i's candidates are every positive of
the batch and every hard negative; its own positive is the target. A candidate whose TEXT equals
anchor i's positive (the same answer given for two queries, a sentence twice in a SimCSE batch)
is a right answer, not a negative: it is masked out of row i. `symmetric` adds the other
direction (positive i against every anchor, anchors equal to anchor i masked) and averages the
two, as MultipleNegativesSymmetricRankingLoss.

Scored pairs (`cosent_loss`): CoSENT (Su Jianlin, 2022, "CoSENT: a more efficient sentence vector
scheme than Sentence-BERT"; sentence-transformers' CoSENTLoss, scale 20):
    log(1 + sum over pairs (i, j) with score_i > score_j of exp(scale * (cos_j - cos_i)))
It uses only the order of the gold scores, so 0-1 and 0-5 scales train alike, and it ranks the
pairs' cosines, which is what STS's Spearman measures (cosine-MSE, CosineSimilarityLoss, would
also pull every cosine to an absolute target).

Matryoshka (`matryoshka`, Kusupati et al. 2022): the loss summed over the embeddings truncated
to each of `dims` (each prefix re-normalized by the cosine), weight 1 each, as
sentence-transformers' MatryoshkaLoss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

NEG_INF = float("-inf")


def cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """[n, m] cosine similarities of rows of a [n, H] and b [m, H], in float32."""
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


def ranking_loss(anchors: Tensor, candidates: Tensor, targets: Tensor, anchor_ids: Tensor, candidate_ids: Tensor,
                 scale: float = 20.0, symmetric: bool = False, positives: Tensor | None = None) -> Tensor:
    """In-batch negatives.

    anchors [B, H]; candidates [C, H] (the batch's positives, then its hard negatives; under
    torchrun the global batch's, gathered by finetune/embed/gather.py); targets [B] the column of
    each anchor's own positive; anchor_ids [B] and candidate_ids [C] text ids (equal ids = equal
    texts). symmetric: `positives` [B, H] also scored against the anchors, positive i's target
    being anchor i."""
    scores = cosine_matrix(anchors, candidates) * scale                   # [B, C]
    rows = torch.arange(len(anchors), device=anchors.device)
    target_ids = candidate_ids[targets]                                   # [B] id of each own positive
    same = candidate_ids[None, :] == target_ids[:, None]                  # [B, C]
    same[rows, targets] = False                                           # the target itself stays
    loss = F.cross_entropy(scores.masked_fill(same, NEG_INF), targets)
    if not symmetric:
        return loss
    assert positives is not None, "the symmetric loss needs the positives"
    back = cosine_matrix(positives, anchors) * scale                      # [B, B]
    same_a = anchor_ids[None, :] == anchor_ids[:, None]                   # [B, B]
    same_a[rows, rows] = False
    return (loss + F.cross_entropy(back.masked_fill(same_a, NEG_INF), rows)) / 2


def cosent_loss(a: Tensor, b: Tensor, scores: Tensor, scale: float = 20.0) -> Tensor:
    """CoSENT over pairs (a_i, b_i) [B, H] with gold scores [B] (any scale)."""
    cos = F.cosine_similarity(a.float(), b.float(), dim=-1) * scale                  # [B]
    diff = cos[None, :] - cos[:, None]                                    # [i, j] = cos_j - cos_i
    wanted = scores.float()[:, None] > scores.float()[None, :]            # pairs where i should rank above j
    diff = diff.masked_fill(~wanted, NEG_INF).flatten()
    return torch.logsumexp(torch.cat([diff.new_zeros(1), diff]), dim=0)


def matryoshka(loss: Callable[[Tensor], Tensor], dims: Sequence[int]) -> Callable[[Tensor], Tensor]:
    """`loss(reps [N, H])` summed over reps[:, :d] for each d of `dims` (all of H when empty)."""
    if not dims:
        return loss
    return lambda reps: torch.stack([loss(reps[:, :d]) for d in dims]).sum()
