"""Keyed random streams: one numpy Generator state per (seed, purpose, ...) key.

Every random choice of the data stage comes from a stream keyed by what it is for, never from
global or worker state, so results do not depend on the number of processes, shard sizes or
the order in which rows are served:
    pairs and static masks of a document   (seed, PAIRS, split, copy, document index)
    static masks of a packed row            (seed, PACKED, split, copy, row index)
    dynamic masks in the collator           (seed, DYNAMIC, epoch, row index)
    RTD generator samples (uniforms)        (seed, RTD, epoch, row index)

Seeding a fresh `np.random.default_rng(key)` costs ~30 us (SeedSequence hashing), too much per
row in a collator. `KeyedRng` instead hashes the key with splitmix64 into a 128-bit PCG64 state
and an odd increment (~3 us) and reuses one Generator object.
"""

from __future__ import annotations

import numpy as np

PAIRS, PACKED, DYNAMIC, RTD = 1, 2, 3, 4
_M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def key_words(*key: int) -> tuple[int, int, int]:
    """Three well-mixed 64-bit words from a tuple of integers (any sign, any size)."""
    h = 0x6A09E667F3BCC909 ^ len(key)
    for k in key:
        h = _splitmix64(h ^ (int(k) & _M64))
    a = _splitmix64(h)
    b = _splitmix64(a)
    return a, b, _splitmix64(b)


class KeyedRng:
    """`rng.seed(*key)` returns a Generator whose stream is a pure function of `key`.

    The returned Generator is shared: use it before the next `seed` call of the same KeyedRng.
    """

    def __init__(self) -> None:
        self._bits = np.random.PCG64(0)
        self.generator = np.random.Generator(self._bits)

    def seed(self, *key: int) -> np.random.Generator:
        a, b, c = key_words(*key)
        self._bits.state = {
            "bit_generator": "PCG64",
            "state": {"state": (a << 64) | b, "inc": (c << 1) | 1},
            "has_uint32": 0,
            "uinteger": 0,
        }
        return self.generator
