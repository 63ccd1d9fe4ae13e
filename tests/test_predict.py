"""`bertcli predict`: PyTorch (the checkpoint) and ONNX Runtime (the bundle) give the same
predictions on every task of every family; input formats; streaming; the decoders against their
reference definitions (seqeval's entity chunking, brute-force span search)."""

from __future__ import annotations

import itertools
import json
import random
import shutil

import numpy as np
import pytest
import torch
from conftest import ONE_THREAD, assert_user_error
from test_export_util import FAMILIES, KINDS, SENTENCES, exported  # noqa: F401 (fixture)

from bertcli.export.predictor import open_model
from bertcli.tasks.tagging.schemes import entities

LONG = " ".join(SENTENCES * 3)   # over the tiny models' 64 positions: NER and QA need windows


def records(task: str, family: str) -> list[tuple[str, dict]]:
    mask = "<mask>" if family == "roberta" else "[MASK]"
    if task == "fill-mask":
        recs = [{"text": f"the {mask} sat on the mat"}, {"text": f"paris is the {mask} of {mask}"}]
    elif task == "question-answering":
        recs = [{"question": "which city is the capital of france", "context": SENTENCES[2]},
                {"question": "where did the dog run", "context": LONG, "id": "long"}]
    elif task == "token-classification":
        recs = [{"text": s} for s in SENTENCES[:3]] + [{"text": LONG}, {"tokens": LONG.split()}]
    else:
        recs = [{"text": s} for s in SENTENCES] + [{"text": SENTENCES[3], "text_pair": SENTENCES[2]}]
    return [(f"rec {i}", r) for i, r in enumerate(recs)]


