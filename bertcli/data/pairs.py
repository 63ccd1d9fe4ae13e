"""Training instances from tokenized documents: NSP and SOP sentence pairs, packed sequences.

A document is its tokens concatenated (`ids`, `starts` = word-start flags) plus sentence
boundaries (`bounds`: sentence i is ids[bounds[i]:bounds[i + 1]]), so a segment made of
consecutive sentences is one slice.

NSP follows Google's create_instances_from_document exactly (the target length is drawn once
per document; a chunk is closed at the document end or when it reaches the target; A ends at a
random sentence boundary of the chunk; B is random with p 0.5 or when the chunk has one
sentence, read from a random sentence of another document until it reaches the remaining
target, and the chunk's unused sentences are put back; the longer segment is truncated one
token at a time from a random end). One deliberate difference: the random document is drawn
uniformly among the *other* documents (Google retries 10 times and may fall back on the same).

SOP (ALBERT): the same chunks, B always the true continuation, A and B swapped with p 0.5
(label 1). A chunk of a single sentence (the end of a document, or a sentence longer than the
target) is cut inside the sentence at a random word start instead of borrowing a random B from
another document as ALBERT's code does.

Packing (objective none, RoBERTa FULL-SENTENCES / DOC-SENTENCES): whole sentences fill rows of
max_seq_length - 2 tokens; crossing a document boundary costs one separator token; a sentence
longer than a row is cut into row-sized pieces. The plan is a pure function of the sentence
lengths in corpus order, computed once, so rows do not depend on sharding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np


@dataclass
class TokenDoc:
    ids: np.ndarray  # int32 [N] all tokens of the document
    bounds: np.ndarray  # int64 [S + 1] sentence boundaries into ids
    starts: np.ndarray  # int8 [N] word-start flags

    @property
    def num_sentences(self) -> int:
        return len(self.bounds) - 1


@dataclass
class Instance:
    a: tuple[TokenDoc, int, int]  # (document, start, end) of segment A
    b: tuple[TokenDoc, int, int]
    label: int  # NSP: 1 = B random; SOP: 1 = swapped


def truncate_pair(la: int, lb: int, max_tokens: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """Google's truncate_seq_pair on lengths: returns tokens removed (a_front, a_back, b_front,
    b_back). The longer segment (B on ties) loses one token per step, from the front or the back
    with p 0.5 each; the coin flips are drawn in one call, in the reference's order."""
    steps = la + lb - max_tokens
    if steps <= 0:
        return 0, 0, 0, 0
    # the longer one is trimmed until both are equal, then B and A alternate (B first: ties
    # trim B); which[i] is True when step i trims A
    a_longer = la > lb
    d = min(steps, abs(la - lb))
    which = np.empty(steps, dtype=bool)
    which[:d] = a_longer
    which[d:] = np.arange(steps - d) % 2 == 1
    front = rng.random(steps) < 0.5
    af = int((front & which).sum())
    bf = int((front & ~which).sum())
    n_a = int(which.sum())
    return af, n_a - af, bf, (steps - n_a) - bf


def _chunks(doc: TokenDoc, target: int) -> Iterator[tuple[int, int]]:
    """SOP chunks as [first, last) sentence ranges, closed at the document end or once they
    reach the target length, as in Google's loop (NSP has its own loop: it puts sentences back)."""
    first, length = 0, 0
    for i in range(doc.num_sentences):
        length += int(doc.bounds[i + 1] - doc.bounds[i])
        if i == doc.num_sentences - 1 or length >= target:
            yield first, i + 1
            first, length = i + 1, 0


def _target_length(max_tokens: int, short_seq_prob: float, rng: np.random.Generator) -> int:
    if rng.random() < short_seq_prob:
        return int(rng.integers(2, max_tokens + 1))  # randint(2, max_num_tokens), inclusive
    return max_tokens


def nsp_instances(
    doc: TokenDoc,
    random_doc: Callable[[np.random.Generator], TokenDoc],
    max_seq_length: int,
    short_seq_prob: float,
    rng: np.random.Generator,
) -> list[Instance]:
    """Google's create_instances_from_document for one document. `random_doc(rng)` draws a
    document other than this one (uniformly)."""
    max_tokens = max_seq_length - 3
    target = _target_length(max_tokens, short_seq_prob, rng)
    out: list[Instance] = []
    b = doc.bounds.tolist()
    n_sent = len(b) - 1
    first, length, i = 0, 0, 0
    while i < n_sent:
        length += b[i + 1] - b[i]
        if i == n_sent - 1 or length >= target:
            n = i + 1 - first  # sentences in the chunk
            a_end = first + (int(rng.integers(1, n)) if n >= 2 else 1)
            a = (doc, b[first], b[a_end])
            if n == 1 or rng.random() < 0.5:
                label = 1
                target_b = target - (a[2] - a[1])
                rdoc = random_doc(rng)
                rb = rdoc.bounds.tolist()
                s = int(rng.integers(0, len(rb) - 1))
                e = s
                while e < len(rb) - 1:
                    e += 1
                    if rb[e] - rb[s] >= target_b:
                        break
                bseg = (rdoc, rb[s], rb[e])
                i -= (i + 1) - a_end  # put the unused sentences back
            else:
                label = 0
                bseg = (doc, b[a_end], b[i + 1])
            inst = _truncated(a, bseg, label, max_tokens, rng)
            if inst is not None:
                out.append(inst)
            first, length = i + 1, 0
        i += 1
    return out


