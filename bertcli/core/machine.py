"""How many intra-op threads a run uses, decided once before the long work starts.

On a shared CPU torch's default (one thread per core) stalls at every OpenMP barrier while
another process holds a core: a tiny model trained 5-40x slower with it than with one thread
on a two-core machine that other jobs kept busy. So `threads: auto` (the default) takes the
cores the machine has free now. The count changes the order of float reductions, so a run
gives the same bits only at a fixed count: pretraining records it in every checkpoint and a
resume uses the recorded count, whatever the load is then (bertcli.train.pipeline)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from bertcli.core import console
from bertcli.core.errors import UserError


@dataclass(frozen=True)
class ThreadChoice:
    count: int
    why: str                     # where the count came from, for the log line
    source: str                  # "setting", "env", "checkpoint" or "auto"
    note: str | None = None      # a warning to show with it (resume inexact, busy machine)


def cpu_cores() -> int:
    """The cores this process may run on (its affinity mask in a container or under taskset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):     # not on every platform
        return max(1, os.cpu_count() or 1)


def current_load() -> float | None:
    """The 1-minute load average, or None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def auto_threads(cores: int, load: float | None) -> int:
    """The cores other jobs leave free: max(1, cores - round(load)), at most the cores."""
    if load is None:
        return cores
    return max(1, min(cores, cores - round(load)))


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
                   cores: int | None = None, load: float | None = None) -> ThreadChoice:
    """The intra-op thread count for a run. `setting`: the recipe key's value (`auto`/None or a
    count), named `key` in messages; `recorded`: the count a resumed checkpoint was trained at.
    An explicit count wins, then OMP_NUM_THREADS, then the recorded count, then the free cores."""
    cores = cores or cpu_cores()
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
            note = (f"resume is exact only at {recorded} threads (the checkpoint's count); this run uses {count} "
                    f"({why}), so its results will differ from an uninterrupted run in the last bits")
        return ThreadChoice(count, why, source, note or busy_cpu_advice(count, cores, load, key))
    if recorded is not None:
        return ThreadChoice(recorded, "the checkpoint's count, so that the resumed run gives the same bits", "checkpoint",
                            busy_cpu_advice(recorded, cores, load, key))
    if load is None:
        load = current_load()
    count = auto_threads(cores, load)
    shown = f"1-minute load {load:.1f}" if load is not None else "no load average on this platform"
    return ThreadChoice(count, f"{key}: auto, {cores} cores, {shown}", "auto")


def busy_cpu_advice(threads: int, cores: int | None = None, load: float | None = None,
                    key: str = "train.threads") -> str | None:
    """A warning when a fixed count of intra-op threads will fight other jobs for the cores,
    else None (`auto` never does: it takes the free cores)."""
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


def use_threads(setting: int | str | None, key: str, device=None, recorded: int | None = None) -> int:
    """Choose the count (choose_threads), set torch's intra-op threads to it, log it and why;
    returns it. On CUDA the count only sizes the CPU side (data, host ops)."""
    import torch

    choice = choose_threads(setting, key, recorded)
    torch.set_num_threads(choice.count)
    where = "" if device is None or str(device).startswith("cpu") else f" (CPU side of a {device} run)"
    console.log(f"threads: {choice.count}{where} ({choice.why})")
    if choice.note:
        console.log(f"warning: {choice.note}")
    return choice.count
