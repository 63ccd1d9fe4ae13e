"""Keep the main process's memory from growing over long runs.

The encoder runs its dense layers on the real (unpadded) tokens, and the MLM head on the masked
ones, so without care nearly every step allocates tensors of sizes never seen before. glibc serves
them from its heap (its mmap threshold rises to the largest block freed) and the freed blocks of
other sizes stay resident: anonymous RSS grew linearly, ~0.8-1.5 GB per 1,000 bert-tiny steps.

The root fix is in the model: the row counts are rounded up (bertcli.model.encoder.bucketed) so
that shapes repeat: N, the unpadded rows (a few padding positions carried as rows), the sparse
last layer's rows, and the MLM logits' rows (zero rows whose labels the loss ignores).
scripts/bench_train.py --rss-steps 1000, bert-tiny, num_workers 0, anonymous RSS start -> end (max):
- before bucketing, no trim:        488 -> 1,457 MB, +775 MB per 1,000 steps, linear
- before bucketing, trim every 10:  456 ->   614 MB (683)
- bucketing, no trim:               444 ->   620 MB (620): a plateau (~600 MB from step 100)
                                    with a rare step up when a new bucket size first appears
- bucketing, trim every 10:         445 ->   522 MB (557), flat (second-half slope -65 MB)
This module's malloc_trim(0) every TRIM_EVERY steps is kept on top: it hands the free pages back
and keeps RSS flat, for ~5% CPU time per bert-tiny step (0.1345 s against 0.1271 s without it;
measured on a loaded one-core machine). MALLOC_MMAP_THRESHOLD_ 1-4 MB or a trim after every step
also keep it flat but cost +45-50% CPU time. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

TRIM_EVERY = 10  # optimizer steps between two trims


@functools.lru_cache(maxsize=1)
def _trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


def release_free_memory(step: int) -> None:
    """Every TRIM_EVERY steps, hand the allocator's free pages back to the OS."""
    trim = _trim()
    if trim is not None and step % TRIM_EVERY == 0:
        trim(0)
