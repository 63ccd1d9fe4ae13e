"""Filesystem faults: every path a command writes is checked before any work (one message, exit
2), and a disk that fills up during a save is one message naming the path and the space needed,
with the previous complete checkpoint intact and nothing half-written looking complete.

Read-only directories are made with permissions; as root (which ignores them) the command runs
with every capability dropped (setpriv). The full disk is a small tmpfs in a private mount
namespace (unshare -m), skipped with the reason where the machine does not allow one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, assert_user_error, run_cli

from bertcli.core.errors import UserError
from bertcli.core.paths import check_writable_dir, check_writable_file, saving

ROOT = os.geteuid() == 0
TINY = ["corpus.sources=[{path: builtin, max_documents: 20}]", "tokenizer.vocab_size=200", "data.max_seq_length=32",
        "model.hidden_size=32", "model.num_hidden_layers=1", "model.num_attention_heads=2",
        "model.intermediate_size=64", "train.batch_size=4", "train.max_steps=2"]


def _sets(*items):
    return [x for s in (*TINY, *items) for x in ("--set", s)]


def unprivileged(cmd: list[str]) -> list[str]:
    """`cmd` without the capabilities that let root write anywhere (a no-op for other users)."""
    if not ROOT:
        return cmd
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot drop CAP_DAC_OVERRIDE to test permissions")
    return ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--", *cmd]


def cli_unprivileged(*args, cwd):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    p = subprocess.run(unprivileged([sys.executable, "-m", "bertcli", *map(str, args)]), cwd=cwd,
                       capture_output=True, text=True, env=env)
    from conftest import CliResult

    return CliResult(p.returncode, p.stdout, p.stderr)


@pytest.fixture
def readonly(tmp_path):
    d = tmp_path / "readonly"
    d.mkdir()
    d.chmod(0o555)
    yield d
    d.chmod(0o755)


# ------------------------------------------------------------------------------ before any work
@pytest.mark.parametrize("command,key,layout", [
    ("tokenize", "output_dir", "file"), ("build-data", "output_dir", "under_file"), ("pretrain", "output_dir", "file"),
    ("tokenize", "cache_dir", "file"), ("build-data", "cache_dir", "file"), ("pretrain", "cache_dir", "under_file")])
def test_a_regular_file_where_a_directory_goes_is_one_message_before_work(tmp_path, command, key, layout):
    (tmp_path / "taken").write_text("a file\n")
    target = tmp_path / "taken" if layout == "file" else tmp_path / "taken" / "run"
    r = run_cli(command, "-r", "bert-tiny", *_sets(f"{key}={target}"), cwd=tmp_path)
    assert_user_error(r, f"{key} = {target}", "regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]         # nothing was written anywhere


@pytest.mark.parametrize("key", ["output_dir", "cache_dir"])
@pytest.mark.parametrize("depth", ["itself", "below"])
def test_a_read_only_directory_is_one_message_before_work(tmp_path, readonly, key, depth):
    target = readonly if depth == "itself" else readonly / "a" / "b"
    r = cli_unprivileged("tokenize", "-r", "bert-tiny", *_sets(f"{key}={target}"), cwd=tmp_path)
    assert_user_error(r, f"{key} = {target}", "permission denied")
    assert list(readonly.iterdir()) == []


def test_finetune_checks_its_output_before_training(tmp_path):
    """The trained model was once lost to an output path checked after training: now the check
    comes before the first task is read."""
    from helpers.glue import write_glue

    from bertcli.config.recipe import load_recipe
    from bertcli.model import build_model, save_checkpoint

    ckpt = tmp_path / "ckpt"
    save_checkpoint(build_model(load_recipe("bert-tiny").model, 50, 0), ckpt)
    (ckpt / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(45)]))
    glue = write_glue(tmp_path / "glue")
    (tmp_path / "out_file").write_text("x")
    r = run_cli("finetune", "glue", "-c", ckpt, "--tasks", "rte", "-d", glue, "-o", tmp_path / "out_file", cwd=tmp_path)
    assert_user_error(r, "--out", "regular file")
    assert "reading RTE" not in r.output and "steps" not in r.output   # refused before any task was read


def test_the_helper_in_every_case(tmp_path, readonly):
    (tmp_path / "f").write_text("x")
    check_writable_dir(tmp_path / "new" / "deeper")                         # creatable: fine, nothing made
    assert not (tmp_path / "new").exists()
    for bad, reason in ((tmp_path / "f", "regular file"), (tmp_path / "f" / "sub", "regular file")):
        with pytest.raises(UserError, match=reason):
            check_writable_dir(bad, "the run directory", "output_dir")
    with pytest.raises(UserError, match="is a directory"):
        check_writable_file(tmp_path, "the predictions")
    if not ROOT:
        with pytest.raises(UserError, match="permission denied"):
            check_writable_dir(readonly / "x")


@pytest.mark.parametrize("errno_name,phrase", [("ENOSPC", "no space left"), ("EDQUOT", "quota")])
def test_saving_turns_a_full_disk_into_one_message(tmp_path, errno_name, phrase):
    import errno

    with pytest.raises(UserError) as info:
        with saving(tmp_path / "x", "checkpoint step-0000004/", needed=3 << 20):
            raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)), str(tmp_path / "x"))
    assert phrase in info.value.what and "needs at least 3.0 MiB" in info.value.what and info.value.where == str(tmp_path / "x")
    with pytest.raises(UserError, match="no space left"):   # safetensors says it in its own words
        with saving(tmp_path / "y", "the weights"):
            raise Exception("Error while serializing: I/O error: No space left on device (os error 28)")
    with pytest.raises(KeyError):                            # anything else is not a disk problem
        with saving(tmp_path / "z", "x"):
            raise KeyError("other")


# ----------------------------------------------------------------------------------- full disk
FULL_DISK = textwrap.dedent('''
    import json, os, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    import torch
    from bertcli.core.errors import UserError
    from bertcli.config.recipe import load_recipe
    from bertcli.train import checkpoint as ck
    from bertcli.train.loop import Trainer, TrainInputs
    from bertcli.train.metrics import MetricsLog
    from train_standins import RowDataset, TinyModel, collate

    disk, mode = Path(sys.argv[1]), sys.argv[3]
    torch.set_num_threads(1)
    def hf_save(model, directory):
        (directory / "config.json").write_text("{}")
    def trainer(run_dir, steps):
        r = load_recipe(None, ["train.max_steps=%d" % steps, "train.warmup_steps=1", "train.batch_size=8",
                               "train.save_every=4", "train.eval_every=100", "train.num_workers=0",
                               "train.tensorboard=false", "train.log_every=1"])
        torch.manual_seed(0)
        return Trainer(TrainInputs(recipe=r, model=TinyModel(), train_dataset=RowDataset(37), val_dataset=None,
                                   n_train=37, n_val=0, collate=collate, hf_save=hf_save, run_dir=run_dir))
    out = {}
    probe = trainer(Path(sys.argv[4]), 4)          # the size of one checkpoint, measured off the small disk
    probe.fit()
    size = sum(-(-f.stat().st_size // 4096) * 4096
               for f in (Path(sys.argv[4]) / "checkpoints" / "step-0000004").rglob("*") if f.is_file())
    out["size"] = size
    if mode == "measured":                          # the write itself runs out: the pre-check is bypassed
        ck.estimated_size = lambda model, optimizer: 0
    run = disk / "run"
    t = trainer(run, 8)
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(disk / "filler", "wb") as f:          # leave room for one checkpoint and a half
        f.write(b"\\0" * max(0, free - int(1.5 * size)))
    try:
        t.fit()
        out["error"] = None
    except UserError as e:
        out["error"], out["where"] = e.what, e.where
    out["checkpoints"] = sorted(p.name for p in (run / "checkpoints").iterdir())
    out["run"] = sorted(p.name for p in run.iterdir())
    try:
        out["step4_step"] = ck.read(run / "checkpoints" / "step-0000004", require=ck.TrainState.required_keys()).step
    except UserError as e:
        out["step4_step"] = e.what
    with open(disk / "filler2", "wb") as f:         # now nothing at all is left: the metrics log
        try:
            while True:
                f.write(b"\\0" * 65536)
        except OSError:
            pass
    try:
        log = MetricsLog(run / "metrics.jsonl", resume_step=4)
        log.write({"step": 5, "loss": 1.0, "text": "x" * 200000})
        out["metrics_error"] = None
    except UserError as e:
        out["metrics_error"] = e.what
    print("RESULT " + json.dumps(out))
''')


@pytest.mark.parametrize("mode", ["precheck", "measured"])
def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint(tmp_path, mode):
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1): cannot make a private tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
           f'mount -t tmpfs -o size=4m tmpfs "{disk}" || exit 77; exec "{sys.executable}" "{script}" "{disk}" '
           f'"{REPO / "tests"}" {mode} "{tmp_path / "probe"}"']
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if p.returncode == 77 or "unshare failed" in p.stderr or "Operation not permitted" in p.stderr:
        pytest.skip(f"no private tmpfs on this machine (needs root / CAP_SYS_ADMIN): {p.stderr.strip()[:200]}")
    assert p.returncode == 0, p.stdout + p.stderr
    import json

    out = json.loads(next(x for x in p.stdout.splitlines() if x.startswith("RESULT "))[7:])
    assert out["error"] and ("not enough free space" in out["error"] or "no space left" in out["error"]), out
    assert "are free" in out["error"] and ("needs at least" in out["error"] or mode == "measured"), out
    assert out["where"].endswith("step-0000008"), out             # names the checkpoint being written
    assert out["step4_step"] == 4, out                           # the previous checkpoint is intact
    assert out["run"] == ["checkpoints", "metrics.jsonl"] and out["checkpoints"] == ["step-0000004"], out  # no half-written one
    assert out["metrics_error"] and "metrics log" in out["metrics_error"] and "no space left" in out["metrics_error"]
