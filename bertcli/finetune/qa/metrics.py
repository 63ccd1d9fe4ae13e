"""SQuAD scoring exactly as the official evaluation scripts define it.

    normalize   lowercase, drop ASCII punctuation (string.punctuation), drop the articles
                a / an / the as whole words, collapse whitespace (the scripts' order)
    EM          normalized prediction == normalized gold, max over the gold answers
    F1          bag-of-tokens F1 of the normalized whitespace tokens, max over the gold answers

v1.1 (`evaluate-v1.1.py`) and v2.0 (`evaluate-v2.0.py`) differ only at the edges, and both are
kept: v2.0 drops gold answers that normalize to nothing (an unanswerable question's gold is the
empty string), and its F1 is 1 when prediction and gold are both empty, 0 when one is. v2.0 adds
the HasAns / NoAns breakdown, the no-answer-probability threshold (`null_odds.json` is its
`--na-prob-file`) and the best threshold over dev (`best_exact_thresh`, `best_f1_thresh`).

`chars=True` scores text without spaces as CMRC 2018's official cmrc2018_evaluate.py does:
lowercase; "mixed segmentation" (each Chinese character its own segment, other text split into
words and punctuation marks -- the script uses nltk's word_tokenize, approximated here by
words and single marks); its punctuation list removed; F1 from the longest common contiguous
run of segments (not a bag), EM on the strings without that punctuation. official_scores() reports
percentages, as the scripts print them.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
    """The official scripts' normalize_answer."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


# cmrc2018_evaluate.py's sp_char (its one two-character entry never matches a character)
_CMRC_PUNCT = frozenset("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")
_CJK = re.compile(r"[\u4e00-\u9fa5]")
_WORDISH = re.compile(r"\w+|[^\w\s]")


def mixed_segmentation(s: str, remove_punct: bool = True) -> list[str]:
    """CMRC 2018's segments: each Chinese character alone, other runs split into words and marks."""
    out: list[str] = []
    run: list[str] = []
    for ch in s.lower().strip():
        if remove_punct and ch in _CMRC_PUNCT:
            continue
        if _CJK.match(ch) or ch in _CMRC_PUNCT:
            if run:
                out.extend(_WORDISH.findall("".join(run)))
                run = []
            out.append(ch)
        else:
            run.append(ch)
    if run:
        out.extend(_WORDISH.findall("".join(run)))
    return out


def _cmrc_strip(s: str) -> str:
    return "".join(ch for ch in s.lower().strip() if ch not in _CMRC_PUNCT)


def longest_common_run(a: list[str], b: list[str]) -> int:
    """Length of the longest common contiguous run of segments (the script's find_lcs)."""
    best = 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                cur[j + 1] = prev[j] + 1
                if cur[j + 1] > best:
                    best = cur[j + 1]
        prev = cur
    return best


def tokens(s: str, chars: bool = False) -> list[str]:
    return mixed_segmentation(s) if chars else normalize_answer(s).split()


def exact(prediction: str, gold: str, chars: bool = False) -> float:
    if chars:
        return float(_cmrc_strip(prediction) == _cmrc_strip(gold))
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str, version: int = 1, chars: bool = False) -> float:
    """Token F1 (0..1). version 2: empty vs empty is 1, empty vs non-empty 0 (v1.1: always 0).
    chars: over CMRC 2018's segments, the overlap being their longest common run."""
    pred, ref = tokens(prediction, chars), tokens(gold, chars)
    if version == 2 and (not pred or not ref):
        return float(pred == ref)
    same = longest_common_run(ref, pred) if chars else sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def gold_texts(answers: Sequence[str], version: int, chars: bool = False) -> list[str]:
    """The gold answers a prediction is compared with (v2.0: the non-empty ones, else [""])."""
    if version == 1:
        return list(answers)
    return [a for a in answers if tokens(a, chars)] or [""]


def score_one(prediction: str, answers: Sequence[str], version: int = 1, chars: bool = False) -> tuple[float, float]:
    """(EM, F1) of one question, each 0..1, max over the gold answers."""
    golds = gold_texts(answers, version, chars)
    if not golds:  # v1.1 never has a question without answers; nothing can match
        return 0.0, 0.0
    return (max(exact(prediction, g, chars) for g in golds),
            max(f1(prediction, g, version, chars) for g in golds))


