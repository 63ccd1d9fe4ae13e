"""Concurrent processes on one run or stage directory, and Ctrl-C during a stage build. Each
process is held at a pause point (bertcli/core/testhooks.py) so that the other acts while it holds
the lock: no sleeps, no races."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ONE_THREAD, assert_user_error, finish, popen_cli, release, run_cli, wait_paused

from bertcli.core.errors import UserError
from bertcli.core.locks import lock_path, run_lock, stage_lock

TOKENIZE = ["tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[{path: builtin, max_documents: 40}]",
            "--set", "tokenizer.vocab_size=400"]
PRETRAIN = ["pretrain", "-r", "bert-tiny", "--set", "corpus.sources=[{path: builtin, max_documents: 40}]",
            "--set", "tokenizer.vocab_size=400", "--set", "data.max_seq_length=32", "--set", "data.dupe_factor=1",
            "--set", "model.hidden_size=32", "--set", "model.num_hidden_layers=1", "--set", "model.num_attention_heads=2",
            "--set", "model.intermediate_size=64", "--set", "train.batch_size=8", "--set", "train.max_steps=4",
            "--set", "train.warmup_steps=1", "--set", "train.eval_every=4", "--set", "train.save_every=2"]


# ------------------------------------------------------------------------ in one process
def test_run_lock_refuses_a_second_holder_and_frees_on_exit(tmp_path):
    run = tmp_path / "run"
    with run_lock(run):
        # a second open file description in this process counts as another holder
        with pytest.raises(UserError, match=rf"in use by another bertcli process \(PID {os.getpid()}, host "
                                            rf"{socket.gethostname()}\)"):
            with run_lock(run):
                pass
    with run_lock(run):          # released on exit: taken again at once
        pass
    assert not lock_path(run).exists()      # nobody holds it: the holder removed its lock file as it let go


def test_a_lock_file_naming_a_dead_process_is_taken_over(tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    run = tmp_path / "run"
    lock_path(run).write_text(f"{pid} {socket.gethostname()}\n")
    with run_lock(run):
        assert lock_path(run).read_text().split()[0] == str(os.getpid())
    assert f"left by PID {pid} (no longer running)" in capsys.readouterr().err
    lock_path(run).write_text("garbage that is no pid\n")     # an unreadable file: taken too
    with stage_lock(run, "the data stage"):
        pass


def test_an_unwritable_lock_place_is_one_message(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="cannot create the lock file"):
        with run_lock(tmp_path / "file" / "run"):
            pass


# ------------------------------------------------------------------- between processes
@pytest.mark.slow
def test_a_second_run_on_a_held_run_directory_fails_at_once_naming_the_holder(tmp_path):
    out = tmp_path / "run"
    sets = ["--set", f"output_dir={out}", "--set", f"cache_dir={tmp_path / 'cache'}"]
    first = popen_cli(*PRETRAIN, *sets, cwd=tmp_path, pause="train-step-2", env=ONE_THREAD)
    wait_paused(first)
    second = run_cli(*PRETRAIN, *sets, "--resume", "auto", cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(second, "in use by another bertcli process", f"PID {first.pid}", socket.gethostname())
    before = (out / "metrics.jsonl").read_bytes()
    first.send_signal(signal.SIGKILL)                       # dies holding the lock
    assert finish(first).rc == -signal.SIGKILL
    assert (out / "metrics.jsonl").read_bytes() == before   # the refused run wrote nothing
    third = run_cli(*PRETRAIN, *sets, "--resume", "auto", cwd=tmp_path, env=ONE_THREAD)
    assert third.rc == 0, third.output
    assert f"left by PID {first.pid} (no longer running)" in third.stderr
    assert (out / "final").is_dir()


@pytest.mark.slow
def test_two_builds_of_one_stage_end_with_one_complete_directory(tmp_path):
    """Two users sharing a cache_dir: the second waits for the first, then reuses its result."""
    sets = ["--set", f"cache_dir={tmp_path / 'cache'}"]
    first = popen_cli(*TOKENIZE, *sets, cwd=tmp_path, pause="build-tokenizer", env=ONE_THREAD)
    wait_paused(first)
    second = popen_cli(*TOKENIZE, *sets, cwd=tmp_path, env=ONE_THREAD)
    # the second process announces that it waits before it blocks; read up to that line
    waiting = ""
    while "waiting for PID" not in waiting:
        line = second.stderr.readline()
        assert line, "the second process ended without waiting"
        waiting += line
    assert f"waiting for PID {first.pid} on {socket.gethostname()}" in waiting
    release(first)
    a, b = finish(first), finish(second)
    assert a.rc == 0 and b.rc == 0, a.output + b.output
    assert "(built)" in a.stdout and "(reused)" in b.stdout
    stages = sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock"))
    assert [n.split("-")[0] for n in stages] == ["corpus", "tokenizer"]   # no temporaries left


@pytest.mark.slow
@pytest.mark.parametrize("stage, command", [("corpus", TOKENIZE), ("tokenizer", TOKENIZE),
                                            ("data", ["build-data", *TOKENIZE[1:]])])
def test_ctrl_c_during_a_stage_build_says_what_was_interrupted(tmp_path, stage, command):
    sets = ["--set", f"cache_dir={tmp_path / 'cache'}"]
    proc = popen_cli(*command, *sets, cwd=tmp_path, pause=f"build-{stage}", env=ONE_THREAD)
    wait_paused(proc)
    proc.send_signal(signal.SIGINT)
    res = finish(proc)
    assert res.rc == 130, res.output
    said = " ".join(res.stderr.split())  # the console wraps long lines
    assert f"interrupted while building the {stage} stage" in said
    assert "the next run builds that stage again" in said and "Traceback" not in res.output
    assert not list(Path(tmp_path / "cache").glob(f"{stage}-*"))            # nothing looks complete
    again = run_cli(*command, *sets, cwd=tmp_path, env=ONE_THREAD)
    assert again.rc == 0, again.output
    assert f"{stage}: built" in again.stderr or "(built)" in again.stdout


# ------------------------------------------------ lock files holding junk (a hostile state file)
HOLDERS = {"huge": b"99999999999999999999999 host\n", "negative": b"-5 host\n", "text": b"abc def\n",
           "binary": b"\xff\xfe\x00\x81garbage", "empty": b"", "zero": b"0 host\n", "json": b'{"pid": 12}\n',
           "float": b"12.5 host\n", "superscript": "\u00b2 host\n".encode(), "arabic_digits": "\u0663 host\n".encode(),
           "over_pid_max": b"4194305 host\n", "long": b"7" * 10000}


@pytest.mark.parametrize("holder", list(HOLDERS))
def test_a_free_lock_with_a_junk_holder_is_taken(tmp_path, holder, capfd):
    run = tmp_path / "run"
    lock_path(run).write_bytes(HOLDERS[holder])
    with run_lock(run):
        assert lock_path(run).read_text().split() == [str(os.getpid()), socket.gethostname()]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("holder", list(HOLDERS))
def test_a_held_lock_with_a_junk_holder_is_one_message(tmp_path, holder):
    run = tmp_path / "run"
    path = lock_path(run)
    path.write_bytes(HOLDERS[holder])
    with open(path, "rb") as other:        # another open file: its flock conflicts like a second process's
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(UserError, match="in use by another bertcli process") as info:
            with run_lock(run):
                pass
        assert "names no valid PID" in info.value.what and info.value.fix
    assert path.read_bytes() == HOLDERS[holder]          # the loser writes nothing


@pytest.mark.parametrize("holder", ["huge", "binary"])
def test_pretrain_with_a_held_junk_lock_is_one_message(tmp_path, holder):
    run = tmp_path / "run"
    path = lock_path(run)
    path.write_bytes(HOLDERS[holder])
    with open(path, "rb") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = run_cli("pretrain", "-r", "bert-tiny", "--set", f"output_dir={run}", cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, "in use by another bertcli process", "names no valid PID")
    assert path.read_bytes() == HOLDERS[holder] and not run.exists()
