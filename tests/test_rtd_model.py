"""RTD (ELECTRA) model: gradient isolation, and losses equal to transformers' ElectraForPreTraining
(discriminator) and ElectraForMaskedLM (generator) on the same weights and inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.models import VOCAB, tiny_section

from bertcli.config.model import encoder_config
from bertcli.model.electra import RTDModel, RTDOutput, generator_config, sample
from bertcli.model.names import weight_map

transformers = pytest.importorskip("transformers")


def _model(family: str = "bert", seed: int = 0, **changes) -> RTDModel:
    torch.manual_seed(seed)
    c = encoder_config(tiny_section(family, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **changes),
                       VOCAB, 0 if family != "roberta" else 1)
    return RTDModel(c, generator_config(c, 16, 1, 2, 24)).eval()


def _batch(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    B, T = 3, 10
    ids = torch.randint(5, VOCAB, (B, T), generator=g)
    lengths = torch.tensor([10, 7, 4])
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    ids[mask == 0] = 0
    pos = torch.tensor([1, 3, 5, 11, 13, 22])          # flat positions of real tokens
    labels = ids.view(-1)[pos].clone()
    ids.view(-1)[pos[:5]] = 4                           # [MASK]; the last keeps its original token (15%)
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), mlm_positions=pos,
                mlm_labels=labels, uniform=torch.rand(len(pos), generator=g))


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_rtd_loss_gives_no_gradient_to_generator_only_parameters(family):
    m = _model(family).train()
    b = _batch()
    out = m(**b)
    assert isinstance(out, RTDOutput)
    out.rtd_sum.backward()
    shared = {id(p) for p in m.encoder.embeddings.parameters()}
    gen_only = [(n, p) for n, p in m.named_parameters() if n.startswith(("generator", "generator_mlm"))
                and id(p) not in shared]
    assert gen_only and all(p.grad is None or not p.grad.any() for _, p in gen_only)
    assert m.encoder.embeddings.word.weight.grad.abs().sum() > 0   # the shared tables do learn from RTD
    m.zero_grad()
    m(**b).mlm_sum.backward()  # type: ignore[union-attr]                                        # and the generator learns from MLM
    assert all(p.grad is not None for n, p in gen_only if "pooler" not in n)
    assert m.discriminator_head.dense.weight.grad is None


def test_sampling_is_a_pure_function_of_the_uniforms():
    logits = torch.randn(50, VOCAB, generator=torch.Generator().manual_seed(1))
    u = torch.rand(50, generator=torch.Generator().manual_seed(2))
    a, b = sample(logits, u), sample(logits.clone(), u.clone())
    assert torch.equal(a, b) and a.min() >= 0 and a.max() < VOCAB
    assert torch.equal(sample(logits, torch.zeros(50)), (torch.softmax(logits.double(), -1) > 0).long().argmax(-1))


def _to_hf(state: dict, c, base: str, ours_prefix: str) -> dict:
    """bertcli's encoder tensors under transformers' Electra names (BERT layout, `electra.` base)."""
    out = {}
    for name, copies in weight_map(c, "token", base=base).items():
        if not name.startswith("encoder."):
            continue
        t = state[ours_prefix + name[len("encoder."):]]
        for theirs in copies:
            out.update(zip(theirs, t.chunk(len(theirs), 0)))
    # BERT's names call the E -> H projection what Electra calls embeddings_project
    return {k.replace("encoder.embedding_hidden_mapping_in", "embeddings_project"): v for k, v in out.items()}


def _hf_config(c, **over):
    kw = dict(vocab_size=c.vocab_size, embedding_size=c.embedding_size, hidden_size=c.hidden_size,
              num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
              intermediate_size=c.intermediate_size, hidden_act=c.hidden_act, hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, max_position_embeddings=c.max_position_embeddings,
              type_vocab_size=c.type_vocab_size, layer_norm_eps=c.layer_norm_eps, pad_token_id=c.pad_token_id)
    kw.update(over)
    return transformers.ElectraConfig(**kw)


def test_losses_equal_transformers_electra():
    m = _model("bert", embedding_size=24)   # E != H: both encoders project
    b = _batch()
    c, g = m.config, m.generator_config
    sd = m.state_dict()
    with torch.no_grad():
        out = m(**b)
        assert isinstance(out, RTDOutput)
        # generator: ElectraForMaskedLM, labels -100 off the masked positions -> mean CE
        gen = transformers.ElectraForMaskedLM(_hf_config(g)).eval()
        gsd = _to_hf(sd, g, "electra.", "generator.")
        gsd.update({"generator_predictions.dense.weight": sd["generator_mlm.dense.weight"],
                    "generator_predictions.dense.bias": sd["generator_mlm.dense.bias"],
                    "generator_predictions.LayerNorm.weight": sd["generator_mlm.norm.weight"],
                    "generator_predictions.LayerNorm.bias": sd["generator_mlm.norm.bias"],
                    "generator_lm_head.weight": sd["encoder.embeddings.word.weight"],
                    "generator_lm_head.bias": sd["generator_mlm.bias"]})
        missing, unexpected = gen.load_state_dict(gsd, strict=False)
        assert not unexpected and not [k for k in missing if "position_ids" not in k]
        labels = torch.full_like(b["input_ids"], -100)
        labels.view(-1)[b["mlm_positions"]] = b["mlm_labels"]
        theirs = gen(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                     token_type_ids=b["token_type_ids"], labels=labels).loss
        torch.testing.assert_close(out.mlm_sum / len(b["mlm_labels"]), theirs, rtol=1e-5, atol=1e-6)
        # discriminator: ElectraForPreTraining on the sampled input -> mean BCE over attention_mask == 1
        disc = transformers.ElectraForPreTraining(_hf_config(c)).eval()
        dsd = _to_hf(sd, c, "electra.", "encoder.")
        dsd.update({"discriminator_predictions.dense.weight": sd["discriminator_head.dense.weight"],
                    "discriminator_predictions.dense.bias": sd["discriminator_head.dense.bias"],
                    "discriminator_predictions.dense_prediction.weight": sd["discriminator_head.prediction.weight"],
                    "discriminator_predictions.dense_prediction.bias": sd["discriminator_head.prediction.bias"]})
        missing, unexpected = disc.load_state_dict(dsd, strict=False)
        assert not unexpected and not [k for k in missing if "position_ids" not in k]
        logits = m.generator_logits(b["input_ids"], b["attention_mask"], b["token_type_ids"], b["mlm_positions"])
        fake = b["input_ids"].clone()
        sampled = sample(logits, b["uniform"])
        fake.view(-1)[b["mlm_positions"]] = sampled
        original = b["input_ids"].clone()
        original.view(-1)[b["mlm_positions"]] = b["mlm_labels"]
        theirs = disc(input_ids=fake, attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"],
                      labels=(fake != original).long())
        n = b["attention_mask"].sum()
        torch.testing.assert_close(out.rtd_sum / n, theirs.loss, rtol=1e-5, atol=1e-6)
        assert int(out.tokens) == int(n)       # special tokens and every real position count
        assert int(out.replaced) == int((fake != original).sum())
        ref = F.binary_cross_entropy_with_logits(theirs.logits[b["attention_mask"].bool()],
                                                 (fake != original)[b["attention_mask"].bool()].float())
        torch.testing.assert_close(theirs.loss, ref)
