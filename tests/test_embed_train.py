"""The objectives and GradCache of `bertcli finetune embed`, on small tensors and a tiny encoder:
losses against hand-written references and sentence-transformers' own, the duplicate-positive
mask, GradCache's loss and gradients against one pass with every graph kept, the DDP gather's
single-process path, Matryoshka sums."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers.models import tiny_section

from bertcli.finetune.embed import gradcache
from bertcli.finetune.embed.gather import Shards
from bertcli.finetune.embed.loss import cosent_loss, matryoshka, ranking_loss
from bertcli.model import build_model
from bertcli.model.pooling import pool


def _cos(u, v) -> float:
    return float(u @ v / (u.norm() * v.norm()))


def reference_ranking(a, cands, targets, cand_ids, scale, masked=True) -> float:
    """Row by row: -log softmax of the target among the candidates, skipping (masked) those
    with the target's text id other than the target itself."""
    total = 0.0
    for i in range(len(a)):
        logits = []
        for j in range(len(cands)):
            if masked and j != targets[i] and cand_ids[j] == cand_ids[targets[i]]:
                continue
            logits.append((j, scale * _cos(a[i], cands[j])))
        z = math.log(sum(math.exp(x) for _, x in logits))
        total += z - dict(logits)[int(targets[i])]
    return total / len(a)


