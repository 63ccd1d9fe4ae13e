"""Serving speed without changing results: length-sorted batching gives the predictions of
unsorted batching (every task, both runtimes); the fused graph (ONNX Runtime's transformer
optimizer + bertcli's own fusions) is what the bundle holds and is verified against PyTorch; a
fusion that fails or changes the outputs leaves the plain graph; token_type_ids are a graph input
only where they can be other than 0; ORT's intra-op threads are set."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_export_util import FAMILIES, KINDS, SENTENCES, exported, make_checkpoint  # noqa: F401 (fixture)
from test_predict import LONG, same

from bertcli.export.predictor import open_model
from bertcli.export.run import run_export


def varied(task: str, family: str) -> list[tuple[str, dict]]:
    """Records whose lengths alternate short / long, so that sorting by length regroups the
    batches (NER and QA include windowed records: several windows per record)."""
    mask = "<mask>" if family == "roberta" else "[MASK]"
    short, long_ = SENTENCES[0], " ".join(SENTENCES[1:4])
    if task == "fill-mask":
        recs = [{"text": f"the {mask} sat"}, {"text": f"{long_} and the {mask} of {mask} is paris"},
                {"text": f"a {mask} ran"}, {"text": f"{long_} {mask} {long_}"}, {"text": f"{mask} it was raining"}]
    elif task == "question-answering":
        recs = [{"question": "which city", "context": long_}, {"question": "who sat", "context": short},
                {"question": "where did the dog run", "context": LONG, "id": "long"},
                {"question": "what jumps", "context": SENTENCES[7]}]
    elif task == "token-classification":
        recs = [{"text": short}, {"text": LONG}, {"text": SENTENCES[6]}, {"text": long_}, {"tokens": ["it", "was"]}]
    else:
        recs = [{"text": short}, {"text": long_}, {"text": SENTENCES[6]}, {"text": LONG},
                {"text": SENTENCES[3], "text_pair": long_}, {"text": "a dog"}]
    return [(f"rec {i}", r) for i, r in enumerate(recs)]


class Recording:
    """A backend wrapper that records every batch it runs: its shape and its rows."""

    def __init__(self, backend):
        self.backend, self.widths, self.groups = backend, [], []
        self.name, self.input_names = backend.name, backend.input_names

    def run(self, feed):
        self.widths.append(feed["input_ids"].shape)
        mask = feed["attention_mask"].astype(bool)
        self.groups.append(sorted(tuple(row[m].tolist()) for row, m in zip(feed["input_ids"], mask)))
        return self.backend.run(feed)


@pytest.mark.parametrize("task", list(KINDS))
@pytest.mark.parametrize("family", FAMILIES)
def test_length_sorted_batching_gives_the_unsorted_predictions(exported, family, task):
    """Same order, same labels / spans / tags, scores within 1e-5 (the batches differ, so the
    runtimes' reductions may be reordered), with PyTorch and ONNX Runtime; and sorting did
    regroup the windows into other batches, so the comparison is not of identical runs."""
    torch.set_num_threads(1)
    ckpt, bundle = exported[family, task]
    recs = varied(task, family)
    for path in (ckpt, bundle):
        runs = {}
        for sort in (False, True):
            p = open_model(path, task=task, batch_size=2)
            p.sort = sort
            p.backend = Recording(p.backend)
            runs[sort] = (list(p.predict(recs)), p.backend.groups)
        (plain, plain_groups), (fast, fast_groups) = runs[False], runs[True]
        assert len(fast) == len(recs)
        same(plain, fast, f"{path.name}")
        if task == "question-answering":
            assert fast[2]["id"] == "long"
        # the same windows, run in other batches; shortest first
        assert sorted(w for g in plain_groups for w in g) == sorted(w for g in fast_groups for w in g)
        assert plain_groups != fast_groups
        longest = [max(len(w) for w in g) for g in fast_groups]
        assert longest == sorted(longest)


def test_sorting_stays_inside_a_bounded_window(exported):
    """Records are sorted only within a chunk (memory stays bounded): with a chunk of one batch
    the batches are the unsorted ones, record for record; with the default chunk they are not."""
    _, bundle = exported["bert", "classification"]
    recs = varied("classification", "bert")
    shapes = {}
    for name, sort, chunk in (("unsorted", False, None), ("chunk of 2", True, 2), ("default", True, None)):
        p = open_model(bundle, batch_size=2)
        p.sort, p.backend = sort, Recording(p.backend)
        list(p.predict(recs, chunk=chunk))
        shapes[name] = p.backend.widths
    assert shapes["chunk of 2"] == shapes["unsorted"] != shapes["default"]


def test_the_bundle_holds_the_fused_graph_verified_against_pytorch(exported):
    """BERT / RoBERTa / ALBERT: attention and the residual layer norms are fused (ORT's contrib
    ops) and the fused graph passed the fp32 verification; ModernBERT's windowed attention is not
    the plain padding-masked pattern, so its attention stays unfused (and still verifies). The
    bundle gives PyTorch's outputs on a padded batch the verification did not see."""
    import onnx

    torch.set_num_threads(1)
    for family in FAMILIES:
        ckpt, bundle = exported[family, "classification"]
        info = __import__("json").loads((bundle / "export_info.json").read_text())
        opt, check = info["optimization"], info["verification"]["fp32"]
        assert check["passed"] and check["max_abs_diff"]["logits"] <= 1e-4
        ops = {n.op_type for n in onnx.load(str(bundle / "model.onnx")).graph.node}
        assert opt["applied"] and sum(opt["fused"].values()) > 0, opt
        if family == "modernbert":
            assert "Attention" not in opt["fused"] and "Attention" not in ops
        else:
            assert opt["fused"]["Attention"] == 2 and opt["fused"]["SkipLayerNormalization"] == 5, opt
            assert {"Attention", "SkipLayerNormalization"} <= ops and "Softmax" not in ops
        torch_p, onnx_p = open_model(ckpt, task="classification"), open_model(bundle)
        rng = np.random.default_rng(1)
        ids = rng.integers(5, 100, (3, 24)).astype(np.int64)
        mask = np.ones_like(ids)
        mask[1, 9:], mask[2, 2:] = 0, 0
        types = np.zeros_like(ids)
        types[:, 12:] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types * mask}
        feed = {k: v for k, v in feed.items() if k in onnx_p.backend.input_names}
        want, got = torch_p.backend.run(feed)["logits"], onnx_p.backend.run(feed)["logits"]
        assert np.abs(want - got).max() < 1e-4