def sop_instances(doc: TokenDoc, max_seq_length: int, short_seq_prob: float, rng: np.random.Generator) -> list[Instance]:
    """ALBERT's sentence-order pairs for one document (never another document)."""
    max_tokens = max_seq_length - 3
    target = _target_length(max_tokens, short_seq_prob, rng)
    out: list[Instance] = []
    b = doc.bounds
    for first, last in _chunks(doc, target):
        n = last - first
        if n >= 2:
            cut = int(b[first + int(rng.integers(1, n))])
        else:
            inside = _cut_inside(doc, int(b[first]), int(b[last]), rng)
            if inside is None:
                continue
            cut = inside
        a, bseg = (doc, int(b[first]), cut), (doc, cut, int(b[last]))
        label = int(rng.random() < 0.5)
        if label:
            a, bseg = bseg, a
        inst = _truncated(a, bseg, label, max_tokens, rng)
        if inst is not None:
            out.append(inst)
    return out


def _cut_inside(doc: TokenDoc, start: int, end: int, rng: np.random.Generator) -> int | None:
    """A random cut point strictly inside [start, end), at a word start when there is one."""
    if end - start < 2:
        return None
    inner = np.flatnonzero(doc.starts[start + 1 : end]) + start + 1
    if len(inner) == 0:
        inner = np.arange(start + 1, end)
    return int(inner[rng.integers(0, len(inner))])


def _truncated(a, b, label, max_tokens, rng) -> Instance | None:
    af, ab, bf, bb = truncate_pair(a[2] - a[1], b[2] - b[1], max_tokens, rng)
    a = (a[0], a[1] + af, a[2] - ab)
    b = (b[0], b[1] + bf, b[2] - bb)
    if a[2] <= a[1] or b[2] <= b[1]:
        return None
    return Instance(a, b, label)


def pair_row(inst: Instance, cls_id: int, sep_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[CLS] A [SEP] B [SEP]: (input_ids int32, token_type_ids int8, word_starts int8).
    The first token of each segment always starts a word (truncation may have cut one)."""
    (da, a0, a1), (db, b0, b1) = inst.a, inst.b
    la, lb = a1 - a0, b1 - b0
    ids = np.empty(la + lb + 3, dtype=np.int32)
    ids[0], ids[la + 1], ids[-1] = cls_id, sep_id, sep_id
    ids[1 : la + 1] = da.ids[a0:a1]
    ids[la + 2 : -1] = db.ids[b0:b1]
    types = np.zeros(len(ids), dtype=np.int8)
    types[la + 2 :] = 1
    starts = np.ones(len(ids), dtype=np.int8)
    starts[2 : la + 1] = da.starts[a0 + 1 : a1]
    starts[la + 3 : -1] = db.starts[b0 + 1 : b1]
    return ids, types, starts


# ------------------------------------------------------------------------------------ packing
def pack_plan(docs: Iterable[np.ndarray], budget: int, cross_documents: bool) -> np.ndarray:
    """Rows of packed whole sentences. `docs` yields each document's sentence lengths, in
    corpus order. Returns int64 [R, 4]: (first doc, first token, last doc, end token) per row;
    the row holds the tokens from (first doc, first token) to (last doc, end token), with one
    separator at each document boundary inside it."""
    rows: list[tuple[int, int, int, int]] = []
    fill = 0  # tokens (separators included) in the open row
    start = last = (0, 0)  # open row's start and its current end (doc, token)
    for d, lens in enumerate(docs):
        tok = 0
        for length in np.asarray(lens).tolist():
            # sentences longer than a row are cut into row-sized pieces
            while length > 0:
                piece = min(length, budget)
                cost = piece + (1 if fill and last[0] != d else 0)
                if fill and fill + cost > budget:
                    rows.append((*start, *last))
                    fill = 0
                if fill == 0:
                    start, cost = (d, tok), piece
                fill += cost
                tok += piece
                length -= piece
                last = (d, tok)
        if fill and not cross_documents:
            rows.append((*start, *last))
            fill = 0
    if fill:
        rows.append((*start, *last))
    return np.array(rows, dtype=np.int64).reshape(-1, 4)


def packed_row(plan_row, get_doc: Callable[[int], TokenDoc], cls_id: int, sep_id: int) -> tuple[np.ndarray, np.ndarray]:
    """<s> tokens (</s> between documents) </s>: (input_ids int32, word_starts int8)."""
    d0, t0, d1, t1 = (int(x) for x in plan_row)
    ids_parts: list = [[cls_id]]            # lists and int arrays, concatenated below
    start_parts: list = [[1]]
    for d in range(d0, d1 + 1):
        doc = get_doc(d)
        a = t0 if d == d0 else 0
        e = t1 if d == d1 else len(doc.ids)
        if d > d0:
            ids_parts.append([sep_id])
            start_parts.append([1])
        ids_parts.append(doc.ids[a:e])
        s = doc.starts[a:e].copy()
        s[:1] = 1
        start_parts.append(s)
    ids_parts.append([sep_id])
    start_parts.append([1])
    return np.concatenate(ids_parts).astype(np.int32), np.concatenate(start_parts).astype(np.int8)
