"""Output safety of real runs (issue 20): every writing command, run beside a user's file and
hidden folders whose names look like temporaries, leaves them byte for byte; --force replaces
only what bertcli wrote; two writers into one directory never both succeed; SIGTERM / SIGINT
leave no temporary and no half-written output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ONE_THREAD, assert_user_error, run_cli
from safety_helpers import (
    FT,
    NER_FT,
    SQUAD_FT,
    STAGE,
    assert_kept,
    foreign_neighbours,
    snapshot,
    write_classify,
    write_ner,
    write_sst2,
    write_texts,
)

pytestmark = pytest.mark.slow      # real runs of every writing command (each sized to seconds)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import torch
    from helpers.export import make_checkpoint

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("models")
    return {"base": make_checkpoint(root / "b", "bert"), "cls": make_checkpoint(root / "c", "bert", "classification")}


def argv_of(command: str, models: dict, data: Path, out: Path) -> list:
    """The command line of each writing command, writing `out`, reading from `data`."""
    base, cls = models["base"], models["cls"]
    if command == "finetune classify":
        train, dev = write_classify(data / "cls")
        return ["finetune", "classify", "-c", base, "--train", train, "--dev", dev, "--out", out, *FT]
    if command == "finetune ner":
        return ["finetune", "ner", "-c", base, "-d", write_ner(data / "ner"), "--out", out, *FT, *NER_FT]
    if command == "finetune glue":
        return ["finetune", "glue", "-c", base, "--tasks", "sst2", "-d", write_sst2(data / "glue"), "--out", out, *FT]
    if command == "finetune squad":
        from squad_synth import write_squad

        return ["finetune", "squad", "-c", base, "-d", write_squad(data / "squad", n_train=4, n_dev=2,
                                                                   n_words=(20, 30)), "--out", out, *SQUAD_FT]
    if command == "export":
        return ["export", "-c", cls, "-o", out, "--no-verify"]     # verification is tested elsewhere
    if command == "predict":
        return ["predict", "-c", cls, "-i", write_texts(data / "in.txt"), "--out", out.with_suffix(".jsonl")]
    if command == "features":
        return ["features", "-c", base, "-i", write_texts(data / "in.txt"), "--out", out.with_suffix(".npy")]
    if command in ("tokenize", "build-data"):
        return [command, *STAGE, "--set", f"output_dir={out}"]
    raise KeyError(command)


WRITERS = ["finetune classify", "finetune ner", "finetune glue", "finetune squad", "export", "predict", "features",
           "tokenize", "build-data"]


@pytest.mark.parametrize("command", WRITERS)
def test_every_writer_leaves_the_users_neighbours(command, tmp_path, models):
    """Property: into a new output next to a user file and foreign `*.tmp-*` / `*.old-*` folders
    (two days old), every writing command succeeds and both survive byte for byte; aimed at the
    user's own folder itself, a directory-writing command refuses and still nothing changes."""
    data = tmp_path / "data"
    data.mkdir()
    home = tmp_path / "home"
    foreign_neighbours(home)
    argv = argv_of(command, models, data, home / "out")
    before = snapshot(home)
    r = run_cli(*argv, cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert_kept(before, home)
    assert {p.name for p in home.iterdir()} >= {".thesis.tmp-draft", ".vim.old-backup", ".out.tmp-123-456"}
    assert not [p for p in home.rglob("*") if ".bertcli-tmp-" in p.name or ".bertcli-old-" in p.name]
    if command not in ("predict", "features", "tokenize", "build-data"):
        marker = json.loads((home / "out" / ".bertcli-output.json").read_text())
        assert marker["command"] == command and marker["files"], marker
        assert all((home / "out" / f).exists() for f in marker["files"])

    # the same command aimed at the user's folder itself
    before = snapshot(home)
    argv = argv_of(command, models, data, home)
    if command in ("predict", "features"):
        argv[argv.index("--out") + 1] = home / "notes.txt"            # a file output onto the user's file
    r = run_cli(*argv, cwd=tmp_path, env=ONE_THREAD)
    if command in ("tokenize", "build-data"):
        assert r.rc == 0, r.output                                     # stages add their own folders only
    else:
        assert_user_error(r, "notes.txt")
    assert_kept(before, home)


def test_force_replaces_only_what_bertcli_wrote(tmp_path, models):
    """classify twice into one --out: the second is refused without --force; with it, the user's
    file put into the output survives byte for byte and every listed file is the new run's."""
    out = tmp_path / "out"
    argv = argv_of("finetune classify", models, tmp_path, out)
    r = run_cli(*argv, cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    first = json.loads((out / ".bertcli-output.json").read_text())
    (out / "my_notes.txt").write_text("keep me\n")
    (out / "dev_predictions" / "mine.tsv").write_text("mine\n")
    before = snapshot(tmp_path)
    r = run_cli(*argv, cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, "already holds an earlier result", "--force")
    assert_kept(before, tmp_path)
    stale = out / "stale.bin"                       # a file an earlier run listed but this one does not write
    stale.write_bytes(b"old")
    marker = json.loads((out / ".bertcli-output.json").read_text())
    (out / ".bertcli-output.json").write_text(json.dumps({**marker, "files": marker["files"] + ["stale.bin"]}))
    r = run_cli(*argv, "--force", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert (out / "my_notes.txt").read_text() == "keep me\n"
    assert (out / "dev_predictions" / "mine.tsv").read_text() == "mine\n"
    assert not stale.exists()
    second = json.loads((out / ".bertcli-output.json").read_text())
    assert set(second["files"]) == set(first["files"]) and "my_notes.txt" not in second["files"]
    assert json.loads((out / "results.json").read_text())["task"] == "classify"


def test_export_force_keeps_a_users_file_in_the_bundle(tmp_path, models):
    out = tmp_path / "bundle"
    r = run_cli("export", "-c", models["cls"], "-o", out, "--no-verify", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    (out / "my_notes.txt").write_text("mine\n")
    old_model = (out / "model.onnx").stat().st_mtime_ns
    r = run_cli("export", "-c", models["cls"], "-o", out, "--force", cwd=tmp_path, env=ONE_THREAD)   # verified
    assert r.rc == 0, r.output
    assert (out / "my_notes.txt").read_text() == "mine\n"
    assert (out / "model.onnx").stat().st_mtime_ns != old_model
    assert "my_notes.txt" not in json.loads((out / "export_info.json").read_text())["files"]


def test_classify_into_an_empty_current_directory_keeps_the_model(tmp_path, models):
    """`--out .` (an empty working directory) used to fail after training, losing the model."""
    argv = argv_of("finetune classify", models, tmp_path / "data", Path("."))
    cwd = tmp_path / "here"
    cwd.mkdir()
    r = run_cli(*argv, cwd=cwd, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert (cwd / "model.safetensors").is_file() and (cwd / ".bertcli-output.json").is_file()


def _start(argv, cwd) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bertcli", *map(str, argv)], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **ONE_THREAD, "COLUMNS": "200"})


def test_two_classify_runs_into_one_out_never_both_succeed(tmp_path, models):
    out = tmp_path / "out"
    argv = argv_of("finetune classify", models, tmp_path, out)
    procs = [_start(argv, tmp_path) for _ in range(2)]
    results = [(p.wait(), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 2], results
    loser = next(err for rc, err in results if rc == 2)
    assert "in use by another bertcli process" in loser or "already holds an earlier result" in loser, loser
    assert "Traceback" not in loser
    assert (out / "model.safetensors").is_file()


@pytest.mark.parametrize("command,sig", [("predict", signal.SIGTERM), ("predict", signal.SIGINT),
                                         ("features", signal.SIGTERM), ("features", signal.SIGINT),
                                         ("embed", signal.SIGTERM)])
def test_a_signal_removes_the_temporary(command, sig, tmp_path, models):
    lines = "".join(f"the cat number {i} sat on the mat\n" for i in range(60_000))
    (tmp_path / "in.txt").write_text(lines)
    out = tmp_path / ("p.jsonl" if command == "predict" else "f.npy")
    argv = {"predict": ["predict", "-c", models["cls"], "-i", tmp_path / "in.txt", "--out", out],
            "features": ["features", "-c", models["base"], "-i", tmp_path / "in.txt", "--out", out, "--batch-size", "8"],
            "embed": ["embed", "-c", models["base"], "-i", tmp_path / "in.txt", "--out", out, "--batch-size", "8"]}[command]
    proc = _start(argv, tmp_path)
    while not list(tmp_path.glob(f".{out.name}.bertcli-tmp-*")):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate()
    assert proc.returncode != 0, err
    assert not list(tmp_path.glob(".*.bertcli-tmp-*")), "the temporary was left"
    assert not out.exists() and not out.with_suffix(".ids.tsv").exists()
    assert (tmp_path / "in.txt").read_text() == lines
