"""`bertcli export` in process: every head kind of every family, checked against PyTorch by an
ONNX Runtime session of the test's own (not the exporter's verification), on shapes the graph
was not traced with; the graph's contract; transformers on the same weights; fp16, opset 17,
external data and a failing verification."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_export_util import FAMILIES, KINDS, exported, make_checkpoint  # noqa: F401 (fixture)

from bertcli.export.run import run_export, sha256
from bertcli.model.checkpoint import load_checkpoint

HEAD_OF = {"fill-mask": "pretraining", "classification": "classification", "features": "classification",
           "token-classification": "token", "question-answering": "qa"}


def reference(model, task: str, ids, mask, types) -> dict:
    """bertcli's own eager forward (unpadded dense layers, sparse last layer where it applies)."""
    with torch.no_grad():
        if task == "fill-mask":
            return {"logits": model(ids, mask, types).mlm_logits}
        if task == "classification":
            return {"logits": model(ids, mask, types)}
        if task == "features":
            out = model.encoder(ids, mask, types)
            pooled = {"pooler_output": model.encoder.pool(out)} if model.encoder.pooler is not None else {}
            return {"last_hidden_state": out.padded(), **pooled}
        if task == "token-classification":
            return {"logits": model(ids, mask, types)}
        start, end = model(ids, mask, types)
        return {"start_logits": start, "end_logits": end}


def batches(vocab: int, pad: int, longest: int, family: str):
    g = torch.Generator().manual_seed(1)
    for lengths in [(3,), (19, 11, 4), (longest, 7)]:
        B, T = len(lengths), max(lengths)
        ids = torch.randint(5, vocab, (B, T), generator=g)
        mask = torch.zeros(B, T, dtype=torch.long)
        types = torch.zeros(B, T, dtype=torch.long)
        for b, n in enumerate(lengths):
            mask[b, :n] = 1
            ids[b, n:] = pad
            if family != "roberta":
                types[b, n // 2:n] = 1
        yield ids, mask, types


@pytest.mark.parametrize("task", list(KINDS))
@pytest.mark.parametrize("family", FAMILIES)
def test_every_kind_of_every_family_runs_in_onnx_runtime_as_in_pytorch(exported, family, task):
    import onnx
    import onnxruntime as ort

    ckpt, bundle = exported[family, task]
    model, _ = load_checkpoint(ckpt, head=HEAD_OF[task])
    c = model.config
    graph = onnx.load(str(bundle / "model.onnx"))
    # the contract: opset >= 17, standard operators only (ONNX Runtime's contrib ops where the
    # graph was fused; --no-optimize keeps it standard), dynamic batch and sequence axes
    assert next(o.version for o in graph.opset_import if o.domain == "") >= 17
    fused = json.loads((bundle / "export_info.json").read_text())["optimization"]["applied"]
    domains = {n.domain for n in graph.graph.node}
    assert domains <= ({"", "com.microsoft"} if fused else {""}), domains
    names = [i.name for i in graph.graph.input]
    assert names == (["input_ids", "attention_mask"] + (["token_type_ids"] if family in ("bert", "albert") else []))
    for i in graph.graph.input:
        assert [d.dim_param for d in i.type.tensor_type.shape.dim] == ["batch", "sequence"]
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    longest = c.max_position_embeddings - c.position_offset
    for ids, mask, types in batches(c.vocab_size, c.pad_token_id, longest, family):
        feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()}
        got = dict(zip(outputs, session.run(None, {n: feed[n] for n in names})))
        want = reference(model, task, ids, mask, types)
        assert set(got) == set(want)
        real = mask.bool().numpy()
        for name, g in got.items():
            w = want[name].numpy()
            if w.ndim >= 2 and w.shape[:2] == real.shape:
                w, g = w[real], g[real]                       # padded positions are never read
            assert g.shape == w.shape, name
            assert np.abs(g - w).max() < 1e-4, (name, ids.shape, np.abs(g - w).max())


