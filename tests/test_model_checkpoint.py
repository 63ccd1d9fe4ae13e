"""Checkpoint directories: encoder-only and head-less transformers directories, settings that
transformers cannot express, legacy names, and every way a directory can be wrong."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from helpers.models import PAD, VOCAB, batch, randomize, tiny_section
from safetensors.torch import load_file, save_file

from bertcli.core.errors import UserError
from bertcli.model import build_model, load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)

TOL = dict(atol=1e-5, rtol=0)


def small_bert(**extra) -> tf.BertConfig:
    return tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=37, max_position_embeddings=40, **extra)


def real_hidden(m, b):
    with torch.no_grad():
        return m.encoder(b["input_ids"], b["attention_mask"], b["token_type_ids"]).padded()[b["attention_mask"].bool()]


def saved(tmp_path, name, model):
    model.save_pretrained(tmp_path / name)
    return tmp_path / name


@pytest.mark.parametrize("pooler", [True, False])
def test_encoder_only_directory_loads_with_fresh_heads_listed(tmp_path, pooler):
    torch.manual_seed(0)
    hf = tf.BertModel(small_bert(), add_pooling_layer=pooler).eval()
    randomize(hf, 1)
    path = saved(tmp_path, "enc", hf)
    assert not any(k.startswith("bert.") for k in load_file(path / "model.safetensors"))  # no prefix
    ours, report = load_checkpoint(path)
    expected = {"cls.predictions.transform.dense.weight", "cls.predictions.bias", "cls.seq_relationship.weight"}
    assert expected <= set(report.fresh)
    assert ("pooler.dense.weight" in report.fresh) == (not pooler)  # named as in that directory
    assert any("initialized fresh" in w for w in report.warnings)
    b = batch("bert")
    theirs = hf(**{k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).last_hidden_state
    torch.testing.assert_close(real_hidden(ours, b), theirs[b["attention_mask"].bool()], **TOL)


def test_pretraining_checkpoint_as_classifier_and_back(tmp_path):
    pre = build_model(tiny_section("roberta"), VOCAB, PAD["roberta"])
    save_checkpoint(pre, tmp_path / "pre")
    clf, report = load_checkpoint(tmp_path / "pre", head="classification", labels=["neg", "pos"])
    assert set(report.fresh) == {"classifier.dense.weight", "classifier.dense.bias",
                                 "classifier.out_proj.weight", "classifier.out_proj.bias"}
    assert "lm_head.bias" in report.unused
    torch.testing.assert_close(clf.encoder.embeddings.word.weight, pre.encoder.embeddings.word.weight)
    save_checkpoint(clf, tmp_path / "clf")
    config = json.loads((tmp_path / "clf" / "config.json").read_text())
    assert config["architectures"] == ["RobertaForSequenceClassification"]
    assert config["id2label"] == {"0": "neg", "1": "pos"}
    again, report = load_checkpoint(tmp_path / "clf", head="classification")
    assert again.config.labels == ("neg", "pos") and report.fresh == []
    same, _ = load_checkpoint(tmp_path / "clf", head="classification", num_labels=2)
    assert same.config.labels == ("neg", "pos")
    # A fine-tuned classifier reused for a task with another label count: fresh classifier.
    _, report = load_checkpoint(tmp_path / "clf", head="classification", num_labels=3)
    assert "classifier.out_proj.weight" in report.fresh


@pytest.mark.parametrize("family,change,groups", [
    ("bert", dict(num_hidden_layers=4, sharing="all", num_hidden_groups=2), None),
    ("albert", dict(sharing="attention", num_hidden_groups=1), 4),
    ("albert", dict(sharing="none", num_hidden_groups=1), 4),
], ids=["bert-shared", "albert-attention-only", "albert-unshared"])
def test_sharing_round_trips_and_transformers_computes_the_same(tmp_path, family, change, groups):
    ours = build_model(tiny_section(family, **change), VOCAB, PAD[family]).eval()
    randomize(ours, 3)
    notes = save_checkpoint(ours, tmp_path)
    assert any("unrolled" in n for n in notes) == (change["sharing"] not in ("none", "all") or family == "bert")
    config = json.loads((tmp_path / "config.json").read_text())
    if groups:
        assert config["num_hidden_groups"] == groups
    back, report = load_checkpoint(tmp_path)
    assert back.config == ours.config and report.notes == []
    assert len(back.encoder.attention) == len(ours.encoder.attention)
    hf = tf.AutoModelForPreTraining.from_pretrained(tmp_path).eval()
    b = batch(family)
    with torch.no_grad():
        torch.testing.assert_close(hf(**{k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
                                   .prediction_logits.reshape(-1, VOCAB)[b["mlm_positions"]],
                                   back(**b).mlm_logits, **TOL)
    # Copies trained apart (e.g. fine-tuned in transformers) load without sharing, with a note.
    if family == "bert":
        state = load_file(tmp_path / "model.safetensors")
        state["bert.encoder.layer.1.output.dense.bias"] += 1.0
        save_file(state, tmp_path / "model.safetensors")
        (tmp_path / "bertcli-manifest.json").unlink()   # changed on purpose, as the manifest check's fix says
        apart, report = load_checkpoint(tmp_path)
        assert apart.config.sharing == "none" and len(apart.encoder.ffn) == 4
        assert any("differ" in n for n in report.notes)


def test_pre_ln_round_trips_in_bertcli_and_is_flagged(tmp_path):
    ours = build_model(tiny_section("bert", norm="pre", embedding_size=16), VOCAB, 0).eval()
    randomize(ours, 4)
    notes = save_checkpoint(ours, tmp_path)
    assert any("pre-LN" in n for n in notes) and any("embedding_size" in n for n in notes)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["bertcli"]["norm"] == "pre" and config["bertcli"]["embedding_size"] == 16
    assert "bert.encoder.final_layer_norm.weight" in load_file(tmp_path / "model.safetensors")
    back, _ = load_checkpoint(tmp_path)
    b = batch("bert")
    assert back.config.norm == "pre" and back.encoder.proj is not None
    torch.testing.assert_close(back(**b).mlm_logits, ours(**b).mlm_logits, atol=0, rtol=0)


def test_legacy_names_tied_decoder_and_half_precision_load(tmp_path):
    torch.manual_seed(0)
    hf = tf.BertForPreTraining(small_bert()).eval()
    randomize(hf, 5)
    path = saved(tmp_path, "hf", hf)
    state = load_file(path / "model.safetensors")
    legacy = {}
    for k, v in state.items():
        k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        legacy[k] = v.half()
    legacy["cls.predictions.decoder.weight"] = legacy["bert.embeddings.word_embeddings.weight"].clone()
    legacy["cls.predictions.decoder.bias"] = legacy.pop("cls.predictions.bias")
    legacy["bert.embeddings.position_ids"] = torch.arange(40)[None]
    save_file(legacy, path / "model.safetensors")
    ours, report = load_checkpoint(path)
    assert report.fresh == [] and report.unused == [] and report.notes == []
    assert ours.encoder.embeddings.norm.weight.dtype == torch.float32
    b = batch("bert")
    with torch.no_grad():
        want = hf(**{k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).seq_relationship_logits
    torch.testing.assert_close(ours(**b).pair_logits, want, atol=0.05, rtol=0.01)  # fp16 weights


def test_tokenizer_files_are_copied_and_compiled_models_saved(tmp_path):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    (tok / "vocab.txt").write_text("[PAD]\n")
    model = build_model(tiny_section("albert"), VOCAB, 0)
    save_checkpoint(torch.compile(model), tmp_path / "ckpt", tokenizer_dir=tok)
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == ["bertcli-manifest.json", "config.json", "model.safetensors", "tokenizer.json",
                     "vocab.txt"]  # no temporaries
    with pytest.raises(UserError, match="no tokenizer files"):
        save_checkpoint(model, tmp_path / "other", tokenizer_dir=tmp_path)


def _break(path, what):
    config = json.loads((path / "config.json").read_text())
    if what == "model_type":
        config["model_type"] = "deberta"
    elif what == "shape":
        config["intermediate_size"] = 40
    elif what == "fewer_layers":
        config["num_hidden_layers"] = 1
    elif what == "more_layers":
        config["num_hidden_layers"] = 3
    elif what == "no_weights":
        (path / "model.safetensors").unlink()
    elif what == "json":
        (path / "config.json").write_text("{not json")
        return
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("what,message", [
    ("model_type", "unsupported model_type 'deberta'"),
    ("shape", r"has shape \(37, 32\) but config.json describes \(40, 32\)"),
    ("fewer_layers", "encoder tensors that config.json does not describe"),
    ("more_layers", "encoder tensors described by config.json are missing"),
    ("no_weights", "no model.safetensors"),
    ("json", "not valid JSON"),
])
def test_broken_directories_are_user_errors(tmp_path, what, message):
    save_checkpoint(build_model(tiny_section("bert"), VOCAB, 0), tmp_path)
    _break(tmp_path, what)
    with pytest.raises(UserError, match=message) as info:
        load_checkpoint(tmp_path)
    assert info.value.where and str(tmp_path) in info.value.where
