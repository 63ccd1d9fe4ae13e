"""Keep the main process's memory from growing over long runs.

The encoder runs its dense layers on the real (unpadded) tokens, and the MLM head on the masked
ones, so nearly every step allocates tensors of sizes never seen before. glibc serves them from
its heap (its mmap threshold rises to the largest block freed, ~20 MB for bert-tiny's logits),
and the freed blocks of other sizes stay resident: anonymous RSS grew ~1.5 GB per 1,000
bert-tiny steps, linearly. Measured alternatives (bert-tiny, 300-500 steps, CPU s/step):
- MALLOC_MMAP_THRESHOLD_ 1-4 MB, or malloc_trim after every step: flat, but +45-50% CPU time
  (every large block is faulted in again each step);
- malloc_trim(0) every TRIM_EVERY steps (this module): the free heap pages go back to the OS
  at a cost spread over many steps; 500 steps went 564 -> 766 MB instead of 568 -> 1,147 MB.
  A mitigation: it slows the growth, it does not stop it (scripts/bench_train.py --rss-steps).
Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

TRIM_EVERY = 10  # optimizer steps between two trims


@functools.lru_cache(maxsize=1)
def _trim():
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
