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
    column by column (N = B (2 + k))."""
    B = len(batch["anchor"])
    anchor_ids, positive_ids = batch["anchor"], batch["positive"]
    negative_ids = batch["negatives"].T.reshape(-1)                       # [k B], column by column
    block = task.block
    gathering = block.gather
    g = dist_gather.gather if gathering else (lambda x: x)
    rank = dist_gather.world()[0] if gathering else 0

    def loss(reps: torch.Tensor) -> torch.Tensor:
        a, p, n = reps[:B], reps[B:2 * B], reps[2 * B:]
        if task.kind == "scored":
            return cosent_loss(a, p, batch["score"], block.scale)
        cand = torch.cat([g(p), g(n)])
        cand_ids = torch.cat([g(positive_ids), g(negative_ids)])
        targets = rank * B + torch.arange(B, device=reps.device)
        return ranking_loss(a, cand, targets, anchor_ids, cand_ids, block.scale, block.symmetric, positives=p,
                            all_anchors=g(a) if block.symmetric else None,
                            all_anchor_ids=g(anchor_ids) if block.symmetric else None)

    return matryoshka(loss, block.dims)


def train_loss(task: EmbedTask, model, batch: dict) -> torch.Tensor:
    """The batch's loss, its graph ready for `backward` (GradCache's hooked one when
    finetune.embed.mini_batch_size splits the batch's texts)."""
    device = batch["anchor"].device
    ids = torch.cat([batch["anchor"], batch["positive"], batch["negatives"].T.reshape(-1)]).cpu().numpy()
    loss_fn = objective(task, batch)
    m = task.block.mini_batch_size
    if m is None or m >= len(ids):
        return loss_fn(encode_ids(task, model, ids, device).float())
    chunks = [ids[i:i + m] for i in range(0, len(ids), m)]
    precision = task.cfg.precision
    return cached_loss(lambda c: encode_ids(task, model, c, device), chunks, loss_fn, device,
                       context=lambda: autocast(precision, device))
