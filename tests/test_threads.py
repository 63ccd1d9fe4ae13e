"""Intra-op threads: `threads: auto` takes the cores other processes leave free (a simulated
reading here; the reading itself is tests/test_cpu_demand.py's), an explicit count or
OMP_NUM_THREADS overrides it without sampling, every pretraining checkpoint records the count,
and `--resume` uses the recorded count, so a resumed run is bitwise the uninterrupted one even
when the machine's load would make auto choose otherwise; a different explicit count is said."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from conftest import assert_user_error, finish, popen_cli, run_cli, run_cli_process, wait_paused

from bertcli.config.recipe import load_recipe
from bertcli.core import machine
from bertcli.core.errors import UserError
from bertcli.train import checkpoint as ck

NO_THREAD_ENV = {"OMP_NUM_THREADS": None, "MKL_NUM_THREADS": None}   # the thread choice is bertcli's own


@pytest.fixture
def machine_at(monkeypatch):
    """Simulate the machine: `machine_at(cpus, busy, cores=None)`, `busy` the cores other
    processes hold (None: nothing could be read), `cores` the CPUs the cgroup's quota allows
    (default: all); the 1-minute load average reads `busy` too, for the explicit counts' warning.
    bertcli.core.cpu_demand's own tests read real and written /proc files."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def at(cpus: int, busy: float | None, cores: int | None = None):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
        shown = f"other demand {busy:.1f} cores over 100 ms" if busy is not None else "no CPU reading on this platform"
        reading = machine.CpuReading(cpus, cores or cpus, busy, shown)
        monkeypatch.setattr(machine, "read_cpus", lambda: reading)
        monkeypatch.setattr(machine, "cpu_cores", lambda: cores or cpus)

        def getloadavg():
            if busy is None:
                raise OSError("no load average")
            return (busy, busy, busy)

        monkeypatch.setattr(os, "getloadavg", getloadavg)

    return at


@pytest.mark.parametrize("cpus,busy,cores,expected", [
    (2, 0.0, None, 2), (2, 0.4, None, 2), (2, 0.6, None, 1), (2, 1.0, None, 1), (2, 2.0, None, 1),   # never below one
    (16, 3.4, None, 13), (16, 3.6, None, 12), (4, None, None, 4),        # no reading: all the cores
    (4, 0.0, 1, 1), (4, 1.0, 3, 3), (4, 2.0, 3, 2), (4, None, 2, 2),    # the cgroup's quota caps them
])
def test_auto_takes_the_cores_other_processes_leave_free(machine_at, cpus, busy, cores, expected):
    machine_at(cpus, busy, cores)
    choice = machine.choose_threads("auto", "train.threads")
    assert choice.count == expected and choice.source == "auto"
    assert f"{cores or cpus} core" in choice.why
    if busy is not None:
        assert f"other demand {busy:.1f} cores over 100 ms" in choice.why
    assert choice.note is None


def test_an_explicit_count_is_not_sampled(machine_at, monkeypatch):
    machine_at(2, 0.0)

    def no_sampling():
        raise AssertionError("sampled the CPUs for an explicit count")

    monkeypatch.setattr(machine, "read_cpus", no_sampling)
    assert machine.choose_threads(2, "train.threads").count == 2
    assert machine.choose_threads("auto", "train.threads", recorded=1).count == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert machine.choose_threads("auto", "train.threads").count == 3


def test_an_explicit_count_then_omp_num_threads_override_auto(machine_at, monkeypatch):
    machine_at(2, 6.0)                                   # auto would take 1
    assert machine.choose_threads(2, "train.threads").count == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    env = machine.choose_threads("auto", "train.threads")
    assert (env.count, env.source, env.why) == (3, "env", "OMP_NUM_THREADS=3")
    assert machine.choose_threads(1, "train.threads").count == 1      # the recipe's count wins over the env
    assert "stall" in (env.note or "")                    # 3 threads on a busy 2-core machine: said
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")          # OpenMP's nested form: the outer level
    assert machine.choose_threads(None, "--threads").count == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "many")
    with pytest.raises(UserError, match="OMP_NUM_THREADS is 'many'"):
        machine.choose_threads("auto", "train.threads")


