"""Word boundaries of tokenized sentences, for whole-word and n-gram masking.

A token starts a word when the tokenizer's pre-tokenizer put it in a new word (`word_ids` of
the encoding) or when its vocabulary entry carries the kind's word-start marker:
    wordpiece  no `##` prefix            (BERT)
    bpe        `Ġ` prefix (a space byte)  (byte-level BPE, RoBERTa / GPT-2)
    unigram    `▁` prefix (Metaspace)     (SentencePiece style, ALBERT)
The union of both signals is right whichever pre-tokenizer a tokenizer.json uses (a Unigram
model without pre-tokenizer still marks words with `▁`; byte-level BPE splits punctuation off
the word before it through its pre-tokenizer).

Chinese has no spaces: with `word_segmenter: jieba` consecutive CJK characters are grouped into
jieba's words, using the tokens' character offsets (BERT's own flag would give one word per
character; Cui et al. 2019 segment with LTP). jieba is imported only when asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from bertcli.core.errors import UserError
from bertcli.tokenization.load import CJK_CHAR

_MARKERS = {"bpe": "Ġ", "unigram": "▁"}


def start_marker_table(tokenizer, kind: str) -> np.ndarray:
    """bool [V]: True where a vocabulary entry by itself marks the start of a word."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    table = np.zeros(max(vocab.values(), default=-1) + 1, dtype=bool)
    for piece, i in vocab.items():
        if kind == "wordpiece":
            table[i] = not piece.startswith("##")
        else:
            table[i] = piece.startswith(_MARKERS.get(kind, "\0"))
    return table


def is_cjk(ch: str) -> bool:
    """A CJK ideograph (the ranges of BERT's tokenization._is_chinese_char)."""
    return CJK_CHAR.match(ch) is not None


def has_cjk(text: str) -> bool:
    return CJK_CHAR.search(text) is not None


def load_segmenter(name: str) -> Callable[[str], list[str]] | None:
    """`jieba` -> a function text -> words; `none` -> None. Clear error when jieba is missing."""
    if name in (None, "none"):
        return None
    try:
        import jieba  # noqa: PLC0415 (optional dependency)
    except ImportError:
        raise UserError(
            "data.word_segmenter is jieba, but the jieba package is not installed",
            fix="pip install 'bertcli[chinese]' (or pip install jieba), or set data.word_segmenter: none",
        ) from None
    import logging

    jieba.setLogLevel(logging.WARNING)
    return lambda text: list(jieba.cut(text, HMM=True))


def word_starts(
    ids: Sequence[int],
    word_ids: Sequence[int | None],
    markers: np.ndarray,
    text: str | None = None,
    offsets: Sequence[tuple[int, int]] | None = None,
    segment: Callable[[str], list[str]] | None = None,
) -> np.ndarray:
    """int8 [n]: 1 where token i starts a word. With `segment` (jieba), `text` and `offsets`,
    a token between two CJK characters starts a word only where the segmenter starts one."""
    n = len(ids)
    out = np.zeros(n, dtype=np.int8)
    if n == 0:
        return out
    ids_a = np.asarray(ids, dtype=np.int64)
    wid = np.array([-1 if w is None else w for w in word_ids], dtype=np.int64)
    new_word = np.ones(n, dtype=bool)
    new_word[1:] = wid[1:] != wid[:-1]
    in_table = ids_a < len(markers)
    marker = np.zeros(n, dtype=bool)
    marker[in_table] = markers[ids_a[in_table]]
    starts = new_word | marker
    if segment is not None and text and offsets is not None and has_cjk(text):
        starts = _segment_cjk(starts, text, offsets, segment)
    if offsets is not None and n > 1:
        starts[1:] &= ~_inside_begun_character(offsets)
    starts[0] = True
    out[starts] = 1
    return out


def _inside_begun_character(offsets) -> np.ndarray:
    """bool [n - 1]: token i (from 1) begins inside text an earlier token already covers. Byte-level
    BPE splits a character into several tokens (e.g. `Ġ` + the first byte of 陶, then its other
    two bytes, both with 陶's offsets): a word start there would mask part of one character."""
    off = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)  # [n, 2] character (start, end)
    covered = np.maximum.accumulate(off[:-1, 1])             # [n - 1] end of text covered before token i
    return off[1:, 0] < covered


def _segment_cjk(starts: np.ndarray, text: str, offsets, segment) -> np.ndarray:
    """Re-decide word starts for tokens that begin on a CJK character right after another CJK
    character: a start exactly where the segmenter begins a word, a continuation elsewhere."""
    boundaries = set()
    pos = 0
    for word in segment(text):
        boundaries.add(pos)
        pos += len(word)
    starts = starts.copy()
    prev_start, prev_char_cjk = -1, False
    for i, (a, b) in enumerate(offsets):
        here_cjk = a < len(text) and is_cjk(text[a])
        if here_cjk and prev_char_cjk and i > 0:
            # byte-level BPE may split one character into several tokens with the same offset
            starts[i] = a != prev_start and a in boundaries
        if b > a:
            prev_char_cjk = is_cjk(text[b - 1]) if b - 1 < len(text) else False
            prev_start = a
    return starts
