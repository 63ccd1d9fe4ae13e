"""`threads: auto` reads what other processes do on our CPUs now (bertcli.core.cpu_demand).

Parsing, on /proc and cgroup files the tests write: per-CPU /proc/stat lines filtered by the
affinity mask, our process tree's CPU time, the demand between two samples, the cgroup's CPU
quota (v2 cpu.max, v1 cfs quota, missing files).

Live, against busy child processes the tests start and stop, each reading compared with a
baseline taken just before, never with an absolute core count: the suite runs on two xdist
workers on a machine other jobs may load. A reading over 100 ms moves with that other load, so
each check takes up to ATTEMPTS tries (baseline, then the readings), and passes at the first
try in which the readings agree within TOL cores. A try is informative only when the CPUs had
room for the children: busy time cannot read more than the CPUs, so the rise is expected to be
min(CPUs, baseline + k) - baseline, and only a rise of half a core or more tells a counting
estimator from one that does not count. Where no try had that room the check is skipped, saying
so, rather than passed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from bertcli.core import cpu_demand, machine

# ------------------------------------------------------------------------------ parsing


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def stat_text(*cpus: tuple[int, ...]) -> str:
    """A /proc/stat with the given per-CPU lines (user nice system idle iowait irq softirq steal
    guest guest_nice), an aggregate line and the lines that follow them."""
    total = [sum(col) for col in zip(*cpus, strict=True)]
    lines = ["cpu  " + " ".join(map(str, total))]
    lines += [f"cpu{n} " + " ".join(map(str, c)) for n, c in enumerate(cpus)]
    return "\n".join([*lines, "intr 1234 0 0", "ctxt 99", "procs_running 3", "procs_blocked 0", ""])


def proc_stat(pid: int, comm: str, ppid: int, utime: int, stime: int, cutime: int = 0, cstime: int = 0) -> str:
    """A /proc/PID/stat line: pid (comm) state ppid, then fields 5-13, utime stime cutime cstime, more."""
    return f"{pid} ({comm}) S {ppid} " + " ".join(["0"] * 9) + f" {utime} {stime} {cutime} {cstime} 20 0 1 0\n"


def test_busy_ticks_reads_only_the_affinity_cpus_and_only_busy_fields():
    text = stat_text((10, 1, 5, 900, 40, 2, 3, 4, 6, 7),      # cpu0: busy 10+1+5+2+3+4 = 25
                     (100, 0, 50, 10, 0, 0, 0, 0, 0, 0),       # cpu1: 150
                     (7, 0, 0, 0, 0, 0, 0, 0, 0, 0))           # cpu2: 7
    # idle and iowait are not busy; guest and guest_nice are inside user and nice already
    assert cpu_demand.busy_ticks(text, {0, 2}) == {0: 25, 2: 7}
    assert cpu_demand.busy_ticks(text, {1, 5}) == {1: 150}      # cpu5 (offline, or not there) has no line
    assert cpu_demand.busy_ticks(text, {5}) is None
    assert cpu_demand.busy_ticks("cpu0 1 2 3 4\n", {0}) == {0: 6}   # an old kernel's four fields: user nice system idle


def fake_tree(proc: Path, scale: int = 1) -> None:
    """init 1 -> root 10 -> 11 -> 12, and 1 -> 20 (not ours); times multiplied by `scale`."""
    write(proc / "1" / "stat", proc_stat(1, "init", 0, 500 * scale, 500 * scale))
    write(proc / "10" / "stat", proc_stat(10, "bertcli", 1, 3 * scale, 1 * scale, 2 * scale, 0))
    write(proc / "11" / "stat", proc_stat(11, "python) S 99 (x", 10, 5 * scale, 0))   # a name that looks like fields
    write(proc / "12" / "stat", proc_stat(12, "worker", 11, 7 * scale, 1 * scale))
    write(proc / "20" / "stat", proc_stat(20, "other", 1, 1000 * scale, 0))
    (proc / "30").mkdir(exist_ok=True)                 # a process that ended while /proc was listed
    write(proc / "self" / "cgroup", "0::/\n")


def list_children(proc: Path) -> None:
    """The kernel's children lists (CONFIG_PROC_CHILDREN) for fake_tree, per thread: 11 has two
    threads, and its child 12 was started by the second."""
    for pid, tid, kids in ((1, 1, "10 20"), (10, 10, "11"), (11, 11, ""), (11, 13, "12"), (12, 12, ""), (20, 20, "")):
        write(proc / str(pid) / "task" / str(tid) / "children", kids)


@pytest.mark.parametrize("listed", [False, True], ids=["every process's parent", "children lists"])
def test_tree_ticks_sums_the_root_and_its_descendants(tmp_path, listed):
    fake_tree(tmp_path)
    if listed:
        list_children(tmp_path)
        (tmp_path / "20" / "stat").write_text(proc_stat(20, "other", 10, 1000, 0))   # a parent the lists contradict
    assert cpu_demand.tree_ticks(10, tmp_path) == (3 + 1 + 2) + 5 + (7 + 1)
    assert cpu_demand.tree_ticks(11, tmp_path) == 5 + 8
    assert cpu_demand.tree_ticks(20, tmp_path) == 1000
    if listed:                                         # the lists were read, not the parents in stat
        assert cpu_demand.tree_ticks(10, tmp_path) == 19
    assert cpu_demand.tree_ticks(4242, tmp_path) == 0          # gone: nothing of ours to take off


def test_demand_between_two_samples_takes_our_tree_off(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    fake_tree(before)
    fake_tree(after, scale=2)                          # the tree at 10 used 14 more ticks
    write(before / "stat", stat_text((100, 0, 0, 0), (200, 0, 0, 0), (300, 0, 0, 0)))
    write(after / "stat", stat_text((120, 0, 0, 0), (214, 0, 10, 0), (900, 0, 0, 0)))
    a = cpu_demand.sample({0, 1}, before, root=10)
    b = cpu_demand.sample({0, 1}, after, root=10)
    assert a is not None and b is not None and (a.own, b.own) == (19, 38)
    # cpu0 +20, cpu1 +24 (cpu2 is outside the mask): 44 ticks, 19 of them our tree's
    slow = cpu_demand.demand_between(a, replace(b, at=a.at + 1.0), ticks_per_s=100)
    assert slow.cores == pytest.approx((44 - 19) / 100) and slow.window_s == pytest.approx(1.0)
    fast = cpu_demand.demand_between(a, replace(b, at=a.at + 0.1), ticks_per_s=100)
    assert fast.cores == 2.0                           # 2.5 cores' worth in 0.1 s: at most the two CPUs
    mine = cpu_demand.demand_between(a, replace(b, own=a.own + 60, at=a.at + 1.0), ticks_per_s=100)
    assert mine.cores == 0.0                           # our tree used more than the CPUs' delta: never negative


def test_no_proc_gives_no_reading_and_auto_falls_back(tmp_path, monkeypatch):
    assert cpu_demand.sample({0}, tmp_path / "none") is None
    assert cpu_demand.other_demand({0}, 0.0, tmp_path / "none") is None
    monkeypatch.setattr(os, "getloadavg", lambda: (1.1, 0.5, 0.2))
    r = machine.read_cpus(0.0, tmp_path / "none", tmp_path / "nocgroup")
    cpus = len(machine.affinity_cpus())
    assert (r.busy, r.cores, r.shown) == (1.1, cpus, "1-minute load 1.1, no /proc/stat")

    def no_loadavg():
        raise OSError("no load average")

    monkeypatch.setattr(os, "getloadavg", no_loadavg)
    r = machine.read_cpus(0.0, tmp_path / "none", tmp_path / "nocgroup")
    assert r.busy is None and r.shown == "no CPU reading on this platform" and machine.auto_threads(r) == cpus


@pytest.mark.parametrize("files, expected", [
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu.max": "50000 100000\n"}, 0.5),
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "200000\n"}, 2.0),                                     # the period left out: 100000
    ({"cpu.max": "max 100000\n", "a/b/cpu.max": "max 100000\n", "a/cpu.max": "300000 100000\n"}, 3.0),  # a parent's limit
    ({"a/b/cpu.max": "400000 100000\n", "a/cpu.max": "250000 100000\n"}, 2.5),   # the smallest on the path
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),    # v1 without a quota
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"cpu,cpuacct/a/b/cpu.cfs_quota_us": "120000\n", "cpu,cpuacct/a/b/cpu.cfs_period_us": "40000\n"}, 3.0),
    ({"cpu/cpu.cfs_quota_us": "50000\n"}, None),                       # half a pair: nothing to go by
    ({}, None),                                                        # no cgroup files at all
])
def test_cgroup_cpu_limit(tmp_path, files, expected):
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    write(proc / "self" / "cgroup", "4:cpu,cpuacct:/a/b\n0::/a/b\n")
    for name, text in files.items():
        write(cgroup / name, text)
    assert cpu_demand.cgroup_cpu_limit(cgroup, proc) == (pytest.approx(expected) if expected else None)


def test_cgroup_files_without_a_cgroup_line_read_the_root(tmp_path):
    write(tmp_path / "cgroup" / "cpu.max", "100000 100000\n")
    assert cpu_demand.cgroup_cpu_limit(tmp_path / "cgroup", tmp_path / "proc") == 1.0    # no /proc/self/cgroup


@pytest.mark.parametrize("limit, cpus, expected", [(None, 4, 4), (0.5, 4, 1), (1.5, 4, 1), (2.0, 4, 2),
                                                   (3.99, 4, 3), (8.0, 4, 4), (1.9999999999, 2, 2)])
def test_quota_threads_takes_the_whole_cores_the_quota_pays_for(limit, cpus, expected):
    assert cpu_demand.quota_threads(limit, cpus) == expected


def test_read_cpus_on_files_caps_by_the_quota_and_names_the_reading(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    fake_tree(proc)
    write(proc / "stat", stat_text(*[(5, 0, 0, 100)] * 4))   # the file does not change: no demand
    write(cgroup / "cpu.max", "150000 100000\n")
    r = machine.read_cpus(0.0, proc, cgroup)
    assert (r.cpus, r.cores, r.busy, r.quota) == (4, 1, 0.0, 1.5)
    assert r.shown.startswith("other demand 0.0 cores over ") and r.shown.endswith(" ms")
    choice = machine.choose_threads("auto", "train.threads", read=lambda: r)
    assert choice.count == 1 and choice.why.startswith("train.threads: auto, 1 core (cgroup quota 1.5 of 4 CPUs), ")


# ------------------------------------------------------------------------------ live
ATTEMPTS = 6
TOL = 0.35      # cores: 100 ms holds 10 ticks per CPU, each reading is +-1 tick per CPU, and the other load moves
SPIN = "print('ready', flush=True)\nwhile True:\n    pass\n"
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []

live = pytest.mark.skipif(not Path("/proc/stat").exists() or not CPUS, reason="no per-CPU /proc/stat")


@contextmanager
def spinning(k: int) -> Iterator[list[subprocess.Popen]]:
    """k CPU-bound children of this process, running once they say so; killed and reaped on exit."""
    procs = [subprocess.Popen([sys.executable, "-S", "-c", SPIN], stdout=subprocess.PIPE, text=True) for _ in range(k)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()                                   # reaped: ended, not a zombie that might still count
            if p.stdout is not None:
                p.stdout.close()


@pytest.fixture(scope="module")
def stand_in():
    """An idle process whose tree is excluded in place of this one: the spinning children are
    this process's, and bertcli's own tree is taken off every reading. So the readings below
    count the spinners as other processes, as bertcli sees a job that is not its own."""
    p = subprocess.Popen([sys.executable, "-S", "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield p.pid
    assert p.stdin is not None
    p.stdin.close()
    p.wait()


def reading(root: int) -> float:
    d = cpu_demand.other_demand(CPUS, root=root)
    assert d is not None and d.window_s >= 0.099
    return d.cores


def rise(base: float, k: int) -> float:
    """What k busy children should add to a baseline: busy time reads at most the CPUs."""
    return min(float(len(CPUS)), base + k) - base


def first_agreeing_try(k: int, measure: Callable[[], tuple[float, ...]], agrees: Callable[..., bool],
                       what: str) -> None:
    """Up to ATTEMPTS tries of `measure` (the baseline first, then readings around k busy
    children); passes at the first informative try whose readings `agrees` holds, skips when no
    try was informative (the CPUs were full), else fails listing every try."""
    tries = []
    for _ in range(ATTEMPTS):
        readings = measure()
        tries.append(tuple(round(x, 2) for x in readings))
        if rise(readings[0], k) >= 0.5 and agrees(*readings):
            return
    if not any(rise(t[0], k) >= 0.5 for t in tries):
        pytest.skip(f"the CPUs were full in all {ATTEMPTS} tries ({what}): {tries}")
    pytest.fail(f"no try of {ATTEMPTS} agreed within {TOL} cores ({what}): {tries}")


@live
@pytest.mark.parametrize("k", [1, 2])
def test_the_reading_rises_by_the_busy_children_running_now(stand_in, k):
    """k busy children raise the reading by min(CPUs, baseline + k) - baseline."""
    def measure():
        base = reading(stand_in)
        with spinning(k):
            return base, reading(stand_in)

    first_agreeing_try(k, measure, lambda base, during: abs(during - base - rise(base, k)) <= TOL,
                       "baseline, during")


@live
def test_the_reading_returns_to_its_baseline_right_after_a_busy_child_ended(stand_in):
    """The child is seen while it runs and not once it has ended (the load average would still
    count it for about a minute)."""
    def measure():
        base = reading(stand_in)
        with spinning(1):
            during = reading(stand_in)
        return base, during, reading(stand_in)        # the child was killed and reaped just before

    first_agreeing_try(1, measure, lambda base, during, after: abs(during - base - rise(base, 1)) <= TOL
                       and abs(after - base) <= TOL, "baseline, during, after")


@live
def test_our_own_busy_children_are_not_other_demand(stand_in):
    """The same busy child is other demand to a process that is not its ancestor, and none to
    this one (its parent): bertcli's own tree never counts against itself."""
    def measure():
        base = reading(stand_in)
        with spinning(1):
            return base, reading(stand_in), reading(os.getpid())

    first_agreeing_try(1, measure, lambda base, theirs, ours: abs(theirs - base - rise(base, 1)) <= TOL
                       and abs(ours - base) <= TOL, "baseline, as other, as ours")
