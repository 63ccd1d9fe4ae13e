"""Sweeps past one process (bertcli/finetune/sweep.py, sweep_shared.py): a seed sweep under
torchrun (every run on both gloo ranks, rank 0 writing the sweep folder) and a sweep folder
written by two independent processes at once (`--shared`, one per GPU on a real machine) both
equal the one-process sweep; a run held by another process is skipped, and the half of a shared
sweep that did not finish leaves no summary, until its command runs again.

Tiny L1 H32 classifier of test_finetune_sweep.py, 2 seeds of 24 steps, dropout 0."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import pytest
from conftest import ONE_THREAD, finish, popen_cli, run_cli, wait_paused
from helpers.sweeps import assert_close_json, write_task
from helpers.sweeps import classify as _classify
from helpers.sweeps import read_json as _json
from helpers.sweeps import timeless as _timeless

SEEDS = ("--seeds", "42,43", "--lr", "1e-2", "--set", "finetune.threads=1")


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> Path:
    return write_task(tmp_path_factory.mktemp("sweep_ddp"))


@pytest.fixture(scope="module")
def one(task) -> Path:
    """The one-process sweep of seeds 42 and 43: what the others must equal."""
    out = task / "one"
    r = run_cli(*_classify(task, out, *SEEDS), cwd=task, env=ONE_THREAD)
    assert r.rc == 0, r.output
    return out


def _close(a, b, where: str) -> None:
    assert_close_json(a, b, where, rel=1e-5, abs=1e-6)


def _runs_equal(one: Path, other: Path, exact: bool) -> None:
    """The sweep summaries and every run's results.json (timings and folders aside) agree."""
    a, b = _json(one / "results.json")["sweep"], _json(other / "results.json")["sweep"]
    runs = a["tasks"]["classify"]["runs"]
    assert [r["dir"] for r in runs] == ["seed-42", "seed-43"] and all(r["status"] == "ok" for r in runs)
    for run in runs:
        ra, rb = (_timeless(_json(d / run["dir"] / "results.json"), d / run["dir"]) for d in (one, other))
        rb["hyperparameters"]["micro_batch_size"] = None           # the torchrun run accumulates (equal figures)
        assert ra == rb if exact else _close(ra, rb, run["dir"]) is None
    assert a == b if exact else _close(a, b, "sweep") is None
    kept = a["tasks"]["classify"]["kept"]["dir"]
    assert sorted(p.parent.name for p in other.glob("seed-*/model.safetensors")) == [kept]   # pruned as in one
    assert (other / "model.safetensors").is_file()
    assert not [p.name for p in other.iterdir() if ".lock" in p.name or ".bertcli-tmp-" in p.name]
    listed = set(_json(other / ".bertcli-output.json")["files"])
    assert {"results.json", "sweep.json", "seed-42/results.json", "seed-43/results.json"} <= listed


def _only(seed: int) -> tuple[str, ...]:
    """One seed as a sweep of one (`--seeds 43` alone would be a count: 43 seeds)."""
    return ("--seeds", f"{seed},") if seed == 43 else ("--seed", str(seed), "--seeds", "1")   # both spellings


