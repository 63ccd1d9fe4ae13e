"""`bertcli export` through the real CLI: int8 with a dev set on a small fine-tuned classifier,
and every user mistake as one message with exit code 2, found before the export starts."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ONE_THREAD, assert_user_error, run_cli_process
from helpers.export import export_section, make_checkpoint, write_tokenizer

from bertcli.model import build_model, save_checkpoint

CATS = ["the cat sat on the mat", "a cat ran in the park", "the cat is the capital", "it was a cat"]
DOGS = ["the dog sat on the mat", "a dog ran in the park", "the dog is the capital", "it was a dog"]


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory):
    """A tiny classifier trained until it tells cat sentences from dog sentences."""
    from tokenizers import Tokenizer

    root = tmp_path_factory.mktemp("ft")
    vocab = write_tokenizer(root / "tok", "bert")
    tok = Tokenizer.from_file(str(root / "tok" / "tokenizer.json"))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build_model(export_section("bert"), vocab, 0, head="classification", labels=["cat", "dog"])
    encs = [tok.encode(s) for s in CATS + DOGS]
    width = max(len(e.ids) for e in encs)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in encs])
    mask = (ids != 0).long()
    labels = torch.tensor([0] * len(CATS) + [1] * len(DOGS))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(model(ids, mask), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
    save_checkpoint(model.eval(), root / "ckpt", tokenizer_dir=root / "tok")
    dev = root / "dev.jsonl"
    dev.write_text("".join(json.dumps({"text": s, "label": "cat" if s in CATS else "dog"}) + "\n"
                           for s in CATS + DOGS), encoding="utf-8")
    return root / "ckpt", dev


def test_int8_export_reports_the_dev_metric_before_and_after(cli, tmp_path, fine_tuned):
    import onnx

    ckpt, dev = fine_tuned
    r = cli("export", "-c", ckpt, "-o", tmp_path / "int8", "--quantize", "int8", "--dev", dev, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert "max |diff| fp32 logits" in r.stdout and "max |diff| int8 logits" in r.stdout
    assert "dev onnx_int8" in r.stdout
    info = json.loads((tmp_path / "int8" / "export_info.json").read_text())
    assert info["precision"] == "int8"
    dev_metrics = info["dev_metrics"]
    # PyTorch and the fp32 graph agree exactly on a 8-example set; the model learned the task
    assert dev_metrics["pytorch_fp32"] == dev_metrics["onnx_fp32"]
    assert dev_metrics["onnx_fp32"]["accuracy"] == 1.0
    assert dev_metrics["onnx_int8"]["accuracy"] >= 0.875      # at most one of 8 flips
    assert info["verification"]["fp32"]["max_abs_diff"]["logits"] <= 1e-4
    ops = {n.op_type for n in onnx.load(str(tmp_path / "int8" / "model.onnx")).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeLinear"}, ops
    assert not (tmp_path / "int8" / "model.fp32.onnx").exists()


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    torch.set_num_threads(1)
    return make_checkpoint(tmp_path_factory.mktemp("cls"), "bert", "classification")


def _setup(case, tmp_path, classifier):
    """(extra args, needles) for each mistake."""
    out = tmp_path / "out"
    if case == "out is a file":
        out.write_text("x")
        return ["-o", out], ["is a regular file"]
    if case == "foreign directory":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        return ["-o", out], ["bertcli did not write", "notes.txt"]
    if case == "existing bundle":
        out.mkdir()
        (out / "export_info.json").write_text("{}")
        return ["-o", out], ["already holds an earlier result", "--force"]
    if case == "dev labels":
        dev = tmp_path / "dev.jsonl"
        dev.write_text('{"text": "a cat", "label": "positive"}\n{"text": "a dog", "label": "neutral"}\n')
        return ["-o", out, "--quantize", "int8", "--dev", dev], ["'neutral' is not one of the model's labels", "dev.jsonl:2"]
    if case == "dev without text":
        dev = tmp_path / "dev.csv"
        dev.write_text("premise_x,label\nhello,positive\n")
        return ["-o", out, "--quantize", "int8", "--dev", dev], ["none of the fields text"]
    if case == "no mlm head":
        return ["-o", out, "--task", "fill-mask"], ["no masked-LM head", "--task features"]
    if case == "unknown task":
        return ["-o", out, "--task", "clasification"], ["unknown task", "did you mean classification"]
    if case == "old opset":
        return ["-o", out, "--opset", "13"], ["--opset 13 is too old"]
    if case == "unexportable":
        config = json.loads((classifier / "config.json").read_text())
        bad = tmp_path / "mc"
        bad.mkdir()
        for f in classifier.iterdir():
            (bad / f.name).write_bytes(f.read_bytes())
        (bad / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMultipleChoice"]}))
        return ["-c", bad, "-o", out], ["cannot export a BertForMultipleChoice"]
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["out is a file", "foreign directory", "existing bundle", "dev labels",
                                  "dev without text", "no mlm head", "unknown task", "old opset", "unexportable"])
def test_export_mistakes_are_one_message(cli, tmp_path, classifier, case):
    args, needles = _setup(case, tmp_path, classifier)
    if "-c" not in args:
        args = ["-c", classifier, *args]
    r = cli("export", *args, env=ONE_THREAD)
    assert_user_error(r, *needles)
    assert not (tmp_path / "out" / "model.onnx").exists()


def test_without_the_extra_export_names_the_install_command(cli, tmp_path, classifier):
    shim = tmp_path / "shim"
    (shim / "onnxruntime").mkdir(parents=True)
    (shim / "onnxruntime" / "__init__.py").write_text("raise ImportError('No module named onnxruntime')\n")
    r = run_cli_process("export", "-c", classifier, "-o", tmp_path / "out", cwd=tmp_path,
                        env={**ONE_THREAD, "PYTHONPATH": str(shim)})       # a new interpreter reads PYTHONPATH
    assert_user_error(r, "onnxruntime", "pip install 'bertcli[export]'")
