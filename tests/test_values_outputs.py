"""Issue 33, causes 1 and 5: a huge numeric value is one message, not an OverflowError; a model
whose outputs are not finite is refused, not written as a result.

Each case runs the real CLI and asserts exit 2, one message, no traceback, every file present
before the command still there byte for byte, and no output. The broken model is a tiny
checkpoint whose LayerNorm weights are set to NaN (re-signed in its manifest, as a diverged
run would have saved it), so no case trains for long.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_user_error, run_cli
from safety_helpers import FT, assert_kept, snapshot, write_classify, write_texts

from bertcli.core.testhooks import STOP_ENV, STOP_EXIT


def poison(directory: Path, value: float = float("nan")) -> Path:
    """Set every LayerNorm weight of the checkpoint to `value`, and sign the result."""
    from safetensors.torch import load_file, save_file

    from bertcli.model.manifest import write_manifest

    path = directory / "model.safetensors"
    tensors = load_file(path)
    for name, t in tensors.items():
        if "LayerNorm.weight" in name:
            t.fill_(value)
    save_file(tensors, path, metadata={"format": "pt"})
    write_manifest(directory)
    return directory


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    import torch
    from helpers.export import make_checkpoint

    torch.set_num_threads(1)
    return poison(make_checkpoint(tmp_path_factory.mktemp("broken"), "bert", "pretraining"))


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    from helpers.export import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("healthy"), "bert", "pretraining")


def assert_refused(result, before: dict, root: Path, *needles: str) -> None:
    assert_user_error(result, *needles)
    assert result.stderr.count("error:") == 1, result.stderr
    assert_kept(before, root)
    assert set(snapshot(root)) == set(before), f"new files: {set(snapshot(root)) - set(before)}"


# ------------------------------------------------------------------ cause 1: huge numeric values
@pytest.mark.parametrize("argv,needles", [
    (["finetune", "embed", "-c", "{ck}", "--train", "{texts}", "--unsupervised", "--epochs", "1e308"],
     ["--epochs: must be <= 1000000.0, got 1e+308", "at most 1000000.0"]),
    (["distill", "--teacher-task", "classify", "-c", "{ck}", "--train", "{train}", "--dev", "{dev}",
      "--set", "finetune.epochs=1e308"],
     ["finetune.epochs: must be <= 1000000.0", "give finetune.epochs a value <= 1000000.0"]),
    (["finetune", "classify", "-c", "{ck}", "--train", "{train}", "--dev", "{dev}", "--epochs", "1e308"],
     ["--epochs: must be <= 1000000.0, got 1e+308"]),
], ids=["finetune embed --epochs", "distill --set finetune.epochs", "finetune classify --epochs"])
def test_a_huge_numeric_value_is_one_message(argv, needles, tmp_path, healthy):
    train, dev = write_classify(tmp_path / "data")
    texts = write_texts(tmp_path / "data" / "texts.txt")
    before = snapshot(tmp_path)
    args = [a.format(ck=healthy, train=train, dev=dev, texts=texts) for a in argv]
    assert_refused(run_cli(*args, "--out", tmp_path / "out", cwd=tmp_path), before, tmp_path, *needles)


def test_total_steps_are_bounded_once_the_data_is_read(tmp_path, healthy):
    """Epochs within their own bound, over enough batches, ask for more steps than a run can
    count: refused after the data is read, before any training, naming the largest value."""
    train, dev = write_classify(tmp_path / "data", n_train=2200)
    before = snapshot(tmp_path)
    r = run_cli("finetune", "classify", "-c", healthy, "--train", train, "--dev", dev, "--out", tmp_path / "out",
                "--batch-size", "1", "--epochs", "1e6", *FT[:2], "--set", "finetune.max_seq_length=16",
                "--set", "finetune.device=cpu", cwd=tmp_path)
    largest = (2**31 - 1) / 2200
    assert_refused(r, before, tmp_path, "finetune.epochs (--epochs) 1e+06 over 2,200 batches per epoch",
                   "more than the 2,147,483,647 a run can count", f"at most {largest:.6g}")
    assert "tokenizing classify train: 2,200/2,200" in r.output      # after the data was read ...
    assert "fine-tuning classify" not in r.output                     # ... and before any training


# ------------------------------------------------------- cause 5: non-finite outputs are refused
@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "in").mkdir()
    texts = write_texts(tmp_path / "in" / "texts.txt")
    sts = tmp_path / "in" / "sts.csv"
    sts.write_text("text,text_pair,score\n" + "".join(f"a cat sat {i},the cat sat {i},{i % 5}\n" for i in range(12)),
                   encoding="utf-8")
    corpus = tmp_path / "in" / "corpus.txt"
    corpus.write_text("".join(f"the value of line {i} is here. a module reads it.\nthe list holds {i}.\n\n"
                              for i in range(40)), encoding="utf-8")
    return {"texts": texts, "sts": sts, "corpus": corpus}


SERVING = {
    "embed": (["embed", "-c", "{ck}", "-i", "{texts}", "-o", "{out}/v.npy"], "embeddings"),
    "features": (["features", "-c", "{ck}", "-i", "{texts}", "-o", "{out}/f.parquet"], "hidden states"),
    "predict": (["predict", "-c", "{ck}", "-i", "{texts}", "-o", "{out}/p.jsonl", "--task", "features"],
                "features outputs"),
    "evaluate-embed": (["evaluate-embed", "-c", "{ck}", "--sts", "{sts}", "--json"], "embeddings"),
    "fill-mask": (["fill-mask", "-c", "{ck}", "the [MASK] sat on the list"], "MLM logits"),
    "evaluate": (["evaluate", "-c", "{ck}", "--corpus", "{corpus}", "--objective", "none", "--json",
                  "--cache", "{out}/cache"], "MLM logits"),
    "export": (["export", "-c", "{ck}", "-o", "{out}/bundle", "--task", "fill-mask"], "outputs"),
}


@pytest.mark.parametrize("command", list(SERVING))
def test_a_model_with_non_finite_outputs_is_refused_by_every_serving_command(command, tmp_path, broken, inputs):
    argv, what = SERVING[command]
    out = tmp_path / "out"
    before = snapshot(tmp_path)
    ck_before = snapshot(broken)
    args = [a.format(ck=broken, out=out, **inputs) for a in argv]
    r = run_cli(*args, cwd=tmp_path)
    assert_user_error(r, str(broken), f"computes {what} that are not finite numbers")
    assert r.stderr.count("error:") == 1, r.stderr
    assert "NaN" not in r.stdout and "nan" not in r.stdout.lower(), r.stdout
    assert_kept(before, tmp_path)
    assert_kept(ck_before, broken)
    written = [p for p in snapshot(out)] if out.exists() else []
    assert not [p for p in written if not p.startswith("cache/")], f"{command} wrote {written}"


def test_onnx_predict_refuses_a_bundle_computing_nan(tmp_path, healthy, inputs):
    pytest.importorskip("onnxruntime")
    import numpy as np
    import onnx
    from onnx import numpy_helper

    bundle = tmp_path / "bundle"
    r = run_cli("export", "-c", healthy, "-o", bundle, "--task", "features", "--no-verify", "--no-optimize",
                cwd=tmp_path)
    assert r.rc == 0, r.output
    model = onnx.load(str(bundle / "model.onnx"))
    norms = [t for t in model.graph.initializer if "LayerNorm" in t.name and t.name.endswith("weight")] or \
        [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 1]
    for t in norms:
        t.CopyFrom(numpy_helper.from_array(np.full(tuple(t.dims), np.nan, np.float32), t.name))
    onnx.save(model, str(bundle / "model.onnx"))
    info = json.loads((bundle / "export_info.json").read_text(encoding="utf-8"))
    assert info["files"]["model.onnx"] == (bundle / "model.onnx").stat().st_size   # same size: not "changed"
    before = snapshot(tmp_path)
    r = run_cli("predict", "-c", bundle, "-i", inputs["texts"], "-o", tmp_path / "p.jsonl", cwd=tmp_path)
    assert_refused(r, before, tmp_path, str(bundle), "not finite numbers")


# ------------------------------------------------------- training that diverged is not a result
@pytest.mark.parametrize("task", ["classify", "embed"])
def test_fine_tuning_a_model_that_outputs_nan_is_reported_as_diverged(task, tmp_path, broken):
    if task == "classify":
        train, dev = write_classify(tmp_path / "data")
    else:
        (tmp_path / "data").mkdir()
        train, dev = tmp_path / "data" / "pairs.csv", tmp_path / "data" / "sts.csv"
        train.write_text("anchor,positive\n" + "".join(f"a cat sat {i},the cat sat {i}\n" for i in range(24)))
        dev.write_text("text,text_pair,score\n" + "".join(f"a cat {i},the cat {i},{i % 5}\n" for i in range(12)))
    before = snapshot(tmp_path)
    r = run_cli("finetune", task, "-c", broken, "--train", train, "--dev", dev, "--out", tmp_path / "out",
                "--lr", "2e-5", *FT, cwd=tmp_path)
    assert_refused(r, before, tmp_path, f"fine-tuning {task} diverged at learning rate 2e-05",
                   "not saved as a result", "lower learning rate (--lr")
    assert not (tmp_path / "out").exists()


def test_a_diverged_run_is_the_diverged_class():
    """A seed / learning-rate sweep counts a run as diverged by catching this class."""
    import torch

    from bertcli.core.errors import Diverged
    from bertcli.model.finite import all_finite, check_trained

    outputs = {"logits": torch.tensor([[0.0, float("nan")]]), "ids": torch.tensor([1, 2])}
    assert not all_finite(outputs) and all_finite({"logits": torch.zeros(2), "n": 3})
    with pytest.raises(Diverged, match="at learning rate 0.5"):
        check_trained(outputs, "pretraining", 0.5, "--set train.learning_rate")
    check_trained({"logits": torch.ones(2, 2)}, "pretraining", 0.5, "--set train.learning_rate")
    # SQuAD's forward puts -inf on padding: allowed where the caller says so, nan and +inf never
    import numpy as np

    padded = torch.tensor([[1.0, float("-inf")]])
    assert not all_finite(padded) and all_finite(padded, masked=True) and all_finite(padded.numpy(), masked=True)
    for bad in (float("nan"), float("inf")):
        assert not all_finite(torch.tensor([bad, float("-inf")]), masked=True)
        assert not all_finite(np.array([bad, -np.inf]), masked=True)


# ------------------------------------------------------------- evaluate --pppl-rows 0 writes null
def test_evaluate_without_pseudo_perplexity_rows_writes_null_with_the_reason(tmp_path, healthy, inputs):
    r = run_cli("evaluate", "-c", healthy, "--corpus", inputs["corpus"], "--objective", "none", "--pppl-rows", "0",
                "--json", "--cache", tmp_path / "cache", cwd=tmp_path)
    assert r.rc == 0, r.output
    assert "NaN" not in r.stdout
    result = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    corpus = result["corpora"][0]
    assert corpus["pseudo_perplexity"] is None and corpus["pppl_tokens"] == 0
    assert corpus["pseudo_perplexity_reason"] == "not computed: --pppl-rows 0 scores no rows"
    assert corpus["mlm_loss"] > 0


def test_the_stop_hook_ends_a_command_before_its_work(tmp_path, healthy):
    """The hook the value tests rely on: an accepted value stops at `validated`, nothing written."""
    train, dev = write_classify(tmp_path / "data")
    before = snapshot(tmp_path)
    r = run_cli("finetune", "classify", "-c", healthy, "--train", train, "--dev", dev, "--out", tmp_path / "out",
                "--epochs", "2", cwd=tmp_path, env={STOP_ENV: "validated"})
    assert r.rc == STOP_EXIT and "test stop at validated" in r.stderr, r.output
    assert snapshot(tmp_path) == before
