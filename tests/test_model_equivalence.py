"""bertcli's encoder and heads against transformers on the same weights (fp32, eval, padding in
the batch), in both directions: transformers' save_pretrained -> load_checkpoint, and
save_checkpoint -> transformers' from_pretrained."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from test_model_util import PAD, VOCAB, batch, one_thread, randomize, tiny_section  # noqa: F401 (fixture)

from bertcli.model import build_model, load_checkpoint, save_checkpoint

TOL = dict(atol=1e-5, rtol=0)


def hf_config(family: str, **extra):
    common = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, intermediate_size=37,
                  pad_token_id=PAD[family], **extra)
    if family == "bert":
        return tf.BertConfig(num_hidden_layers=2, max_position_embeddings=40, **common)
    if family == "roberta":
        return tf.RobertaConfig(num_hidden_layers=2, max_position_embeddings=42, type_vocab_size=1,
                                layer_norm_eps=1e-5, **common)
    return tf.AlbertConfig(embedding_size=16, num_hidden_layers=4, max_position_embeddings=40,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **common)


HF_PRETRAINING = {"bert": tf.BertForPreTraining, "roberta": tf.RobertaForMaskedLM,
                  "albert": tf.AlbertForPreTraining}
HF_CLASSIFIER = {"bert": tf.BertForSequenceClassification, "roberta": tf.RobertaForSequenceClassification,
                 "albert": tf.AlbertForSequenceClassification}


def hf_outputs(model, b: dict):
    out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                token_type_ids=b["token_type_ids"], output_hidden_states=True)
    hidden = out.hidden_states[-1]
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


CASES = [("bert", {}), ("roberta", {}), ("albert", {}), ("albert", {"num_hidden_groups": 2})]


@pytest.mark.parametrize("family,extra", CASES, ids=["bert", "roberta", "albert", "albert-2groups"])
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


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
def test_bertcli_checkpoint_loads_in_transformers_with_same_outputs(tmp_path, family):
    torch.manual_seed(0)
    ours = build_model(tiny_section(family), VOCAB, PAD[family]).eval()
    randomize(ours, 2)
    save_checkpoint(ours, tmp_path)
    hf = tf.AutoModelForPreTraining.from_pretrained(tmp_path).eval()
    assert type(hf) is HF_PRETRAINING[family]
    b = batch(family, seed=3)
    with torch.no_grad():
        assert_same(ours_outputs(ours, b), hf_outputs(hf, b), b)
    # The unused tied-decoder path of transformers is the embedding matrix itself.
    assert torch.equal(hf.get_output_embeddings().weight, ours.encoder.embeddings.word.weight)


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
@pytest.mark.parametrize("num_labels", [3, 1], ids=["classification", "regression"])
def test_sequence_classifier_matches_transformers_both_ways(tmp_path, family, num_labels):
    torch.manual_seed(0)
    b = batch(family, seed=4)
    inputs = {k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    hf = HF_CLASSIFIER[family](hf_config(family, num_labels=num_labels)).eval()
    randomize(hf, 5)
    hf.save_pretrained(tmp_path / "hf")
    ours, report = load_checkpoint(tmp_path / "hf", head="classification")
    assert report.fresh == [] and ours.num_labels == num_labels
    with torch.no_grad():
        torch.testing.assert_close(ours(**inputs), hf(**inputs).logits, **TOL)

    mine = build_model(tiny_section(family), VOCAB, PAD[family], head="classification",
                       num_labels=num_labels).eval()
    randomize(mine, 6)
    save_checkpoint(mine, tmp_path / "ours")
    back = tf.AutoModelForSequenceClassification.from_pretrained(tmp_path / "ours").eval()
    assert type(back) is HF_CLASSIFIER[family] and back.config.num_labels == num_labels
    assert back.config.problem_type == ("regression" if num_labels == 1 else "single_label_classification")
    with torch.no_grad():
        torch.testing.assert_close(mine(**inputs), back(**inputs).logits, **TOL)
