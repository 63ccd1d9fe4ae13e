"""SQuAD windows: question first, then a slice of the context, in the checkpoint's own template.

Each unique context is tokenized once, with character offsets; each question once, cut to
`max_query_length` tokens. A context longer than the room a window leaves
(max_seq_length - question - special tokens) becomes overlapping windows whose starts are
`doc_stride` tokens apart (Google BERT's run_squad.py; transformers' run_qa.py passes the same
number to the tokenizer as the overlap instead). Only the context is ever cut.

Offsets: a token's span is its character span in the original context with surrounding
whitespace removed: byte-level BPE tokens carry the space before a word (`Ġ`), Unigram pieces
their `▁`; WordPiece spans are already tight. Normalization (lowercasing, accent stripping,
ALBERT's quote rewriting) keeps spans in original characters, so an answer recovered from
offsets is the original text.

Training labels: the first and last token of the answer when the window holds it whole, else
the first token (the [CLS] / <s> position, index 0) -- also for every unanswerable v2.0 question.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.tasks.qa.data import SquadSplit

CHUNK = 4096  # texts per encode_batch call
_SPACES = np.array([c for c in range(0x3100) if chr(c).isspace()], dtype=np.uint32)


@dataclass(frozen=True)
class Template:
    """Where the special tokens go around (question, context): ids and type ids of each part."""

    prefix: np.ndarray          # e.g. [CLS] / <s>
    middle: np.ndarray          # [SEP] / </s></s>
    suffix: np.ndarray          # [SEP] / </s>
    types: tuple[int, ...]      # type id of prefix, question, middle, context, suffix

    @property
    def specials(self) -> int:
        return len(self.prefix) + len(self.middle) + len(self.suffix)


def template_of(tok) -> Template:
    """Read the post-processor's pair template off one encoded pair (no family names needed)."""
    enc = tok.encode("a", "b", add_special_tokens=True)
    seq, ids, types = enc.sequence_ids, np.asarray(enc.ids, np.int32), enc.type_ids
    first = [i for i, s in enumerate(seq) if s == 0]
    second = [i for i, s in enumerate(seq) if s == 1]
    if not first or not second:
        raise UserError("the tokenizer's post-processor does not encode sentence pairs",
                        fix="fine-tune with a tokenizer written by `bertcli tokenize` or transformers")
    prefix, middle, suffix = ids[:first[0]], ids[first[-1] + 1:second[0]], ids[second[-1] + 1:]
    t = lambda i, default: types[i] if 0 <= i < len(types) else default  # noqa: E731
    return Template(prefix, middle, suffix,
                    (t(0, 0), types[first[0]], t(first[-1] + 1, types[first[0]]), types[second[0]],
                     t(second[-1] + 1, types[second[0]])))


@dataclass
class Windows:
    """All windows of a split, flat: window f is ids[offsets[f]:offsets[f + 1]]. It belongs to
    question `example[f]`; its context tokens sit at positions ctx_start[f] .. ctx_start[f] +
    doc_len[f] - 1 and are the context's tokens doc_start[f] .. (rows of spans[its context])."""

    ids: np.ndarray            # int32 [total tokens]
    types: np.ndarray          # int8  [total tokens]
    offsets: np.ndarray        # int64 [F + 1]
    labels: np.ndarray | None  # int64 [F, 2] (start, end) positions in the window; None without labels
    example: np.ndarray        # int32 [F]
    ctx_start: np.ndarray      # int32 [F]
    doc_start: np.ndarray      # int32 [F]
    doc_len: np.ndarray        # int32 [F]
    nonempty: np.ndarray       # bool [F, D]: token j of window f covers some text (not a bare space)
    spans: list[np.ndarray]    # per unique context: int64 [tokens, 2] character spans
    unaligned: int = 0         # training answers whose edges fall inside a token

    def __len__(self) -> int:
        return len(self.example)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def tight_spans(context: str, offsets: list[tuple[int, int]]) -> np.ndarray:
    """Token character spans [n, 2] with whitespace at both ends removed (empty for a bare space)."""
    spans = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    if not len(spans) or not context:
        return spans
    space = np.isin(np.frombuffer(context.encode("utf-32-le"), dtype=np.uint32), _SPACES)
    space = np.append(space, False)  # a sentinel: spans end at len(context) at most
    s, e = spans[:, 0], spans[:, 1]
    while True:
        lead = (s < e) & space[s]
        if not lead.any():
            break
        s[lead] += 1
    while True:
        trail = (e > s) & space[np.maximum(e - 1, 0)]
        if not trail.any():
            break
        e[trail] -= 1
    return spans


def _encode(tok, texts: list[str], desc: str) -> list:
    out = []
    with console.progress(desc, total=len(texts)) as bar:
        for i in range(0, len(texts), CHUNK):
            out.extend(tok.encode_batch(texts[i:i + CHUNK], add_special_tokens=False))
            bar.advance(len(texts[i:i + CHUNK]))
    return out