def _break(monkeypatch, how: str):
    from onnx import helper

    from bertcli.export import fuse

    real = fuse.fuse_attention
    if how == "raise":
        def broken(proto, num_heads, hidden):
            raise RuntimeError("simulated fusion failure")

        def failing_optimizer(*a, **k):
            raise ValueError("simulated optimizer failure")

        monkeypatch.setattr("onnxruntime.transformers.optimizer.optimize_model", failing_optimizer)
    else:
        def broken(proto, num_heads, hidden):     # a fusion that runs but computes something else
            n = real(proto, num_heads, hidden)
            for node in proto.graph.node:
                if node.op_type == "Attention":
                    for a in node.attribute:
                        if a.name == "scale":
                            node.attribute.remove(a)
                            node.attribute.append(helper.make_attribute("scale", a.f * 3))
                            break
            return n

    monkeypatch.setattr(fuse, "fuse_attention", broken)


@pytest.mark.parametrize("how", ["raise", "wrong"])
def test_a_fusion_that_fails_or_changes_outputs_leaves_the_plain_graph(tmp_path, monkeypatch, how):
    """A failing optimizer / fusion, or a fused graph outside the fp32 tolerance: the export still
    succeeds with the unfused graph, verified, and export_info.json says why."""
    import onnx

    torch.set_num_threads(1)
    ckpt = make_checkpoint(tmp_path, "bert", "classification")
    _break(monkeypatch, how)
    r = run_export(ckpt, tmp_path / "out")
    assert r.passed
    opt = r.info["optimization"]
    ops = {n.op_type for n in onnx.load(str(r.out / "model.onnx")).graph.node}
    assert "Attention" not in ops and "Softmax" in ops
    assert r.info["verification"]["fp32"]["passed"]
    assert list(r.out.glob("*fused*")) == []
    if how == "raise":
        # both failures named; nothing was fused
        assert "optimizer failed (ValueError: simulated optimizer failure)" in opt["note"]
        assert "fusions failed (RuntimeError: simulated fusion failure)" in opt["note"]
        assert not opt["applied"] and opt["fused"] == {}
    else:
        assert not opt["applied"] and opt["fused"] == {}
        assert "differs from PyTorch" in opt["note"] and "plain graph is kept" in opt["note"]
        assert not opt["rejected_check"]["passed"]


def test_token_type_ids_are_an_input_only_where_they_can_be_nonzero(exported, tmp_path):
    """RoBERTa and ModernBERT read no token types, a BERT with type_vocab_size 1 has only type 0:
    their graphs take input_ids and attention_mask; BERT and ALBERT (2 types) take token_type_ids
    too. predict feeds each graph exactly its inputs, and a sentence pair still predicts as the
    checkpoint does."""
    import onnxruntime as ort

    def inputs(bundle):
        return [i.name for i in ort.InferenceSession(str(bundle / "model.onnx"),
                                                     providers=["CPUExecutionProvider"]).get_inputs()]

    for family, want in (("roberta", 2), ("modernbert", 2), ("bert", 3), ("albert", 3)):
        assert inputs(exported[family, "classification"][1]) == ["input_ids", "attention_mask", "token_type_ids"][:want]
    torch.set_num_threads(1)
    ckpt = make_checkpoint(tmp_path, "bert", "classification", type_vocab_size=1)
    r = run_export(ckpt, tmp_path / "one-type")
    assert r.passed and [i["name"] for i in r.info["inputs"]] == ["input_ids", "attention_mask"]
    recs = [("p", {"text": SENTENCES[3], "text_pair": SENTENCES[2]}), ("s", {"text": SENTENCES[0]})]
    same(list(open_model(ckpt, task="classification").predict(recs)), list(open_model(r.out).predict(recs)))


def test_onnx_runtime_threads(exported):
    from bertcli.export.backend import OrtBackend, ort_threads

    _, bundle = exported["bert", "classification"]
    b = OrtBackend(bundle / "model.onnx", threads=1)
    assert b.session.get_session_options().intra_op_num_threads == 1
    assert ort_threads(3) == 3 and ort_threads(None) >= 1
    assert open_model(bundle, threads=2).backend.session.get_session_options().intra_op_num_threads == 2
