"""Words -> sub-tokens -> windows, for tagging (one prediction per word).

Alignment works for every tokenizer kind through the word id of each sub-token: the words are
joined with single spaces and encoded as the model saw text in pretraining (so byte-level BPE
gets its `Ġ` word starts and Unigram its `▁`), and each sub-token's character offsets name its
word (a sub-token that covers only the space before a word, e.g. a lone `▁`, belongs to the
word after it). A word the tokenizer turns into nothing (a zero-width character) gets the
unknown token, so every word has at least one sub-token. The first sub-token of a word that
holds any of its characters carries its label (a lone `▁` before the word's pieces holds none,
so the piece after it is labelled; transformers' word ids would label the bare marker); the
others are ignored in the loss (-100).

Windows: a sentence longer than the room between the special tokens is cut into windows at
word starts, consecutive windows overlapping by about `overlap` sub-tokens; each word is
*owned* by the window where it has the most context on its shorter side (SQuAD's max-context
rule), and only its owner labels and predicts it: every word is predicted exactly once, and no
word is dropped (a word longer than a window keeps its first sub-tokens).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from bertcli.config.finetune_sections import NerConfig
from bertcli.core.errors import UserError
from bertcli.tasks.featurizer import TEXT, Context, field, softmax
from bertcli.tasks.qa.features import tight_spans
from bertcli.tasks.tagging.schemes import entities


def align(tokenizer, sentences: list[list[str]], unk_id: int, batch: int = 4096):
    """For each sentence: (ids [t] int64, word [t] int64 word index of each sub-token, first
    [t] bool the labelled sub-token of each word), without special tokens."""
    out = []
    for start in range(0, len(sentences), batch):
        chunk = sentences[start:start + batch]
        texts = [" ".join(words) for words in chunk]
        for words, enc in zip(chunk, tokenizer.encode_batch(texts, add_special_tokens=False)):
            out.append(_align_one(words, enc.ids, enc.offsets, enc.tokens, unk_id))
    return out


# Word-start markers that a sub-token may consist of alone: Unigram / SentencePiece `▁`,
# byte-level BPE's space `Ġ`.
MARKERS = "\u2581\u0120"


def _align_one(words: list[str], ids, offsets, tokens, unk_id: int):
    starts, pos = [], 0
    for w in words:
        starts.append(pos)
        pos += len(w) + 1
    ends = [s + len(w) for s, w in zip(starts, words)]
    word = np.empty(len(ids), dtype=np.int64)
    chars = np.zeros(len(ids), dtype=bool)           # holds a character of its word
    for k, (s, e) in enumerate(offsets):
        # The last character of the sub-token names its word; a sub-token of spaces only (or
        # empty) belongs to the word that starts after it.
        c = e - 1 if e > s else s
        i = min(bisect.bisect_right(ends, c), len(words) - 1)   # first word ending after c
        # Offsets alone cannot tell: the `▁` Metaspace prepends at the text's start overlaps
        # the first character, so the token text decides too.
        word[k] = i
        chars[k] = e > max(s, starts[i]) and bool(tokens[k].strip(MARKERS + " "))
    ids = np.asarray(ids, dtype=np.int64)
    missing = np.setdiff1d(np.arange(len(words)), word)
    if missing.size:                                 # words without any sub-token: [UNK]
        where = np.searchsorted(word, missing)
        ids = np.insert(ids, where, unk_id)
        word = np.insert(word, where, missing)
        chars = np.insert(chars, where, True)
    return ids, word, first_of_words(word, chars)


def first_of_words(word: np.ndarray, chars: np.ndarray) -> np.ndarray:
    """[t] bool: per word, its first sub-token holding characters (else its first sub-token)."""
    first = np.zeros(len(word), dtype=bool)
    seen = np.zeros(int(word.max()) + 1 if len(word) else 0, dtype=bool)
    for k in np.flatnonzero(chars):
        if not seen[word[k]]:
            seen[word[k]] = first[k] = True
    starts = np.flatnonzero(np.r_[True, word[1:] != word[:-1]])
    lacking = starts[~seen[word[starts]]]
    first[lacking] = True
    return first


@dataclass
class Window:
    start: int        # first sub-token (inclusive) of the sentence in this window
    end: int          # last sub-token + 1


def windows(word: np.ndarray, room: int, overlap: int) -> list[Window]:
    """Windows of at most `room` sub-tokens over a sentence whose sub-tokens belong to `word`;
    cuts fall on word starts where possible."""
    n = len(word)
    if n <= room:
        return [Window(0, n)]
    first = np.flatnonzero(np.r_[True, word[1:] != word[:-1]])        # sub-token index of word starts
    out, start = [], 0
    while True:
        end = min(start + room, n)
        if end < n:
            cut = first[(first > start) & (first <= end)]
            end = int(cut[-1]) if cut.size else end                    # a word longer than the room
        out.append(Window(start, end))
        if end >= n:
            return out
        nxt = first[(first > start) & (first >= end - overlap)]
        start = int(nxt[0]) if nxt.size and nxt[0] < end else end


def owners(word: np.ndarray, first: np.ndarray, wins: list[Window]) -> np.ndarray:
    """[words] index of the window that predicts each word: among the windows holding its
    labelled sub-token (`first`), the one where it has the most context on its shorter side."""
    first = np.flatnonzero(first)
    owner = np.full(int(word.max()) + 1 if len(word) else 0, -1, dtype=np.int64)
    best = np.full(len(owner), -1, dtype=np.int64)
    for w, win in enumerate(wins):
        for t in first[(first >= win.start) & (first < win.end)]:
            context = min(t - win.start, win.end - 1 - t)
            if context > best[word[t]]:
                best[word[t]], owner[word[t]] = context, w
    return owner


# ------------------------------------------------------------------------ sentence -> windows
class TagWindow:
    """One window as the model reads it: [CLS] sub-tokens [SEP] (ids [t], type_ids [t] zeros),
    and `word` [t]: the word each position predicts (its labelled sub-token, in the window that
    owns the word), -100 everywhere else (special tokens included)."""

    def __init__(self, ids: np.ndarray, word: np.ndarray):
        self.ids, self.word = ids, word
        self.type_ids = np.zeros(len(ids), dtype=np.int64)


def tag_windows(aligned, room: int, overlap: int, cls_id: int, sep_id: int) -> list[TagWindow]:
    """One aligned sentence (align's (ids, word, first)) -> its windows, each word predicted by
    exactly one of them."""
    ids, word, first = aligned
    wins = windows(word, room, overlap)
    own = owners(word, first, wins)
    out = []
    for w, win in enumerate(wins):
        sl = slice(win.start, win.end)
        mine = first[sl] & (own[word[sl]] == w)                    # positions this window predicts
        out.append(TagWindow(np.r_[cls_id, ids[sl], sep_id], np.r_[-100, np.where(mine, word[sl], -100), -100]))
    return out


def per_word(n_words: int, pieces) -> np.ndarray:
    """(words [k], values [k, ...]) of every window -> values [n_words, ...] in word order; every
    word must come exactly once (the window invariant: a bug if broken)."""
    pieces = list(pieces)
    tail = next((np.shape(v)[1:] for _, v in pieces if len(v)), ())
    dtype = next((np.asarray(v).dtype for _, v in pieces if len(v)), np.float32)
    out = np.zeros((n_words, *tail), dtype=dtype)
    seen = np.zeros(n_words, dtype=np.int64)
    for words, values in pieces:
        words = np.asarray(words, dtype=np.int64)
        out[words] = values
        np.add.at(seen, words, 1)
    if (seen != 1).any():
        raise AssertionError(f"word {int(np.flatnonzero(seen != 1)[0])} predicted {int(seen[seen != 1][0])} times")
    return out


class TagWindows(list):
    """The windows of one record, with its words' character spans in the text predict reports."""

    text: str = ""
    spans: list = []
    pretokenized: bool = False


class TagFeaturizer:
    """Words (`tokens`, or the words the tokenizer's pre-tokenizer finds in `text`) -> windows of
    `max_length` tokens (fine-tuning's alignment, window overlap and owners) -> per-word tags
    and their entities (conlleval's chunking) with character offsets."""

    def __init__(self, ctx: Context) -> None:
        if not ctx.labels:
            raise UserError("the model's config.json has no labels (id2label)", fix="export a fine-tuned tagger")
        self.ctx, self.info = ctx, ctx.info
        self.labels: tuple[str, ...] = ctx.labels                  # known: refused above without them
        self.room = ctx.max_length - 2                             # [CLS] ... [SEP] / <s> ... </s>
        self.overlap = min(int(ctx.option("window_overlap", NerConfig.window_overlap)), self.room // 2)

    def encode_sentences(self, sentences: list[list[str]]) -> list[list[TagWindow]]:
        """Fine-tuning's batched form: every sentence's windows."""
        info = self.info
        return [tag_windows(a, self.room, self.overlap, info.cls_id, info.sep_id)
                for a in align(info.tokenizer, sentences, info.unk_id)]

    def words_of(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the words of `text` as the tokenizer's pre-tokenizer splits it (the
        words' own characters: the space byte-level BPE and Unigram pieces carry is left out)."""
        enc = self.info.tokenizer.encode(text, add_special_tokens=False)
        spans: dict[int, list[int]] = {}
        for w, (s, e) in zip(enc.word_ids, enc.offsets):
            if w is not None:
                lo, hi = spans.setdefault(w, [s, e])
                spans[w] = [min(lo, s), max(hi, e)]
        tight = tight_spans(text, [(spans[w][0], spans[w][1]) for w in sorted(spans)])
        return [(int(s), int(e)) for s, e in tight if e > s]

    def encode(self, rec: dict, where: str) -> TagWindows:
        words = rec.get("tokens")
        out = TagWindows()
        if words is not None:
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise UserError("`tokens` must be a list of strings", where=where)
            out.text, out.pretokenized = " ".join(words), True
            starts = np.cumsum([0] + [len(w) + 1 for w in words])
            out.spans = [(int(s), int(s) + len(w)) for s, w in zip(starts, words)]
        else:
            text = field(rec, TEXT, where)
            if not isinstance(text, str):
                raise UserError("the text field must hold a string", where=where)
            out.text, out.spans = text, self.words_of(text)
            words = [text[s:e] for s, e in out.spans]
        out.extend(self.encode_sentences([words])[0])
        return out

    def decode(self, rec: dict, windows: TagWindows, outputs) -> dict:
        picked = [(win.word[win.word >= 0], out["logits"][win.word >= 0]) for win, out in zip(windows, outputs)]
        logits = per_word(len(windows.spans), picked)                                  # [words, C]
        probs = softmax(logits.astype(np.float64))
        labels = self.labels
        tags = [labels[int(i)] for i in logits.argmax(-1)] if len(logits) else []    # fine-tuning's argmax
        text, spans, found = windows.text, windows.spans, []
        for typ, a, b in entities(tags):
            start, end = spans[a][0], spans[b][1]
            found.append({"type": typ, "start": start, "end": end, "text": text[start:end],
                          "score": round(float(probs[a:b + 1].max(-1).mean()), 6),
                          **({"words": [a, b + 1]} if windows.pretokenized else {})})
        return {"entities": found, "tags": tags}