def answer_tokens(spans: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """First and last token overlapping characters [start, end) (end < first when none does)."""
    nonempty = spans[:, 1] > spans[:, 0]
    first = int(np.searchsorted(spans[:, 1], start, side="right"))
    while first < len(spans) and not nonempty[first]:
        first += 1
    last = int(np.searchsorted(spans[:, 0], end, side="left")) - 1
    while last >= 0 and not nonempty[last]:
        last -= 1
    return first, last


def build_features(tok, split: SquadSplit, max_seq_length: int, doc_stride: int, max_query_length: int,
                   zero_types: bool = False, labels: bool = True) -> Windows:
    """Windows of every question of `split`. `tok` is the checkpoint's `tokenizers.Tokenizer`
    (a copy is used, never modified); `zero_types` for models with one token type (RoBERTa)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tok.to_str())
    tok.no_padding()
    tok.no_truncation()
    tpl = template_of(tok)
    ctx_enc = _encode(tok, split.contexts, f"tokenizing {split.name} contexts")
    spans = [tight_spans(c, e.offsets) for c, e in zip(split.contexts, ctx_enc)]
    ctx_ids = [np.asarray(e.ids, dtype=np.int32) for e in ctx_enc]
    q_enc = _encode(tok, [q.lstrip() for q in split.questions], f"tokenizing {split.name} questions")
    if doc_stride < 1:
        raise UserError(f"doc_stride {doc_stride} must be at least 1")

    ids, types, lengths, lab = [], [], [0], []
    example, ctx_start, doc_start, doc_len = [], [], [], []
    unaligned = 0
    pt, qt, mt, dt, st = (0, 0, 0, 0, 0) if zero_types else tpl.types
    for i, qe in enumerate(q_enc):
        q = np.asarray(qe.ids[:max_query_length], dtype=np.int32)
        room = max_seq_length - len(q) - tpl.specials
        if room < 1:
            raise UserError(f"question {split.ids[i]!r}: its {len(q)} tokens and {tpl.specials} special "
                            f"tokens leave no room for the context in a {max_seq_length}-token window",
                            where=split.source, fix="raise max_seq_length or lower max_query_length in the recipe's "
                                                    "finetune.squad block (v2.0: finetune.squad_v2)")
        c = split.context_of[i]
        doc, n = ctx_ids[c], len(ctx_ids[c])
        first = last = -1
        if labels and split.answers[i]:
            a0 = split.starts[i][0]
            a1 = a0 + len(split.answers[i][0])
            first, last = answer_tokens(spans[c], a0, a1)
            if last < first:
                first = last = -1
            elif spans[c][first, 0] != a0 or spans[c][last, 1] != a1:
                unaligned += 1
        head = np.concatenate([tpl.prefix, q, tpl.middle])
        head_types = np.concatenate([np.full(len(tpl.prefix), pt), np.full(len(q), qt),
                                     np.full(len(tpl.middle), mt)]).astype(np.int8)
        start = 0
        while True:
            length = min(n - start, room)
            ids.append(np.concatenate([head, doc[start:start + length], tpl.suffix]))
            types.append(np.concatenate([head_types, np.full(length, dt, np.int8), np.full(len(tpl.suffix), st, np.int8)]))
            lengths.append(len(ids[-1]))
            example.append(i)
            ctx_start.append(len(head))
            doc_start.append(start)
            doc_len.append(length)
            if first >= 0 and start <= first and last < start + length:
                lab.append((len(head) + first - start, len(head) + last - start))
            else:
                lab.append((0, 0))
            if start + length >= n:
                break
            start += min(length, doc_stride)
    i32 = lambda x: np.asarray(x, dtype=np.int32)  # noqa: E731
    f = Windows(np.concatenate(ids), np.concatenate(types), np.cumsum(lengths, dtype=np.int64),
                np.asarray(lab, dtype=np.int64) if labels else None, i32(example), i32(ctx_start),
                i32(doc_start), i32(doc_len), np.zeros((0, 0), bool), spans, unaligned)
    f.nonempty = nonempty(f, split.context_of)
    return f


def nonempty(f: Windows, context_of: list[int]) -> np.ndarray:
    """bool [F, D]: which window positions hold a token with a non-empty span."""
    out = np.zeros((len(f), int(f.doc_len.max()) if len(f) else 0), dtype=bool)
    for w in range(len(f)):
        sp = f.spans[context_of[f.example[w]]][f.doc_start[w]:f.doc_start[w] + f.doc_len[w]]
        out[w, : len(sp)] = sp[:, 1] > sp[:, 0]
    return out


__all__ = ["Template", "template_of", "Windows", "build_features", "tight_spans", "answer_tokens"]
