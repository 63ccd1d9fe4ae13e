"""RTD checkpoints, native both ways: the BERT family's discriminator is transformers'
ElectraForPreTraining and its generator ElectraForMaskedLM (same logits on the same weights);
Electra directories written by transformers load in bertcli, and an Electra classifier fine-tuned
by either gives the other's logits; another family's discriminator is its own encoder checkpoint
with the RTD head in bertcli's rtd_head.safetensors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.export import write_tokenizer
from helpers.models import PAD, VOCAB, batch, randomize, tiny_section

from bertcli.config.model import encoder_config
from bertcli.core.errors import UserError
from bertcli.export.heads import detect_kind
from bertcli.model.checkpoint import RTD_HEAD, load_checkpoint, read_weights, save_checkpoint
from bertcli.model.electra import RTDModel, generator_config, rtd_layout
from bertcli.model.heads import SequenceClassifier
from bertcli.tasks.heads import saved_head
from bertcli.train.objective import save_rtd

transformers = pytest.importorskip("transformers")


def _rtd(family: str, tokenizer_dir: Path, **changes) -> RTDModel:
    """A tiny RTD model (generator H 16) with the vocabulary of a tokenizer written into `tokenizer_dir`."""
    vocab = write_tokenizer(tokenizer_dir, family)
    torch.manual_seed(0)
    c = encoder_config(tiny_section(family, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **changes),
                       vocab, PAD[family])
    c = rtd_layout(c)
    m = RTDModel(c, generator_config(c, 16, 1, 2, 24))
    randomize(m, 1)
    return m.eval()


def _inputs(family: str = "bert") -> dict:
    b = batch(family)
    return {k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.fixture(scope="module")
def bert_rtd(tmp_path_factory):
    """A BERT-family RTD model with E (24) != H (32) != H_g (16), saved by save_rtd."""
    tok = tmp_path_factory.mktemp("tok")
    m = _rtd("bert", tok, embedding_size=24)
    out = tmp_path_factory.mktemp("electra") / "final"
    save_rtd(m, out, tokenizer_dir=tok)
    return m, out


def test_bert_discriminator_is_electra_for_pretraining(bert_rtd):
    m, out = bert_rtd
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "electra" and cfg["architectures"] == ["ElectraForPreTraining"]
    assert saved_head(out) == "discriminator" and detect_kind(out).name == "features"   # features / export read its encoder
    assert cfg["embedding_size"] == 24 and not any(k.startswith(("bert.", "cls.")) or "pooler" in k
                                                   for k in read_weights(out))
    x = _inputs()
    with torch.no_grad():
        ours = m.discriminator_logits(x["input_ids"], x["attention_mask"], x["token_type_ids"])
        theirs = transformers.AutoModelForPreTraining.from_pretrained(out).eval()
        assert type(theirs).__name__ == "ElectraForPreTraining"
        real = x["attention_mask"].bool()                    # bertcli leaves padding positions at 0
        torch.testing.assert_close(theirs(**x).logits[real], ours[real], atol=1e-5, rtol=1e-4)
        hidden = m.encoder(x["input_ids"], x["attention_mask"], x["token_type_ids"]).padded()
        base = transformers.AutoModel.from_pretrained(out).eval()(**x).last_hidden_state
        torch.testing.assert_close(base[real], hidden[real], atol=1e-5, rtol=1e-4)
        cls = transformers.AutoModelForSequenceClassification.from_pretrained(out, num_labels=3).eval()
        assert type(cls).__name__ == "ElectraForSequenceClassification"
        torch.testing.assert_close(cls.electra(**x).last_hidden_state[real], hidden[real], atol=1e-5, rtol=1e-4)
        # and back: bertcli reads the Electra directory as the same discriminator
        disc, report = load_checkpoint(out, "discriminator")
        assert not report.fresh and disc.config.layout == "electra"
        torch.testing.assert_close(disc(**x), ours, atol=1e-6, rtol=1e-5)


def test_bert_generator_is_electra_for_masked_lm(bert_rtd):
    m, out = bert_rtd
    gen_dir = out / "generator"
    cfg = json.loads((gen_dir / "config.json").read_text())
    assert cfg["architectures"] == ["ElectraForMaskedLM"] and cfg["hidden_size"] == 16
    x = _inputs()
    pos = batch("bert")["mlm_positions"]
    with torch.no_grad():
        ours = m.generator_logits(x["input_ids"], x["attention_mask"], x["token_type_ids"], pos)
        theirs = transformers.AutoModelForMaskedLM.from_pretrained(gen_dir).eval()(**x).logits
        torch.testing.assert_close(theirs.reshape(-1, theirs.shape[-1])[pos], ours, atol=1e-5, rtol=1e-4)
        back, report = load_checkpoint(gen_dir)
        assert not report.fresh
        torch.testing.assert_close(back(**x, mlm_positions=pos).mlm_logits, ours, atol=1e-6, rtol=1e-5)


def test_electra_classifier_loads_both_ways(tmp_path):
    """transformers' ElectraForSequenceClassification (E != H) in bertcli, and bertcli's Electra
    classifier in transformers: the same logits (dense -> gelu -> out_proj on [CLS], no pooler)."""
    x = _inputs()
    torch.manual_seed(2)
    hf_cfg = transformers.ElectraConfig(vocab_size=VOCAB, embedding_size=24, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=37, max_position_embeddings=40,
                                        num_labels=3)
    theirs = transformers.ElectraForSequenceClassification(hf_cfg).eval()
    randomize(theirs, 3)
    theirs.save_pretrained(tmp_path / "hf")
    ours, report = load_checkpoint(tmp_path / "hf", "classification")
    assert isinstance(ours, SequenceClassifier) and not report.fresh and ours.config.labels is not None
    with torch.no_grad():
        want = theirs(**x).logits
        torch.testing.assert_close(ours(**x), want, atol=1e-5, rtol=1e-4)
        pre = transformers.ElectraForPreTraining(hf_cfg).eval()   # and transformers' discriminator
        randomize(pre, 5)
        pre.save_pretrained(tmp_path / "disc")
        disc = load_checkpoint(tmp_path / "disc", "discriminator")[0]
        real = x["attention_mask"].bool()
        torch.testing.assert_close(disc(**x)[real], pre(**x).logits[real], atol=1e-5, rtol=1e-4)
        tagger = transformers.ElectraForTokenClassification(hf_cfg).eval()   # per-token heads: no pooler either
        randomize(tagger, 6)
        tagger.save_pretrained(tmp_path / "tagger")
        mine = load_checkpoint(tmp_path / "tagger", "token")[0]
        torch.testing.assert_close(mine(**x)[real], tagger(**x).logits[real], atol=1e-5, rtol=1e-4)
        randomize(ours, 4)                                   # bertcli's own weights, written and read back
        save_checkpoint(ours, tmp_path / "ours")
        again = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "ours").eval()
        assert type(again).__name__ == "ElectraForSequenceClassification"
        torch.testing.assert_close(again(**x).logits, ours(**x), atol=1e-5, rtol=1e-4)


def test_roberta_discriminator_is_its_own_checkpoint_with_bertcli_rtd_head(tmp_path):
    m = _rtd("roberta", tmp_path / "tok")
    assert m.config.layout == ""
    save_rtd(m, tmp_path / "final", tokenizer_dir=tmp_path / "tok")
    cfg = json.loads((tmp_path / "final" / "config.json").read_text())
    assert cfg["model_type"] == "roberta"
    stored = set(read_weights(tmp_path / "final"))          # the encoder alone: no MLM filler, the RTD head ...
    assert all(k.startswith("roberta.") for k in stored) and "roberta.embeddings.word_embeddings.weight" in stored
    assert (tmp_path / "final" / RTD_HEAD).is_file()        # ... is bertcli's own file
    assert saved_head(tmp_path / "final") == "discriminator" and detect_kind(tmp_path / "final").name == "features"
    x = _inputs("roberta")
    with torch.no_grad():
        want = m.discriminator_logits(x["input_ids"], x["attention_mask"], None)
        disc, report = load_checkpoint(tmp_path / "final", "discriminator")
        assert not report.fresh
        torch.testing.assert_close(disc(x["input_ids"], x["attention_mask"]), want, atol=1e-6, rtol=1e-5)
        hidden = m.encoder(x["input_ids"], x["attention_mask"], None).padded()
        base = transformers.AutoModel.from_pretrained(tmp_path / "final", add_pooling_layer=False).eval()
        real = x["attention_mask"].bool()
        torch.testing.assert_close(base(input_ids=x["input_ids"], attention_mask=x["attention_mask"])
                                   .last_hidden_state[real], hidden[real], atol=1e-5, rtol=1e-4)


def test_pre_ln_bert_is_written_in_its_own_layout():
    """transformers' Electra has post-LN layers only: a pre-LN BERT RTD model keeps the BERT
    layout (and rtd_head.safetensors), and an Electra-layout pre-LN config is refused."""
    c = encoder_config(tiny_section("bert", norm="pre"), VOCAB, 0)
    assert rtd_layout(c).layout == "" and rtd_layout(c.replace(norm="post")).layout == "electra"
    with pytest.raises(UserError, match="post-LN layers only"):
        c.replace(layout="electra").validate()
