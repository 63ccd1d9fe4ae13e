"""The training step of `finetune embed` (torch's side of bertcli.finetune.embed.task, which
imports this module where a batch is trained, so reading and checking the files loads no torch).

A training batch holds B examples as text ids into the task's pool of tokenized texts: anchors
[B], positives [B], hard negatives [B, k], scores [B]. The step embeds the pool rows they name,
in one pass or GradCache mini-batches, and scores them with the in-batch ranking loss or CoSENT,
over every Matryoshka dimension.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from bertcli.finetune.embed import gather as dist_gather
from bertcli.finetune.embed.gradcache import cached_loss
from bertcli.finetune.embed.loss import cosent_loss, matryoshka, ranking_loss
from bertcli.finetune.engine import collate
from bertcli.train.precision import autocast

if TYPE_CHECKING:
    from bertcli.finetune.embed.task import EmbedTask


def encode_ids(task: EmbedTask, model, text_ids: np.ndarray, device: torch.device) -> torch.Tensor:
    """[len(text_ids), H] embeddings of those pool texts."""
    assert task.pool_features is not None, "featurize(train) builds the pool first"
    b = collate(task.pool_features, text_ids, task.pad_id)
    return task.embed(model, {k: v.to(device, non_blocking=True) for k, v in b.items()})


def objective(task: EmbedTask, batch: dict):
    """loss(reps [N, H]) for reps = the embeddings of anchors, positives, then the negatives
    column by column (N = B (2 + k)). Under torchrun with finetune.embed.gather (the default),
    `batch` is this rank's shard and reps its embeddings: they are gathered into the global
    batch's one-process layout (embed/gather.py) and the loss is the one-process loss of the
    global batch, the same on every rank, its gradient reaching the local slice; without gather,
    each rank's own shard is its whole batch."""
    B, k = len(batch["anchor"]), batch["negatives"].shape[1]
    rows = 2 + k                                                          # anchors, positives, k negative columns
    block = task.block
    shards = dist_gather.Shards(B, batch["anchor"].device) if block.gather and dist_gather.world()[1] > 1 else None
    ids = torch.cat([batch["anchor"], batch["positive"], batch["negatives"].T.reshape(-1)])   # [rows B]
    scores = batch["score"]
    if shards is not None:                                                # the global batch's ids and scores
        ids, scores, B = shards.whole(ids, rows), shards.whole(scores), shards.total
    anchor_ids, positive_ids, negative_ids = ids[:B], ids[B:2 * B], ids[2 * B:]

    def loss(reps: torch.Tensor) -> torch.Tensor:                         # reps [rows B, H] of the global batch
        a, p, n = reps[:B], reps[B:2 * B], reps[2 * B:]
        if task.kind == "scored":
            return cosent_loss(a, p, scores, block.scale)
        return ranking_loss(a, torch.cat([p, n]), torch.arange(B, device=reps.device), anchor_ids,
                            torch.cat([positive_ids, negative_ids]), block.scale, block.symmetric, positives=p)

    each = matryoshka(loss, block.dims)
    if shards is None:
        return each
    return lambda reps: each(shards.whole(reps, rows))                    # one gather per loss, all dims


def train_loss(task: EmbedTask, model, batch: dict) -> torch.Tensor:
    """The batch's loss, its graph ready for `backward` (GradCache's hooked one when
    finetune.embed.mini_batch_size splits the batch's texts)."""
    device = batch["anchor"].device
    ids = torch.cat([batch["anchor"], batch["positive"], batch["negatives"].T.reshape(-1)]).cpu().numpy()
    loss_fn = objective(task, batch)
    m = task.block.mini_batch_size
    if not len(ids):          # an empty shard of a short last batch: no text to embed, still in the gather
        return loss_fn(torch.zeros((0, task.pooling.dim), device=device, requires_grad=True))
    if m is None or m >= len(ids):
        return loss_fn(encode_ids(task, model, ids, device).float())
    chunks = [ids[i:i + m] for i in range(0, len(ids), m)]
    precision = task.cfg.precision
    return cached_loss(lambda c: encode_ids(task, model, c, device), chunks, loss_fn, device,
                       context=lambda: autocast(precision, device))