def test_shared_sweep_folder_two_processes_equal_one(task, one):
    """Two processes at once into one folder with --shared, --seeds 42, (a process of its own) and
    --seeds 43, (this one): each trains its run, the last to finish writes the summary, equal to
    the one-process sweep's (every figure, the kept run, the pruned weights). Then, in a second
    folder, a crash: a process training seed-43 (held at its step 5) is killed outright while
    another, given --seeds 42,43, trains seed-42, skips the held seed-43, says what is left and
    writes no summary; nothing there looks complete for seed-43. A one-process sweep cannot join,
    --force and other settings are refused; the killed process's command run again finishes the
    sweep, equal to one process, its dead temporary gone."""
    shared = task / "shared"
    other = popen_cli(*_classify(task, shared, *SEEDS[2:], *_only(42), "--shared"), cwd=task, env=ONE_THREAD)
    r = run_cli(*_classify(task, shared, *SEEDS[2:], *_only(43), "--shared"), cwd=task, env=ONE_THREAD)
    outs = [r, finish(other)]
    assert all(r.rc == 0 for r in outs), [r.output[-3000:] for r in outs]
    assert sum("left:" in r.output for r in outs) <= 1
    _runs_equal(one, shared, exact=True)
    assert _json(shared / "sweep.json")["seeds"] == [42, 43]

    half = task / "half"
    killed = popen_cli(*_classify(task, half, *SEEDS[2:], *_only(43), "--shared"), cwd=task, env=ONE_THREAD,
                       pause="finetune-step-5")
    wait_paused(killed)
    r = run_cli(*_classify(task, half, *SEEDS, "--shared"), cwd=task, env=ONE_THREAD)
    os.killpg(killed.pid, signal.SIGKILL)
    finish(killed)
    assert r.rc == 0, r.output
    assert "seed-43): another process trains it, skipped" in r.output and "left: seed-43" in r.output
    assert not (half / "results.json").exists() and not (half / "seed-43").exists()
    assert (half / "seed-42" / "results.json").is_file() and _json(half / "sweep.json")["seeds"] == [42, 43]
    r = run_cli(*_classify(task, half, *SEEDS), cwd=task, env=ONE_THREAD)
    assert r.rc == 2 and "already holds an earlier result" in r.output, r.output
    r = run_cli(*_classify(task, half, *SEEDS[2:], *_only(43), "--shared", "--force"), cwd=task, env=ONE_THREAD)
    assert r.rc == 2 and "--force with --shared" in r.output, r.output
    r = run_cli(*_classify(task, half, *SEEDS[2:], *_only(43), "--shared", "--epochs", "2"), cwd=task,
                env=ONE_THREAD)
    assert r.rc == 2 and "other settings" in r.output, r.output
    r = run_cli(*_classify(task, half, *SEEDS[2:], *_only(43), "--shared"), cwd=task, env=ONE_THREAD)
    assert r.rc == 0, r.output
    _runs_equal(one, half, exact=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sweep_under_torchrun_equals_one_process(task, one):
    """`bertcli finetune classify ... --seeds 42,43` in two workers of one job (RANK 0 and 1 of
    WORLD_SIZE 2, as torchrun starts them; the real launcher is tested in test_finetune_ddp.py):
    each run trains on both ranks (global batch 8 = 4 + 4, each share in micro-batches of 3 + 1:
    accumulation under DDP, finetune/accumulate.py), rank 0 alone writes the sweep folder;
    every run's figures and the summary equal the one-process sweep's to float tolerance (sums
    in another order), and no other folder or temporary is left."""
    out, port = task / "torchrun", str(_free_port())
    procs = [popen_cli(*_classify(task, out, *SEEDS, "--set", "finetune.micro_batch_size=3"), cwd=task,
                       env={"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": port, "OMP_NUM_THREADS": "1"}) for rank in (0, 1)]
    outs = [finish(p) for p in procs]
    assert all(r.rc == 0 for r in outs), [r.output[-3000:] for r in outs]
    _runs_equal(one, out, exact=False)
    assert sorted(p.name for p in task.glob("torchrun*")) == ["torchrun"]
    assert json.loads((out / "sweep.json").read_text())["seeds"] == [42, 43]


def _step_losses(folder: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_micro_batches_equal_the_whole_batch(task, one, monkeypatch):
    """finetune.micro_batch_size (finetune/accumulate.py) at dropout 0: seed 42's run with
    micro-batches of 3 (8 = 3 + 3 + 2: a batch that does not divide) and with `auto` on a
    device whose free memory fits 2 rows of the real probe's measure (8 = 4 x 2) takes every step
    with the losses of the whole-batch run of the one-process sweep, to float tolerance, and
    ends with its figures."""
    from bertcli.train import memory

    whole = _step_losses(one / "seed-42")
    assert len(whole) == 24
    real = memory.plan

    def room_for_two(local, static, per_seq, fixed, available, *args, **kwargs):
        fits = int(static + memory.MARGIN * (fixed + per_seq * 2.5)) + memory.RESERVE
        return real(local, static, per_seq, fixed, fits, "a test's device", *args[1:], **kwargs)

    monkeypatch.setattr(memory, "plan", room_for_two)
    for value, said in (("3", None), ("auto", "finetune.micro_batch_size auto: micro-batch 2 of 8")):
        out = task / f"micro-{value}"
        r = run_cli(*_classify(task, out, "--lr", "1e-2", "--set", "finetune.threads=1",
                               "--set", f"finetune.micro_batch_size={value}"), cwd=task, env=ONE_THREAD)
        assert r.rc == 0, r.output
        assert said is None or said in r.output, r.output
        assert _step_losses(out) == pytest.approx(whole, rel=1e-5, abs=1e-6), value
        a, b = _timeless(_json(one / "seed-42" / "results.json"), one / "seed-42"), _timeless(_json(out / "results.json"), out)
        micro = (a["hyperparameters"].pop("micro_batch_size"), b["hyperparameters"].pop("micro_batch_size"))
        assert micro == (None, 3 if value == "3" else value)
        _close(a, b, value)