def test_resume_takes_the_recorded_count_and_says_when_an_explicit_one_differs(machine_at, monkeypatch):
    machine_at(2, 0.0)                                    # auto would take 2
    resumed = machine.choose_threads("auto", "train.threads", recorded=1)
    assert (resumed.count, resumed.source, resumed.note) == (1, "checkpoint", None)
    other = machine.choose_threads(2, "train.threads", recorded=1)
    assert other.count == 2 and "resume is exact only at 1 threads" in other.note
    assert machine.choose_threads(1, "train.threads", recorded=1).note is None   # the same count: nothing to say
    swept = machine.choose_threads("auto", "finetune.threads", recorded=1, recorded_by="sweep")
    assert (swept.count, swept.source) == (1, "sweep") and "checkpoint" not in swept.why   # a sweep's run 2 resumes nothing
    assert "the sweep's count" in swept.why
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert "resume is exact only at 1 threads" in machine.choose_threads("auto", "train.threads", recorded=1).note


def test_use_threads_sets_torch_and_logs_the_choice(machine_at, capsys):
    machine_at(8, 5.2)                                    # 8 - round(5.2) = 3
    before = torch.get_num_threads()
    try:
        assert machine.use_threads("auto", "finetune.threads", "cpu") == 3
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    err = capsys.readouterr().err
    assert "threads: 3 (finetune.threads: auto, 8 cores, other demand 5.2 cores over 100 ms)" in err


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="no /proc/stat: auto reads the load average")
def test_auto_logs_a_sample_of_the_cpus_taken_now(monkeypatch, capsys):
    """Unsimulated: the line names a 100 ms sample of other processes' demand, not the load average."""
    import re

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        count = machine.use_threads("auto", "train.threads", "cpu")
    finally:
        torch.set_num_threads(before)
    line = re.search(r"threads: (\d+) \(train\.threads: auto, (\d+) cores?(?: \(cgroup quota [\d.]+ of \d+ CPUs\))?, "
                     r"other demand (\d+\.\d) cores over (\d+) ms\)", capsys.readouterr().err)
    assert line, "no sampled threads line"
    assert int(line[1]) == count and 1 <= count <= int(line[2]) == machine.cpu_cores()
    assert 0.0 <= float(line[3]) <= len(machine.affinity_cpus()) and int(line[4]) >= 100


def test_the_recipe_keys_are_checked():
    assert load_recipe(None, []).train.threads == "auto" and load_recipe(None, []).finetune.threads == "auto"
    assert load_recipe(None, ["train.threads=2", "finetune.threads=1"]).train.threads == 2
    for bad, why in (("train.threads=0", "must be >= 1"), ("train.threads=two", "expected int or auto"),
                     ("finetune.threads=1.5", "expected int or auto")):
        with pytest.raises(UserError, match=why):
            load_recipe(None, [bad])


def test_a_bad_threads_flag_is_a_user_error(tmp_path):
    (tmp_path / "in.txt").write_text("hello\n")
    assert_user_error(run_cli("predict", "-c", tmp_path, "-i", tmp_path / "in.txt", "--threads", "0", cwd=tmp_path),
                      "--threads")


# ------------------------------------------------------------------------------ end to end
TINY = ["corpus.sources=[{path: builtin, max_documents: 40}]", "corpus.validation_fraction=0.1",
        "tokenizer.vocab_size=400", "data.max_seq_length=32", "data.dupe_factor=1",
        "model.hidden_size=32", "model.num_hidden_layers=1", "model.num_attention_heads=2",
        "model.intermediate_size=64", "train.batch_size=8", "train.max_steps=8", "train.warmup_steps=2",
        "train.learning_rate=3e-3", "train.log_every=1", "train.eval_every=4", "train.save_every=2",
        "train.eval_batches=2", "train.num_workers=0", "train.tensorboard=false", "train.keep_last=10"]