def test_bundle_records_what_was_exported_and_from_what(exported):
    ckpt, bundle = exported["bert", "classification"]
    info = json.loads((bundle / "export_info.json").read_text())
    assert info["task"] == "classification" and info["precision"] == "fp32" and info["opset"] >= 17
    assert [i["name"] for i in info["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert info["outputs"] == [{"name": "logits", "type": "float", "shape": ["batch", 2]}]
    assert info["labels"] == ["negative", "positive"]
    assert info["source"]["sha256"]["model.safetensors"] == sha256(ckpt / "model.safetensors")
    for name, size in info["files"].items():
        if size is not None:
            assert (bundle / name).stat().st_size == size
    check = info["verification"]["fp32"]
    assert check["passed"] and check["verified"] and check["max_abs_diff"]["logits"] <= 1e-4
    assert len(check["batches"]) >= 4
    config = json.loads((bundle / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    assert (bundle / "tokenizer.json").is_file()
    assert not list(bundle.parent.glob(".*tmp*"))             # no temporary directory left behind


@pytest.mark.parametrize("family", FAMILIES)
def test_onnx_graph_computes_what_transformers_computes(exported, family):
    """Both ways: transformers loads the checkpoint bertcli wrote; ONNX Runtime runs the export."""
    import onnxruntime as ort
    import transformers

    ckpt, bundle = exported[family, "classification"]
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(ckpt).eval()
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    c = hf.config
    ids, mask, types = list(batches(c.vocab_size, c.pad_token_id, 20, family))[1]   # padded, 3 x 19
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits.numpy()
    feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()}
    got = session.run(None, {n: feed[n] for n in names})[0]
    assert np.abs(got - want).max() < 1e-4


def test_fp16_opset17_and_external_data(tmp_path, monkeypatch):
    """fp16 weights (verified on this CPU runtime within the stated fp16 tolerance), the opset-17
    conversion, and weights in model.onnx.data (forced here by lowering the 2 GB threshold)."""
    import onnx

    from bertcli.export import graph
    from bertcli.export.predictor import open_model

    torch.set_num_threads(1)
    ckpt = make_checkpoint(tmp_path, "bert", "classification")
    monkeypatch.setattr(graph, "EXTERNAL_DATA_BYTES", 0)
    r = run_export(ckpt, tmp_path / "fp16", fp16=True, opset=17)
    assert r.passed
    assert (r.out / "model.onnx.data").is_file() and "model.onnx.data" in r.info["files"]
    proto = onnx.load(str(r.out / "model.onnx"))
    assert next(o.version for o in proto.opset_import if o.domain == "") == 17
    kinds = {onnx.TensorProto.DataType.Name(t.data_type) for t in proto.graph.initializer if t.dims and len(t.dims) == 2}
    assert kinds == {"FLOAT16"}, kinds
    check = r.info["verification"]["fp16"]
    if check["verified"]:  # this runtime runs fp16 on the CPU; otherwise the note says so
        assert 0 < check["max_abs_diff"]["logits"] <= check["tolerance"]["logits"]
        assert check["argmax_agreement"]["logits"] == 1.0
    else:
        assert "not verified" in check["note"]
    # the bundle still serves predictions (external data found next to model.onnx)
    preds = list(open_model(r.out).predict([("x", {"text": "the cat sat on the mat"})]))
    assert preds[0]["label"] in ("negative", "positive")


def test_failed_verification_leaves_no_bundle(tmp_path, monkeypatch):
    from bertcli.export import verify

    torch.set_num_threads(1)
    ckpt = make_checkpoint(tmp_path, "roberta", "classification")
    monkeypatch.setitem(verify.TOLERANCE, "fp32", ("absolute", -1.0))   # nothing can pass
    r = run_export(ckpt, tmp_path / "out")
    assert not r.passed and not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
