"""Masked-LM selection and 80/10/10 replacement: ONE implementation, used both by the static
builder (masks stored on disk) and by the dynamic collator (a new mask per epoch).

Selection follows Google's create_pretraining_data.py and ALBERT's n-gram extension:
  * budget k: `fixed` = min(max_predictions_per_seq, max(1, round(len(row) * p))) where len(row)
    counts the special tokens as Google does; `bernoulli` = Binomial(#candidates, p) (the same
    distribution as selecting each non-special token independently with probability p, which
    is what transformers' collator does), capped by max_predictions_per_seq when set.
  * candidates are the non-special tokens; special tokens are never selected.
  * token level: a uniformly random k-subset of the candidates.
  * whole word: words (runs of candidate tokens starting at a word start) in random order,
    a word is taken whole if it fits in the remaining budget, skipped otherwise (Google).
  * n-gram (ALBERT): spans of 1..ngram whole words, the length of each span drawn with
    P(n) proportional to 1/n from the keyed RNG; span starts are visited in random order, a
    start where n words do not fit (overlap with an earlier span, or a special token within
    reach) is passed over and the same n tries the next start; at the end of the budget n
    shrinks until the span fits (as ALBERT). Only if budget is left after all starts (segments
    shorter than n words) does a second pass cut n to the room at each start. ALBERT's code instead draws n per start and drops
    the span on a collision, which skews the lengths actually masked toward 1 (3-grams: 15.0%
    of spans instead of 2/11 = 18.2% in 128-token rows with 20 predictions); here only the
    budget's end shortens spans (16.6% there, 17.6% in 512-token rows). Spans never cross a
    special token (the reference lets them run over [SEP]).
Replacement of each selected token: mask_replace_prob -> the mask id, random_replace_prob -> a
random non-special id, else unchanged.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from bertcli.config.sections import DataConfig
    from bertcli.tokenization.load import TokenizerInfo


@dataclass(frozen=True, eq=False)
class MaskSpec:
    """Everything masking needs, resolved from the tokenizer and the data section."""

    mask_id: int
    special: np.ndarray  # bool [V]: True for special-token ids
    replacements: np.ndarray  # int32 [R]: the non-special ids random replacements come from
    probability: float = 0.15
    mask_prob: float = 0.8
    random_prob: float = 0.1
    count: str = "fixed"  # fixed | bernoulli
    max_predictions: int | None = 20
    whole_word: bool = False
    ngram: int = 1

    @classmethod
    def from_config(cls, tok: TokenizerInfo, cfg: DataConfig) -> MaskSpec:
        """From a TokenizerInfo (vocab_size, mask_id, special_ids) and a DataConfig."""
        special = np.zeros(tok.vocab_size, dtype=bool)
        special[[i for i in tok.special_ids if i < tok.vocab_size]] = True
        return cls(
            mask_id=int(tok.mask_id),
            special=special,
            replacements=np.flatnonzero(~special).astype(np.int32),
            probability=cfg.mlm_probability,
            mask_prob=cfg.mask_replace_prob,
            random_prob=cfg.random_replace_prob,
            count=cfg.mask_count,
            max_predictions=cfg.max_predictions_per_seq,
            whole_word=cfg.whole_word,
            ngram=cfg.ngram,
        )

    @property
    def ngram_cdf(self) -> np.ndarray:
        """[ngram + 1, ngram] upper bounds: row a holds the CDF of P(n) ~ 1/n over n = 1..a
        (its first a-1 entries; the rest +inf), so n = 1 + #(u >= row)."""
        cached = self.__dict__.get("_cdf")
        if cached is None:
            g = self.ngram
            cached = np.full((g + 1, g), np.inf)
            for a in range(1, g + 1):
                p = 1.0 / np.arange(1, a + 1)
                cached[a, : a - 1] = (np.cumsum(p) / p.sum())[:-1]
            object.__setattr__(self, "_cdf", cached)
        return cached


@dataclass
class Masked:
    """One masked row: ids with replacements, selected positions (ascending), original ids."""

    input_ids: np.ndarray  # int [L]
    positions: np.ndarray  # int32 [k]
    labels: np.ndarray  # int32 [k]
    spans: list[int] | None = None  # n-gram lengths actually used (only when asked for)


def budget(n_tokens: int, n_candidates: int, rng: np.random.Generator, spec: MaskSpec) -> int:
    """How many tokens to select in a row of `n_tokens` with `n_candidates` non-special ones."""
    if spec.count == "fixed":
        k = max(1, int(round(n_tokens * spec.probability)))
    else:
        k = int(rng.binomial(n_candidates, spec.probability))
    if spec.max_predictions is not None:
        k = min(k, spec.max_predictions)
    return min(k, n_candidates)


