"""The characters a vocabulary covers, and why tokens come out as [UNK].

`tokenizers`' WordPiece trainer keeps the `limit_alphabet` most frequent characters and drops the
rest: its default of 1,000 silently turned 11-18% of Chinese text into [UNK] (Chinese uses several
thousand characters). `limit_alphabet: auto` keeps every character seen at least `min_frequency`
times. After training, the tokenizer stage measures the [UNK] rate on the validation split; above
UNK_WARN_RATE it attributes every [UNK] to a cause and warns with the key to change.

Characters are counted as the trainer counts them: after the tokenizer's normalizer (lowercase,
accents stripped, CJK split), whitespace left out. The normalizers bertcli uses act character by
character, so normalizing each distinct character and adding up its count is exact.
"""

from __future__ import annotations

import numpy as np

UNK_WARN_RATE = 0.01
TOKENIZERS_DEFAULT_ALPHABET = 1000  # WordPiece/BPE trainers' own default limit
# WordPiece turns a word longer than this into one [UNK] (max_input_chars_per_word, BERT and tokenizers)
MAX_WORD_CHARS = 100
_PREFIXES = ("##", "▁", "Ġ")


def character_counts(tok, sentence_batches) -> dict[str, int]:
    """{character: occurrences} over batches of sentences, after `tok`'s normalizer."""
    total = np.zeros(0x110000, dtype=np.int64)  # one slot per code point
    for batch in sentence_batches:
        codes = np.frombuffer("".join(batch).encode("utf-32-le"), dtype=np.uint32)
        total += np.bincount(codes, minlength=0x110000)
    counts: dict[str, int] = {}
    norm = tok.normalizer
    for code in np.flatnonzero(total):
        ch, n = chr(code), int(total[code])
        for c in (norm.normalize_str(ch) if norm is not None else ch):
            if not c.isspace():
                counts[c] = counts.get(c, 0) + n
    return counts


def alphabet_limit(limit, min_frequency: int, counts: dict[str, int]) -> int:
    """The trainer's limit_alphabet for a recipe value (`auto` or a number). `auto`: every
    character seen >= min_frequency times, and at least the 1,000 most frequent, extended over
    characters tied with the last one so the cut never falls inside a tie (the trainer breaks
    ties in hash order, which would make the vocabulary depend on the run)."""
    if limit != "auto":
        return int(limit)
    freqs = sorted(counts.values(), reverse=True)
    frequent = sum(1 for f in freqs if f >= min_frequency)
    floor = min(TOKENIZERS_DEFAULT_ALPHABET, len(freqs))
    while 0 < floor < len(freqs) and freqs[floor] == freqs[floor - 1]:
        floor += 1
    return max(frequent, floor, 1)


def alphabet_stats(limit_setting, min_frequency: int, counts: dict[str, int], limit: int) -> dict:
    """What the alphabet kept, for tokenizer_info.json and the [UNK] warning."""
    frequent = sum(1 for f in counts.values() if f >= min_frequency)
    return {"limit_alphabet": limit_setting, "limit": limit, "distinct": len(counts),
            "kept": min(limit, len(counts)), "frequent": frequent,
            "frequent_cut": max(0, frequent - limit)}


def known_characters(tok) -> set[str]:
    """Characters the vocabulary has as a piece of their own (bare, `##`, `▁` or `Ġ` form)."""
    out = set()
    for piece in tok.get_vocab(with_added_tokens=False):
        for p in _PREFIXES:
            if piece.startswith(p) and len(piece) > len(p):
                piece = piece[len(p):]
                break
        if len(piece) == 1:
            out.add(piece)
    return out


class UnkCauses:
    """Attributes each [UNK] token of an evaluation to one cause (see `causes`)."""

    def __init__(self, tok, unk_id: int, counts: dict[str, int] | None, min_frequency: int):
        self.tok, self.unk_id, self.counts, self.min_frequency = tok, unk_id, counts, min_frequency
        self.known = known_characters(tok)
        self.norm = tok.normalizer
        self.tally = {"cut_by_limit": 0, "rare": 0, "unseen": 0, "long_word": 0, "vocabulary": 0}
        self.examples: dict[str, int] = {}

    def add(self, sentence: str, enc) -> None:
        for i in (i for i, t in enumerate(enc.ids) if t == self.unk_id):
            a, b = enc.offsets[i]
            word = sentence[a:b]
            missing = [c for ch in word for c in (self.norm.normalize_str(ch) if self.norm else ch)
                       if not c.isspace() and c not in self.known]
            if missing:
                c = missing[0]
                self.examples[c] = self.examples.get(c, 0) + 1
                self.tally[self._char_cause(c)] += 1
            elif len(word) > MAX_WORD_CHARS:
                self.tally["long_word"] += 1
            else:
                self.tally["vocabulary"] += 1

    def _char_cause(self, c: str) -> str:
        if self.counts is None:
            return "unseen"
        n = self.counts.get(c, 0)
        return "unseen" if n == 0 else "rare" if n < self.min_frequency else "cut_by_limit"

    def result(self) -> dict:
        top = sorted(self.examples.items(), key=lambda kv: (-kv[1], kv[0]))[:12]
        return {**self.tally, "examples": "".join(c for c, _ in top)}


def unk_warning(info: dict) -> str | None:
    """The warning for a tokenizer_info.json whose [UNK] rate exceeds UNK_WARN_RATE, naming the
    causes (largest first) and the keys to change; None below it."""
    rate = info.get("eval_unk_rate")
    if rate is None or rate <= UNK_WARN_RATE:
        return None
    causes = info.get("unk_causes") or {}
    alpha = info.get("alphabet") or {}
    limit, minf = alpha.get("limit_alphabet", "?"), info.get("min_frequency", "?")
    texts = {
        "cut_by_limit": (f"characters cut by the alphabet limit (tokenizer.limit_alphabet {limit}: "
                         f"{alpha.get('frequent_cut', 0):,} characters seen at least {minf} times were "
                         "left out)", "set tokenizer.limit_alphabet: auto, or a larger number"),
        "rare": (f"characters seen fewer than tokenizer.min_frequency ({minf}) times in the training text",
                 "lower tokenizer.min_frequency, or train on more text"),
        "unseen": ("characters the training text does not have",
                   "train the tokenizer on text like the validation text (more of it; check "
                   "tokenizer.sample_documents)"),
        "long_word": (f"words longer than {MAX_WORD_CHARS} characters (WordPiece makes each one [UNK])",
                      "keep tokenizer.split_cjk: true for text without spaces (Chinese, Japanese)"),
        "vocabulary": ("words the vocabulary cannot spell (a vocabulary too small)",
                       "raise tokenizer.vocab_size"),
    }
    total = sum(v for k, v in causes.items() if k in texts) or 1
    parts = [f"{what} [{causes[k] / total:.0%} of them]; fix: {fix}"
             for k, (what, fix) in sorted(texts.items(), key=lambda kv: -causes.get(kv[0], 0))
             if causes.get(k, 0) / total >= 0.05]
    example = f" (most frequent unknown characters: {causes['examples']})" if causes.get("examples") else ""
    return (f"{rate:.2%} of the {info.get('evaluated_on', 'validation')} tokens are [UNK], above "
            f"{UNK_WARN_RATE:.0%}{example}. Causes: "
            + " | ".join(parts or ["not recorded (built by an older bertcli: `bertcli tokenize --rebuild` records them)"]))
