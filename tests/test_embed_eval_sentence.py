"""sentence-transformers directories: what bertcli writes loads in sentence-transformers 6.x with
the same embeddings as bertcli's Embedder (1e-5); what sentence-transformers writes (MiniLM-style:
a BertModel with 1_Pooling, at the root or in 0_Transformer) is read with its pooling; the ONNX
export of such a directory gives the same vectors (1e-4). All models are built locally."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from finetune_fixtures import tiny_checkpoint

from bertcli.core.errors import UserError
from bertcli.model.pooling import Pooling
from bertcli.model.sentence import read_sentence_dir, write_sentence_dir
from bertcli.serve.evaluate_embed import Embedder

CORPUS = ["the river runs past the old mill", "a dog chased the red ball across the park",
          "prices rose sharply in the city markets today", "she reads a book by the window every night",
          "the team won the final match after extra time", "rain is expected over the mountains tomorrow"] * 4
TEXTS = ["the dog runs", "a book by the river", "prices of the match", "x",
         " ".join(CORPUS[:6])]                                     # longer than max_seq_length: truncated alike


def st_encode(path, texts):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu")
    return model, model.encode(texts, convert_to_numpy=True, batch_size=2)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("st")
    return {kind: tiny_checkpoint(root / kind, CORPUS, kind=kind, hidden=32, init_range=0.2)
            for kind in ("wordpiece", "bpe")}


@pytest.mark.parametrize("kind,mode,normalize", [("wordpiece", "mean", True), ("wordpiece", "cls", False),
                                                 ("bpe", "mean", False), ("wordpiece", "max", True)])
def test_sentence_transformers_loads_what_bertcli_writes(ckpts, tmp_path, kind, mode, normalize):
    path = tmp_path / "model"
    shutil.copytree(ckpts[kind], path)
    write_sentence_dir(path, Pooling(mode, normalize, 32), max_seq_length=16)
    model, want = st_encode(path, TEXTS)
    assert model.max_seq_length == 16
    e = Embedder.load(path, device="cpu", batch_size=2)
    assert (e.pooling.mode, e.pooling.normalize, e.max_seq_length) == (mode, normalize, 16)
    got = e.encode(TEXTS)
    assert got.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.abs(got[0] - got[1]).max() > 1e-2                   # the texts get different vectors
    if normalize:
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def minilm_style(tmp_path, mode="mean"):
    """A directory as sentence-transformers 6.x saves a BertModel + Pooling + Normalize."""
    import transformers as tf
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling as StPooling

    base = tmp_path / "bert"
    tiny_checkpoint(base, CORPUS, hidden=32, init_range=0.2)
    tf.BertModel.from_pretrained(base).save_pretrained(base)       # a bare BertModel, as MiniLM's
    (base / "model.safetensors.index.json").unlink(missing_ok=True)
    t = Transformer(str(base), max_seq_length=24)
    st = SentenceTransformer(modules=[t, StPooling(32, mode), Normalize()], device="cpu")
    out = tmp_path / "minilm"
    st.save(str(out))
    return out


def test_reads_a_minilm_style_directory_at_the_root_and_in_0_transformer(tmp_path):
    path = minilm_style(tmp_path, "cls")
    st = read_sentence_dir(path)
    assert (st.pooling.mode, st.pooling.normalize, st.pooling.dim, st.encoder) == ("cls", True, 32, path)
    _, want = st_encode(path, TEXTS)
    e = Embedder.load(path, device="cpu")
    np.testing.assert_allclose(e.encode(TEXTS), want, atol=1e-5)
    # older sentence-transformers: the transformer's files in 0_Transformer/, pooling keys as booleans
    old = tmp_path / "old"
    (old / "0_Transformer").mkdir(parents=True)
    shutil.copytree(path / "1_Pooling", old / "1_Pooling")
    shutil.copytree(path / "2_Normalize", old / "2_Normalize")
    for f in path.iterdir():
        if f.is_file() and f.name != "modules.json":
            shutil.copy(f, old / "0_Transformer" / f.name)
    (old / "0_Transformer" / "sentence_bert_config.json").write_text('{"max_seq_length": 24, "do_lower_case": false}')
    mods = json.loads((path / "modules.json").read_text())
    mods[0]["path"], mods[0]["type"] = "0_Transformer", "sentence_transformers.models.Transformer"
    (old / "modules.json").write_text(json.dumps(mods))
    (old / "1_Pooling" / "config.json").write_text(json.dumps(Pooling("cls", False, 32).to_st_config()))
    st_old = read_sentence_dir(old)
    assert st_old.encoder == old / "0_Transformer" and st_old.max_seq_length == 24
    np.testing.assert_allclose(Embedder.load(old, device="cpu").encode(TEXTS), want, atol=1e-5)


def test_pooling_config_round_trip_and_strict_reading():
    for p in (Pooling("mean", False, 8), Pooling("cls", True, 8), Pooling("last-layer-mean", False, 8)):
        assert Pooling.from_st_config(p.to_st_config(), "x", p.normalize) == p
    assert Pooling("last-layer-mean").mode == "mean"
    assert Pooling.from_st_config({"embedding_dimension": 4, "pooling_mode": "max"}, "x").mode == "max"
    bad = [({"pooling_mode_mean_tokens": True}, "word_embedding_dimension"),
           ({"word_embedding_dimension": 4, "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}, "several"),
           ({"word_embedding_dimension": 4, "pooling_mode_lasttoken": True}, "'lasttoken' is not supported"),
           ({"word_embedding_dimension": 4}, "no pooling modes"),
           ({"word_embedding_dimension": 4, "pooling_mode_mean_tokens": "yes"}, "is not true or false"),
           ({"embedding_dimension": "4", "pooling_mode": "mean"}, "not a positive integer")]
    for config, needle in bad:
        with pytest.raises(UserError) as e:
            Pooling.from_st_config(config, "cfg.json")
        assert needle in e.value.what and e.value.where == "cfg.json"
    with pytest.raises(UserError, match="not one of"):
        Pooling("weighted")


def test_unsupported_modules_are_refused(ckpts, tmp_path):
    path = tmp_path / "m"
    shutil.copytree(ckpts["wordpiece"], path)
    write_sentence_dir(path, Pooling("mean", False, 32), 16)
    mods = json.loads((path / "modules.json").read_text())
    mods.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (path / "modules.json").write_text(json.dumps(mods))
    with pytest.raises(UserError, match="Dense' is not supported") as e:
        read_sentence_dir(path)
    assert e.value.where == str(path / "modules.json")
    (path / "modules.json").write_text(json.dumps(mods[:1]))
    with pytest.raises(UserError, match="Transformer -> Pooling"):
        read_sentence_dir(path)
    mods[1]["path"] = "../elsewhere"
    (path / "modules.json").write_text(json.dumps(mods[:2]))
    with pytest.raises(UserError, match="outside the directory"):
        read_sentence_dir(path)


def test_onnx_export_and_predict_give_the_same_vectors(ckpts, tmp_path):
    pytest.importorskip("onnxruntime")
    from bertcli.export.predictor import open_model
    from bertcli.export.run import run_export

    path = tmp_path / "model"
    shutil.copytree(ckpts["wordpiece"], path)
    write_sentence_dir(path, Pooling("mean", True, 32), max_seq_length=16)
    want = Embedder.load(path, device="cpu").encode(TEXTS)
    result = run_export(path, tmp_path / "bundle")                 # the task is read from modules.json
    assert result.passed and result.info["task"] == "embed"
    assert result.info["featurizer"] == {"max_seq_length": 16}
    assert [o["name"] for o in result.info["outputs"]] == ["sentence_embedding"]
    records = [(f"in:{i}", {"text": t}) for i, t in enumerate(TEXTS)]
    for model in (tmp_path / "bundle", path):                      # ONNX Runtime, then PyTorch
        p = open_model(model)
        assert p.task == "embed" and p.max_length == 16
        got = np.array([r["embedding"] for r in p.predict(records)])
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_export_task_embed_of_a_plain_checkpoint_is_raw_mean_pooling(ckpts, tmp_path):
    pytest.importorskip("onnxruntime")
    from bertcli.export.predictor import open_model
    from bertcli.export.run import run_export

    plain = ckpts["bpe"]                                            # no modules.json: mean, not normalized
    want = Embedder.load(plain, device="cpu").encode(TEXTS)
    assert np.abs(np.linalg.norm(want, axis=1) - 1).max() > 1e-2     # really not normalized
    result = run_export(plain, tmp_path / "bundle", task="embed")
    assert result.passed and result.info["task"] == "embed"
    p = open_model(tmp_path / "bundle")
    got = np.array([r["embedding"] for r in p.predict([(str(i), {"text": t}) for i, t in enumerate(TEXTS)])])
    np.testing.assert_allclose(got, want, atol=1e-4)
