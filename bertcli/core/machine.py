"""How many intra-op threads a run uses, decided once before the long work starts.

On a shared CPU torch's default (one thread per core) stalls at every OpenMP barrier while
another process holds a core: a tiny model trained 5-40x slower with it than with one thread
on a two-core machine that other jobs kept busy. So `threads: auto` (the default) takes the
cores the machine has free now: the CPUs less what other processes use over a 100 ms sample
(bertcli.core.cpu_demand), not the 1-minute load average, which still counts a job that ended a
minute ago (issue 33: one thread on an idle machine, right after pip). The count changes the order of float reductions, so a run
gives the same bits only at a fixed count: pretraining records it in every checkpoint and a
resume uses the recorded count, whatever the load is then (bertcli.train.pipeline)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bertcli.core import console, cpu_demand
from bertcli.core.errors import UserError


@dataclass(frozen=True)
class ThreadChoice:
    count: int
    why: str                     # where the count came from, for the log line
    source: str                  # "setting", "env", "checkpoint", "sweep" or "auto"
    note: str | None = None      # a warning to show with it (resume inexact, busy machine)


@dataclass(frozen=True)
class CpuReading:
    """What `auto` decides from: the CPUs, the cores the cgroup's quota allows, and the cores
    other processes hold now (None where nothing could be read)."""
    cpus: int
    cores: int                   # the CPUs, capped by the cgroup's CPU quota
    busy: float | None
    shown: str                   # the reading as the log line names it, e.g. "other demand 0.1 cores over 100 ms"
    quota: float | None = None   # the cgroup's quota in cores, when it caps the CPUs


def affinity_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity mask: taskset, a container's cpuset)."""
    try:
        return set(os.sched_getaffinity(0)) or {0}
    except (AttributeError, OSError):     # not on every platform
        return set(range(max(1, os.cpu_count() or 1)))


def cpu_cores() -> int:
    """The cores this process may keep busy: its CPUs, capped by the cgroup's CPU quota."""
    cpus = len(affinity_cpus())
    return cpu_demand.quota_threads(cpu_demand.cgroup_cpu_limit(), cpus)


def current_load() -> float | None:
    """The 1-minute load average, or None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def read_cpus(window_s: float = cpu_demand.WINDOW_S, proc: Path = cpu_demand.PROC,
              cgroup: Path = cpu_demand.CGROUP) -> CpuReading:
    """Sample what other processes do on our CPUs now (bertcli.core.cpu_demand); where /proc
    cannot tell, fall back to the 1-minute load average, and where there is none, to every core."""
    cpus = affinity_cpus()
    quota = cpu_demand.cgroup_cpu_limit(cgroup, proc)
    cores = cpu_demand.quota_threads(quota, len(cpus))
    shown_quota = quota if cores < len(cpus) else None
    demand = cpu_demand.other_demand(cpus, window_s, proc)
    if demand is not None:
        return CpuReading(len(cpus), cores, demand.cores,
                          f"other demand {demand.cores:.1f} cores over {demand.window_s * 1000:.0f} ms", shown_quota)
    load = current_load()
    if load is not None:
        return CpuReading(len(cpus), cores, load, f"1-minute load {load:.1f}, no /proc/stat", shown_quota)
    return CpuReading(len(cpus), cores, None, "no CPU reading on this platform", shown_quota)


def auto_threads(reading: CpuReading) -> int:
    """The cores other processes leave free: max(1, CPUs - round(busy)), at most the cores the
    quota allows; all of them without a reading."""
    if reading.busy is None:
        return reading.cores
    return max(1, min(reading.cores, reading.cpus - round(reading.busy)))


def _env_threads() -> int | None:
    raw = os.environ.get("OMP_NUM_THREADS", "").strip()
    if not raw:
        return None
    first = raw.split(",")[0].strip()          # OpenMP's nested form "4,2": the outer level
    if not first.isdigit() or int(first) < 1:
        raise UserError(f"OMP_NUM_THREADS is {raw!r}, not a positive whole number", where="the environment",
                        fix="set OMP_NUM_THREADS=1 (or another count), or unset it to let bertcli choose")
    return int(first)


def choose_threads(setting: int | str | None, key: str, recorded: int | None = None,
                   read: Callable[[], CpuReading] | None = None, recorded_by: str = "checkpoint") -> ThreadChoice:
    """The intra-op thread count for a run. `setting`: the recipe key's value (`auto`/None or a
    count), named `key` in messages; `recorded`: the count a resumed checkpoint was trained at,
    or the count a seed / learning-rate sweep fixed for all its runs (`recorded_by="sweep"`).
    An explicit count wins, then OMP_NUM_THREADS, then the recorded count, then the free cores,
    which only this last case samples (`read`, default read_cpus: 100 ms)."""
    explicit: tuple[int, str, str] | None = None
    if isinstance(setting, int) and not isinstance(setting, bool):
        explicit = (setting, f"{key}: {setting}", "setting")
    else:
        env = _env_threads()
        if env is not None:
            explicit = (env, f"OMP_NUM_THREADS={env}", "env")
    if explicit is not None:
        count, why, source = explicit
        note = None
        if recorded is not None and recorded != count:
            note = (f"resume is exact only at {recorded} threads (the {recorded_by}'s count); this run uses {count} "
                    f"({why}), so its results will differ from an uninterrupted run in the last bits")
        return ThreadChoice(count, why, source, note or busy_cpu_advice(count, key=key))
    if recorded is not None:
        why = ("the checkpoint's count, so that the resumed run gives the same bits" if recorded_by == "checkpoint"
               else f"the {recorded_by}'s count, so that every run of it, resumed or not, gives the same bits")
        return ThreadChoice(recorded, why, recorded_by, busy_cpu_advice(recorded, key=key))
    reading = (read or read_cpus)()
    cores = f"{reading.cores} core{'s' if reading.cores != 1 else ''}"
    if reading.quota is not None:
        cores += f" (cgroup quota {reading.quota:g} of {reading.cpus} CPUs)"
    return ThreadChoice(auto_threads(reading), f"{key}: auto, {cores}, {reading.shown}", "auto")


def busy_cpu_advice(threads: int, cores: int | None = None, load: float | None = None,
                    key: str = "train.threads") -> str | None:
    """A warning when a fixed count of intra-op threads will fight other jobs for the cores,
    else None (`auto` never does: it takes the free cores). It reads the 1-minute load average,
    free to read: a count given explicitly is not worth a sample of the CPUs, and the warning
    only advises."""
    if threads <= 1:
        return None
    cores = cores or cpu_cores()
    if load is None:
        load = current_load()
        if load is None:
            return None
    free = cores - load
    if free >= threads - 0.5:
        return None
    return (f"the CPU is busy (1-minute load {load:.1f} on {cores} cores) and this run uses {threads} threads per "
            f"operation: other jobs will stall them. {key}={max(1, round(free))} (or auto on a new run) is faster; "
            "a run keeps its results bit for bit only at a fixed thread count")


def use_threads(setting: int | str | None, key: str, device=None, recorded: int | None = None,
                recorded_by: str = "checkpoint") -> int:
    """Choose the count (choose_threads), set torch's intra-op threads to it, log it and why;
    returns it. On CUDA the count only sizes the CPU side (data, host ops)."""
    import torch

    choice = choose_threads(setting, key, recorded, recorded_by=recorded_by)
    torch.set_num_threads(choice.count)
    where = "" if device is None or str(device).startswith("cpu") else f" (CPU side of a {device} run)"
    console.log(f"threads: {choice.count}{where} ({choice.why})")
    if choice.note:
        console.log(f"warning: {choice.note}")
    return choice.count
