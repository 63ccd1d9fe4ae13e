"""Settings really change the model: sharing, factorized embeddings, pre-LN, activations,
RoBERTa positions, dropout; the fast paths (unpadding, sparse MLM, compile-free autocast) give the
same results as the plain ones; initialization follows transformers."""

from __future__ import annotations

import pytest
import torch
from helpers.models import PAD, VOCAB, batch, randomize, tiny_section

from bertcli.model import build_model
from bertcli.model.count import flops_per_token, parameter_counts

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)


def model(family="bert", **changes):
    torch.manual_seed(0)
    return build_model(tiny_section(family, **changes), VOCAB, PAD[family]).eval()


def hidden(m, b):
    with torch.no_grad():
        return m.encoder(b["input_ids"], b["attention_mask"], b["token_type_ids"]).padded()


@pytest.mark.parametrize("sharing,attn,ffn", [("none", 4, 4), ("all", 2, 2), ("attention", 2, 4), ("ffn", 4, 2)])
def test_sharing_makes_layers_use_the_same_tensors(sharing, attn, ffn):
    m = model("bert", num_hidden_layers=4, sharing=sharing, num_hidden_groups=1 if sharing == "none" else 2)
    enc = m.encoder
    assert (len(enc.attention), len(enc.ffn)) == (attn, ffn)
    # Layers 0, 1 form group 0 and layers 2, 3 group 1 (ALBERT: int(i / (L / G))).
    plan = enc.layer_plan
    if sharing in ("all", "attention"):
        assert [a for a, _ in plan] == [0, 0, 1, 1]
    if sharing in ("all", "ffn"):
        assert [f for _, f in plan] == [0, 0, 1, 1]
    # Unrolled into four unshared layers holding copies, the model computes the same, and each
    # shared tensor's gradient is the sum of its copies' gradients.
    unrolled = model("bert", num_hidden_layers=4)
    with torch.no_grad():
        for i, (a, f) in enumerate(plan):
            unrolled.encoder.attention[i].load_state_dict(enc.attention[a].state_dict())
            unrolled.encoder.ffn[i].load_state_dict(enc.ffn[f].state_dict())
        for name in ("embeddings", "pooler"):
            getattr(unrolled.encoder, name).load_state_dict(getattr(enc, name).state_dict())
        unrolled.mlm.load_state_dict(m.mlm.state_dict())
        unrolled.pair.load_state_dict(m.pair.state_dict())
    b = batch("bert")
    outs = [net(**b) for net in (m, unrolled)]
    torch.testing.assert_close(outs[0].mlm_logits, outs[1].mlm_logits, atol=1e-5, rtol=0)
    for out in outs:
        out.mlm_logits.sum().backward()
    for a in range(attn):
        copies = [i for i, (j, _) in enumerate(plan) if j == a]
        total = sum(unrolled.encoder.attention[i].qkv.weight.grad for i in copies)
        torch.testing.assert_close(enc.attention[a].qkv.weight.grad, total, atol=1e-5, rtol=1e-4)
    counts = parameter_counts(tiny_section("bert", num_hidden_layers=4, sharing=sharing,
                                           num_hidden_groups=1 if sharing == "none" else 2), VOCAB)
    assert counts["total"] == sum(p.numel() for p in m.parameters())
    assert counts["encoder_effective"] == 4 * (sum(p.numel() for p in enc.attention[0].parameters())
                                               + sum(p.numel() for p in enc.ffn[0].parameters()))
    assert (counts["encoder"] < counts["encoder_effective"]) == (sharing != "none")


def test_factorized_embedding_adds_the_projection():
    plain, factored = model("bert"), model("bert", embedding_size=16)
    assert plain.encoder.proj is None
    assert factored.encoder.proj.weight.shape == (32, 16)
    assert factored.encoder.embeddings.word.weight.shape == (VOCAB, 16)
    assert factored.mlm.dense.weight.shape == (16, 32)  # H -> E, decoder tied to the E-sized table
    diff = sum(p.numel() for p in plain.parameters()) - sum(p.numel() for p in factored.parameters())
    # Tables shrink from H to E columns; projection E*H + H and head H*E... replace H*H, LN 2E for 2H.
    V, P, T, H, E = VOCAB, 40, 2, 32, 16
    assert diff == (V + P + T) * (H - E) + 2 * (H - E) - (E * H + H) + (H * H + H - H * E - E) + 2 * (H - E)
    out = factored(**batch("bert"))
    assert out.mlm_logits.shape == (6, VOCAB)