def _data(B=5, k=2, H=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    a, p = torch.randn(B, H, generator=g), torch.randn(B, H, generator=g)
    n = torch.randn(B * k, H, generator=g)
    return a, p, n


def test_ranking_loss_equals_reference_with_hard_negatives():
    a, p, n = _data()
    B = len(a)
    cands = torch.cat([p, n])
    ids = torch.arange(len(cands))                    # all texts distinct
    got = ranking_loss(a, cands, torch.arange(B), torch.arange(100, 100 + B), ids, scale=20.0)
    assert float(got) == pytest.approx(reference_ranking(a, cands, torch.arange(B), ids, 20.0), rel=1e-5)


def test_duplicate_positive_is_masked_not_a_negative():
    """Anchors 0 and 3 share their positive's text: for row 0, column 3 (the same text) leaves the
    softmax and vice versa; the loss equals the reference that skips them, and differs from the
    unmasked cross-entropy by more than rounding."""
    a, p, _ = _data(B=5, k=0)
    p[3] = p[0] + 0.01 * torch.randn(8)               # the same text, embedded (almost) alike
    ids = torch.tensor([0, 1, 2, 0, 4])                # text ids: positive 3 is positive 0's text
    targets = torch.arange(5)
    got = float(ranking_loss(a, p, targets, torch.arange(10, 15), ids, scale=20.0))
    assert got == pytest.approx(reference_ranking(a, p, targets, ids, 20.0, masked=True), rel=1e-5)
    unmasked = float(F.cross_entropy(20.0 * F.normalize(a) @ F.normalize(p).T, targets))
    assert unmasked == pytest.approx(reference_ranking(a, p, targets, ids, 20.0, masked=False), rel=1e-5)
    assert abs(got - unmasked) > 1e-3


def test_symmetric_adds_the_positive_to_anchor_direction():
    a, p, n = _data(k=1)
    B = len(a)
    ids = torch.arange(2 * B)
    a_ids = torch.arange(100, 100 + B)
    got = ranking_loss(a, torch.cat([p, n]), torch.arange(B), a_ids, ids, 20.0, symmetric=True, positives=p)
    fwd = reference_ranking(a, torch.cat([p, n]), torch.arange(B), ids, 20.0)
    back = reference_ranking(p, a, torch.arange(B), a_ids, 20.0)
    assert float(got) == pytest.approx((fwd + back) / 2, rel=1e-5)


def test_losses_equal_sentence_transformers():
    """MultipleNegativesRankingLoss (one-way and symmetric = doc_to_query per_direction) and
    CoSENTLoss of sentence-transformers on the same embeddings (distinct texts: no masking)."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, MultipleNegativesRankingLoss

    a, p, n = _data(B=6, k=2)
    B = len(a)
    negs = [n[:B], n[B:]]                              # our order: negatives column by column
    ids = torch.arange(3 * B)
    ours = ranking_loss(a, torch.cat([p, n]), torch.arange(B), torch.arange(100, 106), ids, 20.0)
    theirs = MultipleNegativesRankingLoss(None, scale=20.0).compute_loss_from_embeddings([a, p, *negs], None)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-5)

    sym = ranking_loss(a, p, torch.arange(B), torch.arange(100, 106), torch.arange(B), 20.0, symmetric=True, positives=p)
    theirs = MultipleNegativesRankingLoss(None, scale=20.0, directions=("query_to_doc", "doc_to_query"),
                                          partition_mode="per_direction").compute_loss_from_embeddings([a, p], None)
    assert float(sym) == pytest.approx(float(theirs), rel=1e-5)

    scores = torch.tensor([0.0, 1.5, 5.0, 2.5, 2.5, 4.0])
    got = cosent_loss(a, p, scores, 20.0)
    want = CoSENTLoss(None, scale=20.0).compute_loss_from_embeddings([a, p], scores)
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    assert st.__version__


def test_cosent_uses_only_the_order_of_scores():
    a, p, _ = _data(B=6)
    s = torch.tensor([0.0, 0.2, 1.0, 0.4, 0.4, 0.8])
    assert float(cosent_loss(a, p, s)) == pytest.approx(float(cosent_loss(a, p, 5 * s)), rel=1e-6)
    assert float(cosent_loss(a, p, s)) != pytest.approx(float(cosent_loss(a, p, s.flip(0))), rel=1e-3)


def test_matryoshka_sums_the_truncated_losses():
    a, p, _ = _data(B=4, H=8)
    reps = torch.cat([a, p])

    def loss(r):
        return ranking_loss(r[:4], r[4:], torch.arange(4), torch.arange(4), torch.arange(10, 14))

    want = loss(reps[:, :8]) + loss(reps[:, :4]) + loss(reps[:, :2])
    assert float(matryoshka(loss, [8, 4, 2])(reps)) == pytest.approx(float(want), rel=1e-6)
    assert float(matryoshka(loss, [])(reps)) == pytest.approx(float(loss(reps)), rel=1e-6)


def test_gather_single_process_is_the_identity_with_its_graph():
    x = torch.randn(3, 4, requires_grad=True)
    shards = Shards(3, x.device)
    assert shards.sizes == [3] and shards.total == 3
    y = shards.whole(x, rows=1)
    assert y is x and shards.parts(x) == [x]
    (y * 2).sum().backward()
    assert torch.equal(x.grad, torch.full((3, 4), 2.0))


# ------------------------------------------------------------------------------------ GradCache
def _model(dropout: float):
    torch.manual_seed(0)
    m = build_model(tiny_section("bert", hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout), 60, 0)
    return m.train()


def _chunks(n_pairs=6, per=3, seed=1):
    """Anchors then positives (2 * n_pairs texts of 3-9 tokens) in chunks of `per` texts."""
    g = torch.Generator().manual_seed(seed)
    texts = [torch.randint(5, 60, (int(torch.randint(3, 10, (1,), generator=g)),), generator=g)
             for _ in range(2 * n_pairs)]

    def batch(rows):
        T = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), T, dtype=torch.long)
        mask = torch.zeros(len(rows), T, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :len(r)], mask[i, :len(r)] = r, 1
        return ids, mask

    return [batch(texts[i:i + per]) for i in range(0, len(texts), per)], n_pairs


def _encode(model):
    def encode(chunk):
        ids, mask = chunk
        return pool(model.encoder(ids, mask).padded(), mask, "mean")
    return encode


def _loss(B):
    def loss(reps):
        return ranking_loss(reps[:B], reps[B:], torch.arange(B), torch.arange(B), torch.arange(B, 2 * B),
                            symmetric=True, positives=reps[B:])
    return loss


def _grads(model):
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def _run(cached: bool, dropout: float, scale_by: float = 1.0):
    model = _model(dropout)
    chunks, B = _chunks()
    torch.manual_seed(123)                           # the dropout draws
    if cached:
        loss = gradcache.cached_loss(_encode(model), chunks, _loss(B), torch.device("cpu"))
    else:
        loss = gradcache.uncached_loss(_encode(model), chunks, _loss(B))
    (loss * scale_by).backward()
    return float(loss.detach()), _grads(model)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_gradcache_equals_uncached_loss_and_gradients(dropout):
    """Loss and every parameter gradient equal those of the same batch with every graph kept
    (dropout on too: the re-forward restores each chunk's RNG state); a scaled backward (fp16's
    GradScaler) scales them."""
    ref_loss, ref = _run(False, dropout)
    loss, got = _run(True, dropout)
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    assert set(got) == set(ref) and len(ref) > 10
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-7, msg=k)
    _, scaled = _run(True, dropout, scale_by=8.0)
    for k in ref:
        torch.testing.assert_close(scaled[k], 8.0 * ref[k], rtol=1e-4, atol=1e-6, msg=k)


def test_gradcache_without_rng_restore_would_differ(monkeypatch):
    """The check above can fail: re-forwarding without restoring the RNG draws other dropout
    masks, and the gradients move by far more than the tolerance."""
    import contextlib

    _, ref = _run(False, 0.1)
    monkeypatch.setattr(gradcache.RngState, "restored", lambda self: contextlib.nullcontext())
    _, got = _run(True, 0.1)
    worst = max(float((got[k] - ref[k]).abs().max() / ref[k].abs().max().clamp(min=1e-12)) for k in ref)
    assert worst > 1e-2


def test_gradcache_equals_one_pass_over_the_whole_batch():
    """Without dropout, chunking itself changes nothing: GradCache over chunks of 3 equals one
    forward of all 12 texts."""
    model = _model(0.0)
    chunks, B = _chunks()
    whole, _ = _chunks(per=12)
    loss = gradcache.uncached_loss(_encode(model), whole, _loss(B))
    loss.backward()
    ref = _grads(model)
    model.zero_grad()
    cached = gradcache.cached_loss(_encode(model), chunks, _loss(B), torch.device("cpu"))
    cached.backward()
    assert float(cached.detach()) == pytest.approx(float(loss.detach()), rel=1e-5)
    for k, g in _grads(model).items():
        torch.testing.assert_close(g, ref[k], rtol=1e-4, atol=1e-6, msg=k)


@pytest.mark.parametrize("symmetric", [False, True])
def test_the_tasks_objective_with_gather_equals_without_in_one_process(symmetric):
    """EmbedTask's loss over [anchors; positives; negatives] with finetune.embed.gather on (the
    DDP path, here one process) equals it off, and equals ranking_loss called directly: the
    candidates are the positives then the negatives column by column, duplicate texts masked."""
    import dataclasses
    from pathlib import Path

    from bertcli.config.finetune_sections import FinetuneConfig
    from bertcli.finetune.embed.task import EmbedTask

    B, k = 4, 2
    reps = torch.randn(B * (2 + k), 8, generator=torch.Generator().manual_seed(3))
    reps[B:2 * B] += reps[:B]                          # positives near their anchors
    batch = {"anchor": torch.tensor([0, 1, 2, 3]), "positive": torch.tensor([4, 5, 4, 6]),
             "negatives": torch.tensor([[7, 8], [9, 5], [10, 11], [12, 13]]), "score": torch.zeros(B)}
    reps[B + 2] = reps[B]                              # equal texts embed alike: positive 2 is positive 0's text
    reps[2 * B + B + 1] = reps[B + 1]                  # anchor 1's second negative is its positive's text
    losses = []
    for gathering in (True, False):
        cfg = FinetuneConfig()
        cfg = dataclasses.replace(cfg, embed=dataclasses.replace(cfg.embed, gather=gathering, symmetric=symmetric))
        losses.append(float(EmbedTask(cfg, Path("t"), None, Path("c")).objective(batch)(reps)))
    cand_ids = torch.cat([batch["positive"], batch["negatives"].T.reshape(-1)])
    direct = ranking_loss(reps[:B], torch.cat([reps[B:2 * B], reps[2 * B:]]), torch.arange(B), batch["anchor"],
                          cand_ids, 20.0, symmetric, positives=reps[B:2 * B])
    assert losses[0] == losses[1] == pytest.approx(float(direct), rel=1e-6)
    # positive 4 is anchor 0's and anchor 2's: masked for each other, and negative 5 for anchor 1's own
    plain = float(F.cross_entropy(20.0 * F.normalize(reps[:B]) @ F.normalize(reps[B:]).T, torch.arange(B)))
    assert symmetric or abs(losses[0] - plain) > 0.1