def raw_scores(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]], version: int = 1,
               chars: bool = False) -> tuple[dict[str, float], dict[str, float]]:
    """Per-question EM and F1 (0..1). A question without a prediction scores 0 (v1.1's rule)."""
    em, f = {}, {}
    for qid, answers in golds.items():
        pred = predictions.get(qid)
        if pred is None:
            em[qid], f[qid] = 0.0, 0.0
            continue
        em[qid], f[qid] = score_one(pred, answers, version, chars)
    return em, f


def apply_no_ans_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                           has_ans: Mapping[str, bool], threshold: float) -> dict[str, float]:
    """The v2.0 script: a question whose no-answer score exceeds `threshold` counts as answered
    "no answer" (right exactly when it has none)."""
    return {qid: (float(not has_ans[qid]) if na_probs[qid] > threshold else s) for qid, s in scores.items()}


def _mean(scores: Mapping[str, float], qids: Iterable[str]) -> tuple[float, int]:
    qids = list(qids)
    return (100.0 * sum(scores[q] for q in qids) / len(qids) if qids else 0.0), len(qids)


def find_best_thresh(predictions: Mapping[str, str], scores: Mapping[str, float],
                     na_probs: Mapping[str, float], has_ans: Mapping[str, bool]) -> tuple[float, float]:
    """The v2.0 script's search: questions in rising no-answer score are switched from "no
    answer" to their prediction one by one; returns (best score %, the no-answer score at it)."""
    current: float = sum(1 for q in scores if not has_ans[q])
    best, best_thresh = current, 0.0
    diff: float
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        current += diff
        if current > best:
            best, best_thresh = current, na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def official_scores(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]], version: int = 1,
             na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0,
             chars: bool = False, search_predictions: Mapping[str, str] | None = None) -> dict:
    """The official scripts' output dict. v1.1: {"exact_match", "f1"}. v2.0: exact, f1, total,
    HasAns_* / NoAns_*, and with `na_probs` best_exact(_thresh) / best_f1(_thresh).
    `search_predictions` (default: `predictions`) are the answers the threshold search may
    switch on: pass each question's best non-null span to search over every threshold."""
    em, f = raw_scores(predictions, golds, version, chars)
    if version == 1:
        n = len(golds)
        return {"exact_match": 100.0 * sum(em.values()) / n if n else 0.0,
                "f1": 100.0 * sum(f.values()) / n if n else 0.0, "total": n}
    has_ans = {q: bool(a) for q, a in golds.items()}   # the script's make_qid_to_has_ans
    if na_probs is not None:
        em_t = apply_no_ans_threshold(em, na_probs, has_ans, na_prob_thresh)
        f_t = apply_no_ans_threshold(f, na_probs, has_ans, na_prob_thresh)
    else:
        em_t, f_t = em, f
    out: dict = {}
    out["exact"], out["total"] = _mean(em_t, golds)
    out["f1"], _ = _mean(f_t, golds)
    has, none = [q for q in golds if has_ans[q]], [q for q in golds if not has_ans[q]]
    if has:
        out["HasAns_exact"], out["HasAns_total"] = _mean(em_t, has)
        out["HasAns_f1"], _ = _mean(f_t, has)
    if none:
        out["NoAns_exact"], out["NoAns_total"] = _mean(em_t, none)
        out["NoAns_f1"], _ = _mean(f_t, none)
    if na_probs is not None:
        search = predictions if search_predictions is None else search_predictions
        s_em, s_f = raw_scores(search, golds, 2, chars)
        out["best_exact"], out["best_exact_thresh"] = find_best_thresh(search, s_em, na_probs, has_ans)
        out["best_f1"], out["best_f1_thresh"] = find_best_thresh(search, s_f, na_probs, has_ans)
    return out


def has_spaces(texts: Iterable[str], sample: int = 200) -> bool:
    """Whether text is written with spaces between words (False: Chinese, Japanese, Thai...):
    some of the first `sample` contexts hold a space per 40 characters or more."""
    total = spaces = 0
    for i, t in enumerate(texts):
        if i >= sample:
            break
        total += len(t)
        spaces += sum(ch.isspace() for ch in t)
    return total == 0 or spaces * 40 >= total


__all__ = ["normalize_answer", "mixed_segmentation", "longest_common_run", "exact", "f1", "score_one",
           "raw_scores", "official_scores", "apply_no_ans_threshold", "find_best_thresh", "has_spaces"]
