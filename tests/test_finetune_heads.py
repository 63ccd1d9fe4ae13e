"""Token-classification and question-answering heads against transformers on the same weights,
both ways, for bert / roberta / albert; a pretraining-only checkpoint starts them fresh."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from helpers.hf import HF_PRETRAINING, TOL, hf_config
from helpers.models import PAD, batch, randomize

from bertcli.model import load_checkpoint, save_checkpoint

HF_TOKEN = {"bert": tf.BertForTokenClassification, "roberta": tf.RobertaForTokenClassification,
            "albert": tf.AlbertForTokenClassification}
HF_QA = {"bert": tf.BertForQuestionAnswering, "roberta": tf.RobertaForQuestionAnswering,
         "albert": tf.AlbertForQuestionAnswering}
LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def _inputs(family):
    b = batch(family, seed=7)
    return {k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
def test_token_classifier_matches_transformers_both_ways(tmp_path, family):
    torch.manual_seed(0)
    x = _inputs(family)
    real = x["attention_mask"].bool()
    cfg = hf_config(family, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
                    label2id={n: i for i, n in enumerate(LABELS)})
    hf = HF_TOKEN[family](cfg).eval()
    randomize(hf, 3)
    hf.save_pretrained(tmp_path / "hf")
    ours, report = load_checkpoint(tmp_path / "hf", head="token")
    assert report.fresh == [] and report.unused == [] and ours.config.labels == LABELS
    with torch.no_grad():
        mine = ours(**x)
        torch.testing.assert_close(mine[real], hf(**x).logits[real], **TOL)
        # Logits read at chosen positions only (the sparse last layer) are the same numbers.
        flat = real.reshape(-1).nonzero().squeeze(1)[::2]
        torch.testing.assert_close(ours(**x, positions=flat), mine.reshape(-1, len(LABELS))[flat], **TOL)

    randomize(ours, 4)
    save_checkpoint(ours, tmp_path / "ours")
    back = tf.AutoModelForTokenClassification.from_pretrained(tmp_path / "ours").eval()
    assert type(back) is HF_TOKEN[family] and back.config.id2label == dict(enumerate(LABELS))
    with torch.no_grad():
        torch.testing.assert_close(ours(**x)[real], back(**x).logits[real], **TOL)


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
def test_qa_head_matches_transformers_both_ways(tmp_path, family):
    torch.manual_seed(0)
    x = _inputs(family)
    real = x["attention_mask"].bool()
    hf = HF_QA[family](hf_config(family)).eval()
    randomize(hf, 5)
    hf.save_pretrained(tmp_path / "hf")
    ours, report = load_checkpoint(tmp_path / "hf", head="qa")
    assert report.fresh == [] and report.unused == []
    with torch.no_grad():
        start, end = ours(**x)
        out = hf(**x)
        torch.testing.assert_close(start[real], out.start_logits[real], **TOL)
        torch.testing.assert_close(end[real], out.end_logits[real], **TOL)
    save_checkpoint(ours, tmp_path / "ours")
    back = tf.AutoModelForQuestionAnswering.from_pretrained(tmp_path / "ours").eval()
    assert type(back) is HF_QA[family]
    with torch.no_grad():
        torch.testing.assert_close(ours(**x)[0][real], back(**x).start_logits[real], **TOL)


@pytest.mark.parametrize("family", ["bert", "albert"])
def test_pretraining_checkpoint_starts_token_head_fresh(tmp_path, family):
    """The MLM / NSP / SOP heads and the pooler are listed as unused, the classifier as fresh,
    and the encoder computes exactly the pretrained model's hidden states."""
    torch.manual_seed(0)
    hf = HF_PRETRAINING[family](hf_config(family)).eval()
    randomize(hf, 1)
    hf.save_pretrained(tmp_path)
    ours, report = load_checkpoint(tmp_path, head="token", labels=LABELS)
    assert sorted(report.fresh) == ["classifier.bias", "classifier.weight"]
    assert any("pooler" in n for n in report.unused) and ours.encoder.pooler is None
    x = _inputs(family)
    real = x["attention_mask"].bool()
    with torch.no_grad():
        theirs = hf(**x, output_hidden_states=True).hidden_states[-1]
        mine = ours.encoder(x["input_ids"], x["attention_mask"], x["token_type_ids"]).padded()
    torch.testing.assert_close(mine[real], theirs[real], **TOL)
    assert PAD[family] == ours.config.pad_token_id
