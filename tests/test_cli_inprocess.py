"""The in-process CLI runner (conftest.run_cli): it ends as `python -m bertcli` ends (the same exit
code, stdout and stderr), and it puts back everything a command changes in the process that runs
it, so that an in-process run leaks into no later test (the bitwise ones above all)."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import warnings

import numpy as np
import pytest
import torch
from conftest import CliState, run_cli, run_cli_process
from finetune_fixtures import tiny_checkpoint


@pytest.mark.parametrize("args", [
    ("--help",),                                                # click's help, exit 0
    ("finetune", "classify", "--help"),                         # a task command's generated help
    ("recipes",),                                               # a command's table, exit 0
    ("info", "-r", "no-such-recipe"),                           # a UserError: one message, exit 2
    ("info", "-r", "bert-tiny", "--set", "train.max_steps=-1"),  # a bad --set value: exit 2
    ("pretrain", "--no-such-flag"),                             # click's usage error: exit 2
], ids=lambda a: " ".join(a))
def test_in_process_ends_as_the_process_does(args, tmp_path):
    inside, process = run_cli(*args, cwd=tmp_path), run_cli_process(*args, cwd=tmp_path)
    assert (inside.rc, inside.stdout, inside.stderr) == (process.rc, process.stdout, process.stderr)
    assert inside.rc == (0 if "--help" in args or args == ("recipes",) else 2)
    assert "Traceback" not in inside.output


def test_an_unexpected_error_is_a_traceback_and_exit_1(monkeypatch, tmp_path):
    """What Python does with an exception nobody catches (not a UserError): exit 1, traceback."""
    import bertcli.info

    def broken(recipe):
        raise RuntimeError("a bug")
    monkeypatch.setattr(bertcli.info, "describe", broken)
    r = run_cli("info", "-r", "bert-tiny", cwd=tmp_path)
    assert r.rc == 1 and "Traceback" in r.stderr and "RuntimeError: a bug" in r.stderr, r.output


def test_output_of_file_descriptors_is_captured(monkeypatch, tmp_path):
    """What a C++ library writes to fd 1 / fd 2 (ONNX Runtime's logs) is part of the output, as in a pipe."""
    import bertcli.info

    def noisy(recipe):
        os.write(1, b"from fd 1\n")
        os.write(2, b"from fd 2\n")
        return []
    monkeypatch.setattr(bertcli.info, "describe", noisy)
    r = run_cli("info", "-r", "bert-tiny", cwd=tmp_path)
    assert r.rc == 0 and "from fd 1" in r.stdout and "from fd 2" in r.stderr, r.output


def test_every_piece_of_state_a_command_changes_is_restored(monkeypatch, tmp_path):
    """A command (info, its body replaced) that changes each piece of process state: inside the
    run every change is in effect; after it, every piece is as before."""
    import bertcli.info

    seen = {}

    def mutate(recipe):
        torch.set_num_threads(torch.get_num_threads() + 2)
        torch.manual_seed(123)
        random.seed(123)
        np.random.seed(123)
        torch.use_deterministic_algorithms(True)
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        torch.set_float32_matmul_precision("medium")
        signal.signal(signal.SIGTERM, lambda *a: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.environ["BERTCLI_LEAK"] = "1"
        del os.environ["HOME"]
        os.chdir(tmp_path / "elsewhere")
        logging.getLogger().setLevel(logging.ERROR)       # what the ONNX quantizer's caller does
        logging.getLogger("bertcli.leak").addHandler(logging.NullHandler())
        logging.getLogger("torch").setLevel(logging.CRITICAL)
        warnings.simplefilter("error")
        os.umask(0o077)
        seen.update(threads=torch.get_num_threads(), dtype=torch.get_default_dtype(), cwd=os.getcwd())
        return []

    (tmp_path / "elsewhere").mkdir()
    logging.getLogger("bertcli.leak")
    monkeypatch.setattr(bertcli.info, "describe", mutate)
    before = CliState.now()
    r = run_cli("info", "-r", "bert-tiny", cwd=tmp_path)
    after = CliState.now()
    assert r.rc == 0, r.output
    assert seen == {"threads": before.threads + 2, "dtype": torch.float64, "cwd": str(tmp_path / "elsewhere")}
    changed = CliState(**{**vars(before), "threads": seen["threads"]})
    assert changed.differences(before) == ["threads"]            # the comparison sees a change
    assert before.differences(after) == []
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
    assert not torch.are_deterministic_algorithms_enabled()
    assert "BERTCLI_LEAK" not in os.environ and "HOME" in os.environ


def test_the_run_sees_its_own_cwd_env_and_argv(monkeypatch, tmp_path):
    """The command sees what a process started with `cwd` and `env` would: its working directory,
    the variable, sys.argv naming the command (bertcli.core.outputs.command_name reads it), and
    the interpreter's warning filters (a warning is printed on stderr, not caught by pytest)."""
    import bertcli.info
    from bertcli.core.outputs import command_name

    def look(recipe):
        warnings.warn("look here", UserWarning, stacklevel=1)
        return [("seen", [("cwd", os.getcwd()), ("var", os.environ.get("BERTCLI_SEEN")),
                          ("command", command_name())])]
    monkeypatch.setattr(bertcli.info, "describe", look)
    r = run_cli("info", "-r", "bert-tiny", cwd=tmp_path, env={"BERTCLI_SEEN": "yes"})
    assert r.rc == 0, r.output
    assert f"#   cwd      {tmp_path}" in r.stdout and "#   var      yes" in r.stdout, r.stdout
    assert "#   command  info" in r.stdout, r.stdout
    assert "UserWarning: look here" in r.stderr, r.stderr
    assert "BERTCLI_SEEN" not in os.environ


def test_a_start_up_variable_asks_for_a_process(tmp_path):
    """PYTHONHASHSEED, HF_* and thread variables take effect when a process starts: run_cli refuses
    them (a different value) instead of pretending."""
    with pytest.raises(ValueError, match="PYTHONHASHSEED.*run_cli_process"):
        run_cli("recipes", env={"PYTHONHASHSEED": "1"})
    assert run_cli("recipes", env={"OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]}).rc == 0   # the same value: fine


def test_a_real_fine_tuning_run_changes_threads_and_rng_and_both_come_back(tmp_path):
    """`finetune classify` with finetune.threads=3 sets torch's thread count and seeds torch's RNG;
    after the in-process run this process has its own again, and its result is the one a process
    computes bit for bit (the same loss curve in results.json, the same weights)."""
    texts = [f"{w} film number {i}" for i, w in enumerate(["good", "bad"] * 12)]
    ckpt = tiny_checkpoint(tmp_path / "ckpt", texts, hidden=32, layers=1)
    rows = [{"text": t, "label": "pos" if t.startswith("good") else "neg"} for t in texts]
    for name in ("train", "dev"):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = CliState.now()
    results = []
    for runner, out in ((run_cli, "inside"), (run_cli_process, "process")):
        r = runner("finetune", "classify", "-c", ckpt, "--train", tmp_path / "train.jsonl", "--dev",
                   tmp_path / "dev.jsonl", "-o", tmp_path / out, "--set", "finetune.threads=3",
                   "--set", "finetune.classify.epochs=1", "--set", "finetune.classify.batch_size=8", cwd=tmp_path)
        assert r.rc == 0, r.output
        assert "threads: 3" in r.stderr, r.stderr
        results.append(json.loads((tmp_path / out / "results.json").read_text()))
    assert before.differences(CliState.now()) == []
    assert torch.get_num_threads() == before.threads != 3
    timeless = [{k: v for k, v in res.items() if "seconds" not in k} for res in results]
    assert timeless[0] == timeless[1] and "history" in timeless[0], timeless
    assert (tmp_path / "inside" / "model.safetensors").read_bytes() == (tmp_path / "process" / "model.safetensors").read_bytes()
