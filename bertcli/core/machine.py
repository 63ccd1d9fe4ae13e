"""Advice about the machine a run is on, given once before the long work starts."""

from __future__ import annotations

import os

from bertcli.core import console


def busy_cpu_advice(threads: int, cores: int | None = None, load: float | None = None) -> str | None:
    """A warning when intra-op threads will fight other jobs for the cores, else None.

    On a shared CPU torch's default (one thread per core) stalls at every OpenMP barrier
    while another process holds a core: a tiny model trained 10x slower with the default than
    with OMP_NUM_THREADS=1 on a busy two-core machine. bertcli does not change the thread
    count itself: the count changes the order of float reductions, and a run must give the
    same bits when it is resumed on a quieter machine."""
    if os.environ.get("OMP_NUM_THREADS") or threads <= 1:
        return None
    cores = cores or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:           # not available on this platform
            return None
    free = cores - load
    if free >= threads - 0.5:
        return None
    return (f"the CPU is busy (1-minute load {load:.1f} on {cores} cores) and torch runs {threads} threads per "
            f"operation: other jobs will stall them. Start with OMP_NUM_THREADS={max(1, int(free))} (or stop the "
            "other jobs); a run keeps its results bit for bit only at a fixed thread count")


def advise_threads(device) -> None:
    """Log busy_cpu_advice for a run on the CPU."""
    if str(device).startswith("cpu"):
        import torch

        message = busy_cpu_advice(torch.get_num_threads())
        if message:
            console.log(f"warning: {message}")