def mask_row(
    ids: np.ndarray,
    rng: np.random.Generator,
    spec: MaskSpec,
    word_starts: np.ndarray | None = None,
    record_spans: bool = False,
) -> Masked:
    """Select and replace tokens of one row (`select` then `replace`)."""
    ids = np.asarray(ids)
    spans: list[int] | None = [] if record_spans else None
    pos, draws = select(ids, rng, spec, word_starts, spans)
    out = ids.copy()
    labels = replace(out, pos, draws, spec)
    return Masked(out, pos, labels, spans)


def select(
    ids: np.ndarray,
    rng: np.random.Generator,
    spec: MaskSpec,
    word_starts: np.ndarray | None = None,
    spans: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Positions to predict in one row (int32 [k], ascending) and the uniform draws that decide
    their replacement (float64 [k, 2]: 80/10/10 choice, random id). `word_starts` (1 where a
    word begins) is needed for whole-word and n-gram masking; `spans` collects n-gram lengths."""
    cand = ~spec.special[ids]  # bool [L]
    cand_pos = np.flatnonzero(cand)
    k = budget(len(ids), len(cand_pos), rng, spec)
    if k == 0:
        pos = cand_pos[:0]
    elif not spec.whole_word:
        pos = np.sort(cand_pos[rng.permutation(len(cand_pos))[:k]])
        if spans is not None:
            spans.extend([1] * k)
    else:
        if word_starts is None:
            raise ValueError("whole-word masking needs word_starts")
        pos = _select_words(cand, np.asarray(word_starts, dtype=bool), k, rng, spec, spans)
    return pos.astype(np.int32), rng.random((len(pos), 2))


def replace(ids: np.ndarray, pos: np.ndarray, draws: np.ndarray, spec: MaskSpec) -> np.ndarray:
    """Apply the 80/10/10 replacement IN PLACE at `pos` of `ids` (any flat view: one row, or a
    whole padded batch with flat positions), using `draws` from `select`; returns the original
    ids there (int32). Vectorized, so a collator calls it once per batch."""
    labels = ids[pos].astype(np.int32)
    if len(pos):
        decide = draws[:, 0]
        to_mask = decide < spec.mask_prob
        to_rand = (decide < spec.mask_prob + spec.random_prob) & ~to_mask
        ids[pos[to_mask]] = spec.mask_id
        pick = (draws[to_rand, 1] * len(spec.replacements)).astype(np.int64)
        ids[pos[to_rand]] = spec.replacements[pick]
    return labels


def _select_words(cand, starts, k, rng, spec, spans) -> np.ndarray:
    """Whole-word / n-gram selection (Google's WWM loop; n-gram spans as described above)."""
    L = len(cand)
    prev_cand = np.concatenate(([False], cand[:-1]))
    unit_first = np.flatnonzero(cand & (starts | ~prev_cand))  # first token of each word [W]
    # a word ends at the next word's start or at the next non-candidate token
    stop = np.where(cand, L, np.arange(L))
    next_stop = np.minimum.accumulate(stop[::-1])[::-1]  # [L] first non-candidate at or after i
    unit_end = np.minimum(np.append(unit_first[1:], L), next_stop[unit_first])
    W = len(unit_first)
    order = rng.permutation(W)
    # last[w]: index after the last word of w's run (words separated by a special token are in
    # different runs; a span never crosses a special token)
    gap = np.concatenate((unit_end[:-1] != unit_first[1:], [True]))
    last = (np.flatnonzero(gap) + 1)[np.cumsum(np.concatenate(([0], gap[:-1])))]
    if spec.ngram > 1:
        # one length per span, P(n) ~ 1/n; drawn up front (at most one span per word)
        n_draw = 1 + (rng.random(W)[:, None] >= spec.ngram_cdf[spec.ngram]).sum(axis=1)
    # the greedy loop runs on Python lists: per-element numpy calls would dominate
    first, end, last = unit_first.tolist(), unit_end.tolist(), last.tolist()
    draws = n_draw.tolist() if spec.ngram > 1 else [1] * W
    covered = bytearray(W)
    chosen: list[tuple[int, int]] = []
    total = 0
    # Second pass, only when the first left budget unused: a drawn n that fitted nowhere (every
    # run between special tokens shorter than n) is cut to the room at each start, so rows of
    # short segments still get spans.
    for w, fit in itertools.chain(((w, False) for w in order.tolist()), ((w, True) for w in order.tolist())):
        if total >= k:
            break
        n = draws[len(chosen)]
        if w + n > last[w]:
            if not fit:
                continue  # no room for n words from this start: the same n tries the next start
            n = last[w] - w
        size = end[w + n - 1] - first[w]
        while total + size > k and n > 1:  # the budget's end: shorten the span (as ALBERT)
            n -= 1
            size = end[w + n - 1] - first[w]
        if total + size > k or any(covered[w : w + n]):
            continue
        covered[w : w + n] = b"\x01" * n
        total += size
        chosen.append((w, n))
        if spans is not None:
            spans.append(n)
    if not chosen:
        return np.zeros(0, dtype=np.int64)
    pos = np.concatenate([np.arange(first[w], end[w + n - 1]) for w, n in chosen])
    pos.sort()
    return pos
