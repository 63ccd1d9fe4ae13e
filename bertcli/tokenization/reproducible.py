"""Byte-identical tokenizers from `tokenizers`' trainers, whatever the process.

`tokenizers` counts words in hash maps whose iteration order changes with every process, and
two of its trainers let that order reach the result:

- WordPiece (BpeTrainer underneath) gives the `##c` continuation pieces their ids in the order
  it first meets them while walking the word counts (huggingface/tokenizers#1794; #2066 explains
  it). Those ids break ties between equally frequent merges, so two runs learn other merges
  (539 ids moved between two retrains of one corpus). When `limit_alphabet` cuts the alphabet
  inside a run of equally frequent characters, which of them survive is hash order too.
  Fix, before training: the alphabet is chosen here (most frequent first, ties by code point)
  and passed as `initial_alphabet`, and every `##c` of it that can continue a word is passed as
  a special token, so the trainer finds them all in the vocabulary, in code-point order, before
  it walks the words. After training they stop being special tokens (`canonical`) and move
  behind the alphabet, where the trainer would have put them. A character that never continued
  a word keeps its `##c` piece: a vocabulary slot (a few per corpus), and a word that continues
  with it later is still encoded instead of becoming [UNK].
- Unigram sums the E-step in word-count order (the scores move in the 14th digit), sorts equal
  scores in hash order and gives the characters it must add the scores min, min - 1e-4, ... in
  hash-set order. `canonical` rounds the scores to SCORE_DECIMALS places (far above that noise,
  far below any difference that matters to a segmentation), gives the added characters their
  scores in code-point order and sorts equal scores by piece.
- Byte-level BPE is already deterministic: its alphabet is the 256 bytes in a fixed order and it
  has no continuation pieces (tests/test_reproducible.py shows all three).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from tokenizers import AddedToken, Tokenizer

from bertcli.core import jsonout

PREFIX = "##"
SCORE_DECIMALS = 6
UNIGRAM_PENALTY = 1e-4  # the step between the scores the Unigram trainer gives added characters


@dataclass
class WordPieceSeed:
    """What the WordPiece trainer is given so that it cannot depend on hash order."""

    alphabet: list[str]         # the kept characters (passed as initial_alphabet, limit = its length)
    continuations: list[str]    # `##c` pieces, in code-point order


def wordpiece_seed(counts: dict[str, int], limit: int, can_continue: Callable[[str], bool]) -> WordPieceSeed:
    """The `limit` most frequent characters (ties by code point) and the `##` forms of those
    that `can_continue` a word (not the ones the pre-tokenizer always isolates)."""
    ranked = sorted(counts, key=lambda c: (-counts[c], ord(c)))[:limit]
    alphabet = sorted(ranked, key=ord)
    cont = [PREFIX + c for c in alphabet if can_continue(c)]
    return WordPieceSeed(alphabet, cont)


def seed_tokens(seed: WordPieceSeed) -> list[AddedToken]:
    return [AddedToken(t, special=True, normalized=False) for t in seed.continuations]


def canonical(tok: Tokenizer, kind: str, seed: WordPieceSeed | None = None) -> Tokenizer:
    """The trained tokenizer with the order-dependent parts put in one canonical form."""
    if kind == "bpe":
        return tok
    data = json.loads(tok.to_str())
    if kind == "wordpiece":
        _wordpiece(data, seed)
    elif kind == "unigram":
        _unigram(data)
    return Tokenizer.from_str(jsonout.dumps(data, ensure_ascii=False))


def _wordpiece(data: dict, seed: WordPieceSeed | None) -> None:
    if seed is None or not seed.continuations:
        return
    cont = set(seed.continuations)
    data["added_tokens"] = [a for a in data["added_tokens"] if a["content"] not in cont]
    order = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    n_special = len(data["added_tokens"])
    specials, rest = order[:n_special], order[n_special:]
    pieces = [t for t, _ in rest if t in cont]
    others = [t for t, _ in rest if t not in cont]
    n_alpha = next((i for i, t in enumerate(others) if len(t) != 1), len(others))  # merges are longer
    tokens = [t for t, _ in specials] + others[:n_alpha] + pieces + others[n_alpha:]
    data["model"]["vocab"] = {t: i for i, t in enumerate(tokens)}


def _unigram(data: dict) -> None:
    model = data["model"]
    n_special = len(data["added_tokens"])
    specials = model["vocab"][:n_special]
    pieces = [[p, round(s, SCORE_DECIMALS)] for p, s in model["vocab"][n_special:]]
    # The characters the trainer added last: single characters at the scores min, min + 1e-4,
    # min + 2e-4, ... (min, the lowest score, may also be an ordinary piece's). They get those
    # scores in code-point order, the first character the lowest.
    if pieces:
        low = min(sc for _, sc in pieces)
        levels: dict[int, list] = {}
        for ps in pieces:
            k = (ps[1] - low) / UNIGRAM_PENALTY
            if len(ps[0]) == 1 and abs(k - round(k)) < 0.01:
                levels.setdefault(round(k), []).append(ps)
        chain, k = [], 0
        while k in levels:
            chain += levels[k]
            k += 1
        scores = sorted(ps[1] for ps in chain)
        for ps, sc in zip(sorted(chain, key=lambda ps: ord(ps[0])), scores):
            ps[1] = sc
    pieces.sort(key=lambda ps: (-ps[1], ps[0]))
    unk = specials[model["unk_id"]][0] if model.get("unk_id") is not None and model["unk_id"] < n_special else None
    model["vocab"] = specials + pieces
    if unk is not None:
        model["unk_id"] = next(i for i, (p, _) in enumerate(model["vocab"]) if p == unk)
