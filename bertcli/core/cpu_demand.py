"""What the CPUs this process may use are doing now: the CPU time other processes take over a
short window, and the cores the cgroup's quota pays for. `threads: auto` (bertcli.core.machine)
subtracts the first from the second.

Why per-CPU busy time from /proc/stat and not the run queue (`procs_running`): the per-CPU lines
can be filtered by the affinity mask (procs_running counts every CPU, the ones taskset or a
cpuset keeps us off included); they integrate every tick of every CPU over the window, where the
run queue gives a few snapshots, one of them always the reader itself; and our own process
tree's share is taken off in the same unit (its CPU time in /proc/PID/stat). Busy time reads at
most the CPUs, where the run queue would read 4 for four jobs on two: auto gives one thread
either way, so that ceiling loses nothing it needs. The 1-minute load average, the reading before
this one, trails by about a minute: it still counts a job that ended just before the run.

Every reader takes the /proc and cgroup roots as arguments, so that tests feed it files of their
own; a file that is missing or unreadable gives None and the caller falls back."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CGROUP = Path("/sys/fs/cgroup")
WINDOW_S = 0.1                       # the sampling window: short enough to be unnoticed at startup
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)    # user nice system irq softirq steal (guest is inside user and nice)


def clock_ticks() -> int:
    """The unit of /proc's CPU times, per second (USER_HZ, 100 on Linux)."""
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (AttributeError, ValueError, OSError):
        return 100


def busy_ticks(stat_text: str, cpus: Iterable[int]) -> dict[int, int] | None:
    """Each CPU's busy time so far in clock ticks, from /proc/stat's per-CPU lines (`cpuN user
    nice system idle iowait irq softirq steal ...`), for the CPUs in `cpus` that have a line (an
    offline CPU has none). None when none of them has one."""
    wanted = set(cpus)
    busy: dict[int, int] = {}
    for line in stat_text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or not name[3:].isdigit() or int(name[3:]) not in wanted:
            continue
        fields = [int(x) for x in rest.split()]
        busy[int(name[3:])] = sum(fields[i] for i in _BUSY_FIELDS if i < len(fields))
    return busy or None


def _stat_fields(text: str) -> list[str]:
    """/proc/PID/stat after the command name, which may hold spaces and parentheses: the fields
    from the state (field 3) on, so index 0 is the state, 1 the parent pid, 11-14 utime, stime,
    cutime and cstime."""
    return text[text.rindex(")") + 2:].split()


def _ticks(stat_text: str) -> int:
    """utime + stime + cutime + cstime of one /proc/PID/stat."""
    return sum(int(x) for x in _stat_fields(stat_text)[11:15])


