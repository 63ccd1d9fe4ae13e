"""bertcli's encoder and heads against transformers on the same weights (fp32, eval, padding in
the batch), in both directions: transformers' save_pretrained -> load_checkpoint, and
save_checkpoint -> transformers' from_pretrained.

Every family is one entry of CASES: the keys of its transformers config at a tiny size (the
model classes come from the family's spec). ModernBERT's rows (12 tokens) are longer than its
local window (8 tokens: +-4), so sliding-window layers are exercised, and the batch is padded."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from helpers.hf import CASES, HF_PRETRAINING, TOL, hf_class, hf_config
from helpers.models import PAD, VOCAB, batch, randomize, tiny_section
from transformers.models.auto.modeling_auto import MODEL_FOR_PRETRAINING_MAPPING_NAMES

from bertcli.config.families import family_spec
from bertcli.model import build_model, load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)


FAMILIES = list(CASES)


HF_CLASSIFIER = {f: hf_class(f, "classification") for f in FAMILIES}


def hf_inputs(family: str, b: dict) -> dict:
    """The batch as transformers' model of the family takes it (ModernBERT has no token types)."""
    names = ("input_ids", "attention_mask", "token_type_ids")
    return {k: b[k] for k in names[:3 if family_spec(family).token_type_embeddings else 2]}


def hf_outputs(model, b: dict):
    inputs = hf_inputs(model.config.model_type, b)
    out = model(**inputs)
    hidden = getattr(model, model.base_model_prefix)(**inputs).last_hidden_state
    if hasattr(out, "prediction_logits"):
        logits, pair = out.prediction_logits, getattr(out, "seq_relationship_logits", None)
        pair = out.sop_logits if hasattr(out, "sop_logits") else pair
    else:
        logits, pair = out.logits, None
    return hidden, logits.reshape(-1, logits.shape[-1])[b["mlm_positions"]], pair


def ours_outputs(model, b: dict):
    hidden = model.encoder(b["input_ids"], b["attention_mask"], b["token_type_ids"]).padded()
    out = model(**b)
    return hidden, out.mlm_logits, out.pair_logits


def assert_same(ours, theirs, b: dict) -> None:
    real = b["attention_mask"].bool()
    torch.testing.assert_close(ours[0][real], theirs[0][real], **TOL)
    torch.testing.assert_close(ours[1], theirs[1], **TOL)
    if theirs[2] is None:
        assert ours[2] is None
    else:
        torch.testing.assert_close(ours[2], theirs[2], **TOL)


LOAD_CASES = [(f, {}) for f in FAMILIES] + [("albert", {"num_hidden_groups": 2})]


@pytest.mark.parametrize("family,extra", LOAD_CASES, ids=FAMILIES + ["albert-2groups"])
def test_transformers_checkpoint_loads_with_same_outputs(tmp_path, family, extra):
    torch.manual_seed(0)
    hf = HF_PRETRAINING[family](hf_config(family, **extra)).eval()
    randomize(hf, 1)
    hf.save_pretrained(tmp_path)
    ours, report = load_checkpoint(tmp_path)
    assert report.fresh == [] and report.unused == []
    assert ours.config.family == family and not ours.training
    if family == "albert":
        assert ours.config.sharing == "all" and ours.config.num_hidden_groups == extra.get("num_hidden_groups", 1)
        assert len(ours.encoder.attention) == ours.config.num_hidden_groups
    b = batch(family)
    with torch.no_grad():
        assert_same(ours_outputs(ours, b), hf_outputs(hf, b), b)


@pytest.mark.parametrize("family", FAMILIES)
def test_bertcli_checkpoint_loads_in_transformers_with_same_outputs(tmp_path, family):
    torch.manual_seed(0)
    ours = build_model(tiny_section(family), VOCAB, PAD[family]).eval()
    randomize(ours, 2)
    save_checkpoint(ours, tmp_path)
    # AutoModelForPreTraining where transformers maps the type (ModernBERT: AutoModelForMaskedLM)
    pretraining = family_spec(family).model_type in MODEL_FOR_PRETRAINING_MAPPING_NAMES
    hf = (tf.AutoModelForPreTraining if pretraining else tf.AutoModelForMaskedLM).from_pretrained(tmp_path).eval()
    assert type(hf) is HF_PRETRAINING[family]
    b = batch(family, seed=3)
    with torch.no_grad():
        assert_same(ours_outputs(ours, b), hf_outputs(hf, b), b)
    # The unused tied-decoder path of transformers is the embedding matrix itself.
    assert torch.equal(hf.get_output_embeddings().weight, ours.encoder.embeddings.word.weight)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("num_labels", [3, 1], ids=["classification", "regression"])
def test_sequence_classifier_matches_transformers_both_ways(tmp_path, family, num_labels):
    torch.manual_seed(0)
    b = batch(family, seed=4)
    inputs = {k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    theirs = hf_inputs(family, b)
    hf = HF_CLASSIFIER[family](hf_config(family, num_labels=num_labels)).eval()
    randomize(hf, 5)
    hf.save_pretrained(tmp_path / "hf")
    ours, report = load_checkpoint(tmp_path / "hf", head="classification")
    assert report.fresh == [] and ours.num_labels == num_labels
    with torch.no_grad():
        torch.testing.assert_close(ours(**inputs), hf(**theirs).logits, **TOL)

    mine = build_model(tiny_section(family), VOCAB, PAD[family], head="classification",
                       num_labels=num_labels).eval()
    randomize(mine, 6)
    save_checkpoint(mine, tmp_path / "ours")
    back = tf.AutoModelForSequenceClassification.from_pretrained(tmp_path / "ours").eval()
    assert type(back) is HF_CLASSIFIER[family] and back.config.num_labels == num_labels
    assert back.config.problem_type == ("regression" if num_labels == 1 else "single_label_classification")
    with torch.no_grad():
        torch.testing.assert_close(mine(**inputs), back(**theirs).logits, **TOL)