def same(a, b, where=""):
    """Equal predictions: identical labels, ids, spans and texts; probabilities and vectors within 1e-5."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (where, a, b)
    else:
        assert a == b, (where, a, b)


@pytest.mark.parametrize("task", list(KINDS))
@pytest.mark.parametrize("family", FAMILIES)
def test_pytorch_and_onnx_runtime_give_the_same_predictions(exported, family, task):
    torch.set_num_threads(1)
    ckpt, bundle = exported[family, task]
    torch_p, onnx_p = open_model(ckpt, task=task, batch_size=3), open_model(bundle, batch_size=3)
    assert (torch_p.backend.name, onnx_p.backend.name, onnx_p.task) == ("torch", "onnx", task)
    recs = records(task, family)
    a, b = list(torch_p.predict(recs)), list(onnx_p.predict(recs))
    assert len(a) == len(recs)
    same(a, b)
    first = a[0]
    if task == "classification":
        assert first["label"] in ("negative", "positive") and abs(sum(first["probabilities"].values()) - 1) < 1e-5
    elif task == "fill-mask":
        assert [len(p["masks"]) for p in a] == [1, 2] and len(first["masks"][0]["candidates"]) == 5
    elif task == "features":
        assert len(first["embedding"]) == 32
    elif task == "token-classification":
        text = LONG
        assert len(a[3]["tags"]) == len(text.split()) == len(a[4]["tags"])    # every word once, windows or not
        for e in a[3]["entities"]:
            assert e["text"] == text[e["start"]:e["end"]] and e["text"].strip() == e["text"]
    else:
        for (_, rec), p in zip(recs, a):
            assert rec["context"][p["start"]:p["end"]] == p["answer"] != ""
        assert a[1]["id"] == "long"


def test_predict_streams_keeps_order_and_batching_does_not_change_results(exported):
    torch.set_num_threads(1)
    _, bundle = exported["bert", "classification"]
    p = open_model(bundle, batch_size=4)
    endless = ((f"gen {i}", {"text": SENTENCES[i % len(SENTENCES)] + " " * (i % 3)}) for i in itertools.count())
    first = list(itertools.islice(p.predict(endless, chunk=8), 20))   # an endless input: results still come
    one_by_one = open_model(bundle, batch_size=1)
    again = list(one_by_one.predict([(f"r{i}", {"text": SENTENCES[i % len(SENTENCES)]}) for i in range(20)]))
    same(first, again)


def test_cli_reads_every_format_and_writes_jsonl(cli, tmp_path, exported):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ckpt, bundle = exported["roberta", "classification"]
    texts = SENTENCES[:5]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n\n")
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (tmp_path / "in.csv").write_text("text,other\n" + "".join(f'"{t}",x\n' for t in texts))
    pq.write_table(pa.table({"text": texts}), tmp_path / "in.parquet")
    outs = {}
    for fmt, model in [("txt", bundle), ("csv", bundle / "model.onnx"), ("parquet", bundle), ("jsonl", ckpt)]:
        r = cli("predict", "-c", model, "--input", tmp_path / f"in.{fmt}", "--out", tmp_path / f"{fmt}.jsonl",
                "--batch-size", "2", env=ONE_THREAD)
        assert r.rc == 0, r.output
        assert "5 predictions" in r.stderr
        outs[fmt] = [json.loads(line) for line in (tmp_path / f"{fmt}.jsonl").read_text().splitlines()]
    assert [o["index"] for o in outs["txt"]] == list(range(5))
    for fmt in ("csv", "parquet", "jsonl"):
        same(outs["txt"], outs[fmt], fmt)


def test_inputs_that_do_not_match_the_tokenizer_are_refused(cli, tmp_path, exported):
    import onnx
    from onnx import TensorProto, helper

    _, bert_bundle = exported["bert", "classification"]
    roberta_ckpt, _ = exported["roberta", "classification"]
    (tmp_path / "in.txt").write_text("the cat sat on the mat\n")
    swapped = tmp_path / "swapped"
    shutil.copytree(bert_bundle, swapped)
    shutil.copyfile(roberta_ckpt / "tokenizer.json", swapped / "tokenizer.json")     # a bigger vocabulary
    shutil.copyfile(roberta_ckpt / "tokenizer_config.json", swapped / "tokenizer_config.json")
    r = cli("predict", "-c", swapped, "--input", tmp_path / "in.txt", env=ONE_THREAD)
    assert_user_error(r, "does not belong to this model")
    foreign = tmp_path / "foreign"
    shutil.copytree(bert_bundle, foreign)
    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["pixels"], ["logits"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(foreign / "model.onnx"))
    r = cli("predict", "-c", foreign / "model.onnx", "--input", tmp_path / "in.txt", env=ONE_THREAD)
    assert_user_error(r, "takes inputs pixels")
    r = cli("predict", "-c", bert_bundle, "--input", tmp_path / "missing.txt", env=ONE_THREAD)
    assert_user_error(r, "does not exist")


def test_entity_chunking_is_seqeval_s():
    from seqeval.metrics.sequence_labeling import get_entities

    rng = random.Random(0)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    for _ in range(300):
        seq = [rng.choice(tags) for _ in range(rng.randint(1, 12))]
        assert entities(seq) == get_entities(seq), seq


def test_answer_span_is_the_best_valid_span(exported):
    """One window: the decoder's span is the brute-force argmax of start + end over spans inside
    the context, end >= start, at most 30 tokens."""
    torch.set_num_threads(1)
    ckpt, _ = exported["bert", "question-answering"]
    p = open_model(ckpt)
    rec = {"question": "which city is the capital", "context": "paris is the capital of france and it was raining"}
    pred = next(p.predict([("x", dict(rec))]))
    enc = p.context().tokenizer.encode(rec["question"], rec["context"])
    feed = {"input_ids": np.array([enc.ids]), "attention_mask": np.ones((1, len(enc.ids)), dtype=np.int64),
            "token_type_ids": np.array([enc.type_ids])}
    out = p.backend.run(feed)
    s, e = out["start_logits"][0], out["end_logits"][0]
    inside = [i for i, sid in enumerate(enc.sequence_ids) if sid == 1]
    best = max((s[i] + e[j], i, j) for i in inside for j in inside if i <= j < i + 30)
    _, i, j = best
    assert (pred["start"], pred["end"]) == (enc.offsets[i][0], enc.offsets[j][1])
