"""The Python entry point (bertcli/api.py): `bertcli.pretrain(...)` trains and returns the run
like the command does, the commands call these same functions, and `import bertcli` stays light
(no torch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import bertcli
from bertcli import api
from bertcli.config.options import SweepArgs
from bertcli.core.errors import UserError

# A few steps of a very small bert-tiny on a slice of the built-in corpus (seconds on one thread).
TINY = {"corpus.sources": [{"path": "builtin", "max_documents": 60}], "corpus.validation_fraction": 0.1,
        "tokenizer.vocab_size": 500, "data.max_seq_length": 32, "data.dupe_factor": 1,
        "model.hidden_size": 32, "model.num_hidden_layers": 1, "model.num_attention_heads": 2,
        "model.intermediate_size": 64, "train.batch_size": 8, "train.max_steps": 6, "train.warmup_steps": 1,
        "train.log_every": 1, "train.eval_every": 6, "train.save_every": 3, "train.eval_batches": 2,
        "train.num_workers": 0}


def test_import_bertcli_imports_no_torch():
    """`import bertcli`, and looking the functions up, load neither torch nor datasets: only
    calling one does."""
    code = ("import sys, bertcli\n"
            "from bertcli import pretrain, finetune, tokenize, build_data, export, predict, features\n"
            "heavy = sorted(m for m in ('torch', 'datasets', 'transformers') if m in sys.modules)\n"
            "print(heavy, callable(finetune), callable(export), callable(pretrain))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["[]", "True", "True", "True"], proc.stdout + proc.stderr


def test_pretrain_from_python(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    result = bertcli.pretrain("bert-tiny", {**TINY, "output_dir": str(out)})

    assert result.run_dir.resolve() == out.resolve()
    assert result.step == result.max_steps == 6
    assert result.interrupted is None
    final = result.checkpoint
    assert final is not None and final.resolve() == (out / "final").resolve()
    config = json.loads((final / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == ("bert", 32, 1)
    assert (final / "model.safetensors").stat().st_size > 0
    assert (final / "tokenizer.json").is_file()
    # the returned metrics are the run's metrics.jsonl: its last training line and its evaluation
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["step"] == 6
    last_train = [r for r in lines if "loss" in r][-1]
    assert result.last["loss"] == pytest.approx(last_train["loss"])
    assert result.last_val["val_loss"] == pytest.approx([r for r in lines if "val_loss" in r][-1]["val_loss"])
    # a second call reuses the stages and refuses to overwrite the finished run, like the CLI
    with pytest.raises(UserError, match="already holds this recipe's run"):
        bertcli.pretrain("bert-tiny", {**TINY, "output_dir": str(out)})


def test_bad_override_raises_the_clis_message():
    with pytest.raises(UserError) as e:
        bertcli.pretrain("bert-tiny", {"train.lerning_rate": 1e-3})
    assert "train.learning_rate" in str(e.value)
    with pytest.raises(UserError, match="classify"):
        bertcli.finetune("clasify", "some/checkpoint")


# Each command -> the api function it must call, and one argument it must pass through.
CALLS = [
    (["pretrain", "-r", "bert-tiny", "--resume", "auto"], "pretrain", ("resume", "auto")),
    (["tokenize", "-r", "bert-tiny", "--rebuild"], "tokenize", ("force", True)),
    (["build-data", "-r", "bert-tiny", "--all-phases"], "build_data", ("all_phases", True)),
    (["finetune", "glue", "-c", "ck", "--tasks", "rte", "-d", "glue_data"], "finetune", ("tasks", "rte")),
    (["finetune", "classify", "-c", "ck", "--train", "a.csv", "--dev", "b.csv", "--regression"],
     "finetune", ("regression", True)),
    (["finetune", "ner", "-c", "ck", "-d", "conll"], "finetune", ("data_dir", Path("conll"))),
    (["finetune", "squad", "-c", "ck", "-d", "squad", "--squad-version", "2"], "finetune", ("version", 2)),
    (["features", "-c", "ck", "-i", "t.txt", "-o", "f.parquet", "--pooling", "mean"], "features", ("pool", "mean")),
    (["fill-mask", "-c", "ck", "a [MASK]", "--top-k", "3"], "fill_mask", ("top_k", 3)),
    (["export", "-c", "ck", "-o", "bundle", "--quantize", "int8"], "export", ("quantize", "int8")),
    (["predict", "-c", "ck", "-i", "x.jsonl", "--batch-size", "4"], "predict", ("batch_size", 4)),
    (["embed", "-c", "ck", "-i", "t.txt", "-o", "e.npy", "--pooling", "cls"], "embed", ("pooling", "cls")),
    (["evaluate-embed", "-c", "ck", "--beir", "b", "--split", "dev"], "evaluate_embed", ("split", "dev")),
    (["finetune", "ner", "-c", "ck", "-d", "conll", "--seeds", "3", "--lr", "1e-3,2e-3", "--resume"], "finetune",
     ("sweep", SweepArgs("3", [1e-3, 2e-3], True))),
    (["finetune", "glue", "-c", "ck", "--tasks", "rte", "-d", "g", "--from-mnli"], "finetune", ("from_mnli", True)),
    (["distill", "-c", "ck", "--teacher-task", "ner", "-d", "conll", "--seeds", "1,7"], "distill", ("sweep", SweepArgs("1,7"))),
]


class _Called(Exception):
    pass


@pytest.mark.parametrize("argv, name, passed", CALLS, ids=[" ".join(c[0][:2]) if c[1] == "finetune" else c[1] for c in CALLS])
def test_each_command_calls_the_api_function(monkeypatch, argv, name, passed):
    from bertcli.cli import app

    seen = {}

    def record(*args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        raise _Called

    monkeypatch.setattr(api, name, record)
    result = CliRunner().invoke(app, argv)
    assert isinstance(result.exception, _Called), (result.output, result.exception)
    key, value = passed
    assert seen["kwargs"].get(key) == value, seen
    if name == "finetune":                  # every task's command is api.finetune(TASK, checkpoint, ...)
        assert seen["args"][:2] == (argv[1], Path("ck")), seen