def pretrain_args(out: Path, *sets: str) -> list[str]:
    return ["pretrain", "--recipe", "bert-tiny", *[x for s in (*TINY, *sets) for x in ("--set", s)],
            "--set", f"output_dir={out}", "--set", f"cache_dir={out.parent / 'cache'}"]


def records(out: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in ("tokens_per_s", "train_seconds")}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def recorded_threads(out: Path) -> dict[str, int]:
    return {p.name: ck.read(p).state.threads for p in ck.list_checkpoints(out)}


def test_resume_uses_the_recorded_count_and_is_bitwise(tmp_path):
    """Trained at cores+1 threads, a count `auto` never picks on this machine: the resume, at the
    default `auto` and with no OMP_NUM_THREADS, takes the checkpoint's count and ends float for
    float as the uninterrupted run; a resume with another explicit count says it is inexact."""
    n = machine.cpu_cores() + 1
    ref = tmp_path / "ref"
    r = run_cli_process(*pretrain_args(ref, f"train.threads={n}"), cwd=tmp_path, env=NO_THREAD_ENV)
    assert r.rc == 0, r.output
    assert f"threads: {n} (train.threads: {n})" in r.stderr, r.stderr
    assert recorded_threads(ref) == {f"step-{s:07d}": n for s in (2, 4, 6, 8)}     # in every checkpoint

    killed = tmp_path / "killed"
    proc = popen_cli(*pretrain_args(killed, f"train.threads={n}"), cwd=tmp_path, pause="train-step-6", env=NO_THREAD_ENV)
    wait_paused(proc)                                     # steps 1-5 done, step-4 checkpoint written
    proc.send_signal(signal.SIGKILL)
    assert finish(proc).rc == -signal.SIGKILL
    other = tmp_path / "other"
    import shutil

    shutil.copytree(killed, other)
    r = run_cli_process(*pretrain_args(killed), "--resume", "auto", cwd=tmp_path, env=NO_THREAD_ENV)   # threads: auto
    assert r.rc == 0, r.output
    assert f"threads: {n} (the checkpoint's count" in r.stderr and "step 4" in r.stderr, r.stderr
    assert records(killed) == records(ref)
    from safetensors.torch import load_file

    a, b = load_file(str(ref / "final" / "model.safetensors")), load_file(str(killed / "final" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert recorded_threads(killed)["step-0000008"] == n

    r = run_cli_process(*pretrain_args(other, "train.threads=1"), "--resume", "auto", cwd=tmp_path, env=NO_THREAD_ENV)
    assert r.rc == 0, r.output
    assert "threads: 1 (train.threads: 1)" in r.stderr, r.stderr
    assert f"resume is exact only at {n} threads" in r.stderr, r.stderr
    assert recorded_threads(other)["step-0000008"] == 1   # the record says what this segment ran at


@pytest.mark.parametrize("argv, name", [
    (["features", "-c", "ck", "-i", "t.txt", "-o", "f.parquet"], "features"),
    (["export", "-c", "ck", "-o", "bundle"], "export"),
    (["predict", "-c", "ck", "-i", "x.jsonl"], "predict"),
])
def test_threads_flags_reach_the_api(monkeypatch, argv, name):
    from typer.testing import CliRunner

    from bertcli import api
    from bertcli.cli import app

    seen: list = []

    def record(*args, **kwargs):
        seen.append(kwargs.get("threads", "absent"))
        raise RuntimeError("recorded")

    monkeypatch.setattr(api, name, record)
    CliRunner().invoke(app, argv)
    CliRunner().invoke(app, [*argv, "--threads", "2"])
    assert seen == [None, 2]                              # None: auto (bertcli.core.machine)