@pytest.mark.parametrize("change", [dict(norm="pre"), dict(hidden_act="gelu_new")], ids=["pre-LN", "gelu_new"])
def test_settings_change_the_outputs_of_the_same_weights(change):
    base, other = model("bert"), model("bert", **change)
    randomize(base, 1)  # weights big enough for the activations and residual paths to matter
    missing, unexpected = other.load_state_dict(base.state_dict(), strict=False)
    assert unexpected == [] and missing == (["encoder.final_norm.weight", "encoder.final_norm.bias"]
                                            if change.get("norm") == "pre" else [])
    b = batch("bert")
    h0, h1 = hidden(base, b), hidden(other, b)
    real = b["attention_mask"].bool()
    assert (h0[real] - h1[real]).abs().max() > 1e-4


def test_roberta_positions_count_from_padding_idx_plus_one():
    m = model("roberta")
    ids = torch.tensor([[0, 7, 8, 2, 1, 1], [0, 9, 2, 1, 1, 1]])
    assert m.encoder.positions(ids).tolist() == [[2, 3, 4, 5, 1, 1], [2, 3, 4, 1, 1, 1]]
    # 40 usable positions + offset 2 = max_position_embeddings 42: the longest input still fits.
    longest = torch.full((1, 40), 7)
    assert m.encoder.positions(longest).max().item() == 41
    assert m(longest).mlm_logits.shape == (1, 40, VOCAB)


def test_dropout_is_active_in_training_only():
    m = model("bert")
    b = batch("bert")
    m.train()
    assert not torch.equal(m(**b).mlm_logits, m(**b).mlm_logits)
    m.eval()
    assert torch.equal(m(**b).mlm_logits, m(**b).mlm_logits)


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "modernbert"])
def test_fast_paths_agree_with_the_plain_one_in_values_and_gradients(family):
    """Unpadding and the sparse last layer (default) against neither: same logits, same gradients."""
    b = batch(family, lengths=(12, 5, 9, 1), n_masked=9)
    b["mlm_positions"] = torch.cat([b["mlm_positions"], b["mlm_positions"][:2]])  # repeats are allowed
    results = []
    for fast in (True, False):
        m = model(family, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        m.encoder.unpad = m.sparse_last_layer = fast
        out = m(**b)
        loss = out.mlm_logits.logsumexp(-1).sum() + (out.pair_logits.sum() if out.pair_logits is not None else 0)
        loss.backward()
        results.append((out.mlm_logits.detach(), {n: p.grad for n, p in m.named_parameters()}))
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-5, rtol=1e-5)
    for name, grad in results[0][1].items():
        other = results[1][1][name]
        if grad is None:
            assert other is None or other.abs().max() == 0, name
        else:
            torch.testing.assert_close(grad, other, atol=1e-5, rtol=1e-4, msg=name)


def test_sparse_mlm_equals_dense_logits_at_the_masked_positions():
    m = model("albert")
    b = batch("albert")
    with torch.no_grad():
        dense = m(b["input_ids"], b["attention_mask"], b["token_type_ids"]).mlm_logits  # [B, T, V]
        sparse = m(**b).mlm_logits                                                     # [N, V]
    torch.testing.assert_close(sparse, dense.reshape(-1, VOCAB)[b["mlm_positions"]], atol=1e-5, rtol=0)


def test_bf16_autocast_stays_close_to_fp32():
    m = model("bert")
    b = batch("bert")
    with torch.no_grad():
        full = m(**b).mlm_logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = m(**b).mlm_logits
    assert half.dtype == torch.bfloat16
    assert (half.float() - full).abs().max() < 0.05 * full.abs().max()


def test_initialization_follows_transformers():
    torch.manual_seed(0)
    m = build_model(tiny_section("roberta", hidden_size=256, intermediate_size=1024), 5000, 1)
    qkv = m.encoder.attention[0].qkv
    assert abs(qkv.weight.std().item() - 0.02) < 0.001 and qkv.weight.mean().abs() < 0.001
    assert torch.all(qkv.bias == 0) and torch.all(m.mlm.bias == 0)
    assert torch.all(m.encoder.ffn[0].norm.weight == 1) and torch.all(m.encoder.ffn[0].norm.bias == 0)
    assert torch.all(m.encoder.embeddings.word.weight[1] == 0)       # padding row
    assert torch.all(m.encoder.embeddings.position.weight[1] == 0)   # RoBERTa's padding position


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_flops_per_token_matches_a_measured_count(family):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    section = tiny_section(family, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    m = build_model(section, VOCAB, PAD[family])
    B, T = 4, 32
    ids = torch.randint(5, VOCAB, (B, T))
    positions = torch.arange(0, B * T, 8)  # 1/8 of the tokens predicted
    counter = FlopCounterMode(display=False)
    # The math backend runs attention as matrix products the counter sees.
    with counter, sdpa_kernel(SDPBackend.MATH):
        out = m(ids, torch.ones_like(ids), mlm_positions=positions)
        (out.mlm_logits.sum() + (0 if out.pair_logits is None else out.pair_logits.sum())).backward()
    measured = counter.get_total_flops() / (B * T)
    assert measured == pytest.approx(flops_per_token(section, VOCAB, T, 1 / 8), rel=0.02)