def _children_listed(root: int, proc: Path) -> set[int] | None:
    """`root` and its descendants from /proc/PID/task/TID/children, which lists each thread's
    children; None where the kernel has no such files (CONFIG_PROC_CHILDREN off) or `root` has
    no task folder to read them from."""
    try:
        first = next(iter((proc / str(root) / "task").iterdir()))
    except (OSError, StopIteration):
        return None
    if not (first / "children").exists():
        return None
    ours, todo = {root}, [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = list((proc / str(pid) / "task").iterdir())
        except OSError:
            continue                               # ended meanwhile
        for task in tasks:
            try:
                kids = {int(x) for x in (task / "children").read_text().split()}
            except (OSError, ValueError):
                continue
            todo += kids - ours
            ours |= kids
    return ours


def tree_ticks(root: int, proc: Path = PROC) -> int:
    """CPU time of process `root` and every live descendant, in clock ticks: user and system time
    of all their threads, and of the children each has reaped (so that a child that ends inside
    the window keeps counting as ours). The tree comes from the kernel's children lists, else from
    every process's parent in /proc (a few ms per hundred processes). Processes that vanish while
    /proc is read are skipped."""
    listed = _children_listed(root, proc)
    if listed is not None:
        total = 0
        for pid in listed:
            try:
                total += _ticks((proc / str(pid) / "stat").read_text())
            except (OSError, ValueError):
                continue
        return total
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
            pid, ppid, own = int(entry.name), int(_stat_fields(text)[1]), _ticks(text)
        except (OSError, ValueError, IndexError):
            continue
        parent[pid], ticks[pid] = ppid, own
    ours = {root}
    grew = True
    while grew:                                   # descendants: children of ours until none is new
        new = {pid for pid, ppid in parent.items() if ppid in ours and pid not in ours}
        ours |= new
        grew = bool(new)
    return sum(ticks.get(pid, 0) for pid in ours)


@dataclass(frozen=True)
class Sample:
    """One look at the CPUs: each CPU's busy ticks so far, our tree's ticks so far, and when."""
    busy: dict[int, int]
    own: int
    at: float            # time.monotonic() seconds


@dataclass(frozen=True)
class Demand:
    cores: float         # CPU time other processes took on our CPUs, per second of the window
    window_s: float      # the window actually measured (a loaded machine oversleeps)


def sample(cpus: Iterable[int], proc: Path = PROC, root: int | None = None) -> Sample | None:
    """Busy ticks of `cpus` and CPU ticks of `root`'s tree (default: this process) now; None
    where /proc/stat has no line for those CPUs or cannot be read (not Linux, /proc not mounted)."""
    try:
        at = time.monotonic()
        busy = busy_ticks((proc / "stat").read_text(), cpus)
        if busy is None:
            return None
        return Sample(busy, tree_ticks(os.getpid() if root is None else root, proc), at)
    except (OSError, ValueError, IndexError):
        return None


def demand_between(before: Sample, after: Sample, ticks_per_s: int | None = None) -> Demand:
    """The cores other processes kept busy between two samples: the CPUs' busy time less our
    tree's, per second, at most the CPUs (a CPU missing from `after` went offline: it adds 0)."""
    elapsed = max(after.at - before.at, 1e-6)
    used = sum(after.busy.get(c, b) - b for c, b in before.busy.items())
    others = max(0, used - (after.own - before.own)) / ((ticks_per_s or clock_ticks()) * elapsed)
    return Demand(min(float(len(before.busy)), others), elapsed)


def other_demand(cpus: Iterable[int], window_s: float = WINDOW_S, proc: Path = PROC,
                 root: int | None = None) -> Demand | None:
    """The cores that processes other than `root`'s tree (default: this process) keep busy on
    `cpus` over the next `window_s` seconds; None where /proc cannot tell (see `sample`)."""
    cpus = sorted(set(cpus))
    before = sample(cpus, proc, root)
    if before is None:
        return None
    time.sleep(max(0.0, window_s - (time.monotonic() - before.at)))   # the window counts the reading
    after = sample(cpus, proc, root)
    return None if after is None else demand_between(before, after)


def _quota_cores(text: str) -> float | None:
    """cgroup v2's cpu.max (`QUOTA PERIOD`, QUOTA `max` for none) as cores, None without a quota."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    period = int(parts[1]) if len(parts) > 1 else 100_000
    return int(parts[0]) / period if period > 0 else None


def _own_cgroups(proc: Path) -> dict[str, str]:
    """/proc/self/cgroup as {controller: path}; cgroup v2's single line is under ""."""
    found: dict[str, str] = {}
    try:
        text = (proc / "self" / "cgroup").read_text()
    except OSError:
        return found
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                found[controller] = parts[2]
    return found


def _up_from(base: Path, path: str) -> list[Path]:
    """`base/path` and each of its parents up to `base`: a limit on any ancestor applies too."""
    parts = [p for p in path.strip("/").split("/") if p]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def cgroup_cpu_limit(cgroup: Path = CGROUP, proc: Path = PROC) -> float | None:
    """The cores the cgroup's CPU quota pays for, the smallest along our cgroup's path (v2
    `cpu.max`; v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`, quota -1 for none); None without a
    quota or where the files are missing (not Linux, no cgroup mounted: the CPUs are the limit)."""
    groups = _own_cgroups(proc)
    limits: list[float] = []
    for d in _up_from(cgroup, groups.get("", "/")):
        try:
            cores = _quota_cores((d / "cpu.max").read_text())
        except (OSError, ValueError, IndexError):
            continue
        if cores is not None:
            limits.append(cores)
    v1_path = groups.get("cpu", "/")
    for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        for d in _up_from(cgroup / mount, v1_path):
            try:
                quota = int((d / "cpu.cfs_quota_us").read_text())
                period = int((d / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                continue
            if quota > 0 and period > 0:
                limits.append(quota / period)
    return min(limits) if limits else None


def quota_threads(limit: float | None, cpus: int) -> int:
    """The threads a quota of `limit` cores keeps busy without throttling every period: its
    whole cores (at least one), at most the CPUs."""
    if limit is None:
        return cpus
    return max(1, min(cpus, math.floor(limit + 1e-9)))
