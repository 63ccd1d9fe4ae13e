"""The tokenized corpus of one split as flat binary files, memory-mapped for random access.

The NSP builder reads random documents from the whole split (not only the current shard), so
the tokenized documents live on disk, written shard by shard and read through np.memmap: the
memory a worker touches does not grow with the corpus held in RAM. Files of one shard `P`:
    P.ids     int32  all tokens, document after document
    P.starts  int8   word-start flags, parallel to .ids
    P.sents   int64  end offset (into .ids) of every sentence
    P.docs    int64  end index (into .sents) of every document
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertcli.data.pairs import TokenDoc

_PARTS = (("ids", np.int32), ("starts", np.int8), ("sents", np.int64), ("docs", np.int64))


class TokenWriter:
    """Append documents (lists of per-sentence token arrays) to the files of one shard."""

    def __init__(self, prefix: Path, flush_tokens: int = 1 << 20):
        self.prefix = Path(prefix)
        self.flush_tokens = flush_tokens
        self.tokens = self.sentences = self.documents = self.multi_sentence = 0
        self._buf: dict[str, list[np.ndarray]] = {name: [] for name, _ in _PARTS}
        self._pending = 0
        for name, _ in _PARTS:
            open(f"{self.prefix}.{name}", "wb").close()

    def add(self, sentences: Sequence[np.ndarray], starts: Sequence[np.ndarray]) -> None:
        """One document given as per-sentence arrays."""
        lens = np.array([len(x) for x in sentences], dtype=np.int64)
        self.add_many(_flat(sentences, np.int32), _flat(starts, np.int8), lens, np.zeros(len(lens), np.int64))

    def add_many(self, ids: np.ndarray, starts: np.ndarray, lens: np.ndarray, owner: np.ndarray) -> None:
        """Documents given flat: `lens` [S] tokens per sentence, `owner` [S] ascending document
        number of each sentence (relative to this call). Empty sentences are dropped, and so
        are documents left without any."""
        keep = lens > 0
        lens, owner = lens[keep], owner[keep]
        if not len(lens):
            return
        _, per_doc = np.unique(owner, return_counts=True)  # sentences of each non-empty document
        self._buf["ids"].append(np.asarray(ids, dtype=np.int32))
        self._buf["starts"].append(np.asarray(starts, dtype=np.int8))
        self._buf["sents"].append(self.tokens + np.cumsum(lens))
        self._buf["docs"].append(self.sentences + np.cumsum(per_doc))
        self.tokens += int(lens.sum())
        self.sentences += len(lens)
        self.documents += len(per_doc)
        self.multi_sentence += int((per_doc >= 2).sum())
        self._pending += int(lens.sum())
        if self._pending >= self.flush_tokens:
            self.flush()

    def flush(self) -> None:
        for name, dtype in _PARTS:
            if self._buf[name]:
                with open(f"{self.prefix}.{name}", "ab") as f:
                    f.write(np.concatenate(self._buf[name]).astype(dtype, copy=False).tobytes())
                self._buf[name] = []
        self._pending = 0


def _flat(parts, dtype) -> np.ndarray:
    return np.concatenate([np.asarray(x, dtype=dtype) for x in parts]) if len(parts) else np.zeros(0, dtype)


def _map(path: str, dtype) -> np.ndarray:
    if os.path.getsize(path) == 0:
        return np.zeros(0, dtype=dtype)
    # a plain ndarray view of the map: slicing np.memmap objects is several times slower
    return np.memmap(path, dtype=dtype, mode="r").view(np.ndarray)


class DocStore:
    """Random access to the documents of several shards, in shard order. Picklable (reopens
    its memory maps in each process)."""

    def __init__(self, prefixes: Sequence[str | Path]):
        self.prefixes = [str(p) for p in prefixes]
        self._open()

    def _open(self) -> None:
        self._shards = [{name: _map(f"{p}.{name}", dtype) for name, dtype in _PARTS} for p in self.prefixes]
        counts = [len(s["docs"]) for s in self._shards]
        self._first = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)  # [shards + 1]

    def __getstate__(self) -> dict[str, Any]:
        return {"prefixes": self.prefixes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.prefixes = state["prefixes"]
        self._open()

    def __len__(self) -> int:
        return int(self._first[-1])

    def __getitem__(self, j: int) -> TokenDoc:
        if not 0 <= j < len(self):
            raise IndexError(j)
        k = int(np.searchsorted(self._first, j, side="right")) - 1
        sh = self._shards[k]
        local = j - int(self._first[k])
        s0 = int(sh["docs"][local - 1]) if local else 0
        s1 = int(sh["docs"][local])
        t0 = int(sh["sents"][s0 - 1]) if s0 else 0
        ends = np.asarray(sh["sents"][s0:s1])
        bounds = np.concatenate(([0], ends - t0))
        t1 = int(ends[-1])
        return TokenDoc(np.asarray(sh["ids"][t0:t1]), bounds, np.asarray(sh["starts"][t0:t1]))

    def sentence_lengths(self) -> Iterator[np.ndarray]:
        """Yield each document's sentence lengths, in order (for the packing plan), reading
        the shards' offset files sequentially."""
        for sh in self._shards:
            docs, sents = np.asarray(sh["docs"]), sh["sents"]
            prev_s, prev_t = 0, 0
            for s1 in docs.tolist():
                ends = np.asarray(sents[prev_s:s1])
                yield np.diff(ends, prepend=prev_t)
                prev_s, prev_t = s1, int(ends[-1])

