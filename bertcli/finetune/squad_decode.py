"""From start / end logits of every window to one answer per question (n-best over all windows).

Per window, the `n_best` highest start and end logits among its context tokens form the
candidate spans; a span is kept when it ends at or after its start, is at most
`max_answer_length` tokens long and covers text (a bare-space token never starts or ends one).
Candidates of all windows of a question compete on start + end logit; the best `n_best` distinct
texts form the n-best list with softmax probabilities (a span seen by several windows counts once,
with its best score). Google's run_squad.py also drops spans whose start token has more context
in another window; that loses answers which lie whole only in the other window, so it is not done. Nothing outside the context can be chosen: only
context positions are ever read.

v2.0: the null score of a question is the lowest start + end logit at the first token over its
windows; null odds = null score - best span score. The prediction is "" when the odds exceed
`null_threshold`, else the best span; null_odds.json is the official evaluation's na-prob file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertcli.finetune.squad_data import SquadSplit
from bertcli.finetune.squad_features import Windows


@dataclass
class Decoded:
    predictions: dict[str, str]          # question id -> answer ("" = no answer, v2.0)
    best_spans: dict[str, str]           # question id -> best non-null span ("" when none)
    nbest: dict[str, list[dict]]         # question id -> n-best entries
    null_odds: dict[str, float]          # question id -> null score - best span score (v2.0)


def context_logits(start: np.ndarray, end: np.ndarray, f: Windows) -> tuple[np.ndarray, np.ndarray]:
    """[F, T] full-window logits -> [F, D] context-only logits (-inf past each window's context)."""
    D = f.nonempty.shape[1]
    j = np.arange(D)[None, :]
    cols = np.minimum(f.ctx_start[:, None] + j, start.shape[1] - 1)
    valid = j < f.doc_len[:, None]
    rows = np.arange(len(f))[:, None]
    s = np.where(valid, start[rows, cols], -np.inf)
    e = np.where(valid, end[rows, cols], -np.inf)
    return s.astype(np.float32), e.astype(np.float32)


def _top(x: np.ndarray, k: int) -> np.ndarray:
    """Indices [F, k] of the k largest entries of each row (any order)."""
    k = min(k, x.shape[1])
    return np.argpartition(-x, k - 1, axis=1)[:, :k]


def decode(split: SquadSplit, f: Windows, doc_start_logits: np.ndarray, doc_end_logits: np.ndarray,
           null_logits: np.ndarray, n_best: int = 20, max_answer_length: int = 30,
           version: int = 1, null_threshold: float = 0.0) -> Decoded:
    """`doc_*_logits` [F, D] from context_logits; `null_logits` [F, 2] the start and end logit at
    the first token of each window."""
    null_scores = null_logits[:, 0] + null_logits[:, 1] if len(null_logits) else np.zeros(0)
    F_, D = doc_start_logits.shape
    preds, best_spans, nbest, odds = {}, {}, {}, {}
    if F_ and D:
        si, ei = _top(doc_start_logits, n_best), _top(doc_end_logits, n_best)      # [F, k]
        rows = np.arange(F_)[:, None, None]
        s, e = si[:, :, None], ei[:, None, :]                                      # [F, k, 1], [F, 1, k]
        score = doc_start_logits[rows, s] + doc_end_logits[rows, e]                # [F, k, k]
        ok = ((e >= s) & (e - s + 1 <= max_answer_length) & np.isfinite(score)
              & f.nonempty[rows, s] & f.nonempty[rows, e])
        cand_f, cand_a, cand_b = np.nonzero(ok)
        cand_s, cand_e = si[cand_f, cand_a], ei[cand_f, cand_b]
        cand_score = score[cand_f, cand_a, cand_b]
    else:
        cand_f = cand_s = cand_e = np.zeros(0, np.int64)
        cand_score = np.zeros(0, np.float32)
    # group candidates by question, best first
    cand_q = f.example[cand_f] if len(cand_f) else np.zeros(0, np.int32)
    order = np.lexsort((-cand_score, cand_q))
    cand_q, cand_f, cand_s, cand_e, cand_score = (a[order] for a in (cand_q, cand_f, cand_s, cand_e, cand_score))
    q_bounds = np.searchsorted(cand_q, np.arange(len(split) + 1))
    # null score per question: the lowest over its windows (Google's choice)
    null = np.full(len(split), np.inf)
    np.minimum.at(null, f.example, null_scores)
    null_window = {}
    for w in np.argsort(null_scores, kind="stable")[::-1]:   # the lowest wins
        null_window[int(f.example[w])] = int(w)
    s_logits, e_logits = doc_start_logits, doc_end_logits
    for q in range(len(split)):
        qid, context = split.ids[q], split.context(q)
        entries, seen = [], set()
        for k in range(q_bounds[q], q_bounds[q + 1]):
            w, a, b = int(cand_f[k]), int(cand_s[k]), int(cand_e[k])
            sp = f.spans[split.context_of[q]]
            c0, c1 = int(sp[f.doc_start[w] + a, 0]), int(sp[f.doc_start[w] + b, 1])
            text = context[c0:c1]
            if text in seen:
                continue
            seen.add(text)
            entries.append({"text": text, "answer_start": c0, "start_logit": float(s_logits[w, a]),
                            "end_logit": float(e_logits[w, b]), "score": float(cand_score[k])})
            if len(entries) >= n_best:
                break
        best = entries[0] if entries else None
        best_spans[qid] = best["text"] if best else ""
        if version == 2:
            nw = null_window[q]
            null_entry = {"text": "", "answer_start": -1, "start_logit": float(null_logits[nw, 0]),
                          "end_logit": float(null_logits[nw, 1]), "score": float(null[q])}
            diff = float(null[q]) - (best["score"] if best else -np.inf)
            odds[qid] = diff if np.isfinite(diff) else 1e9
            preds[qid] = "" if best is None or diff > null_threshold else best["text"]
            entries = sorted(entries + [null_entry], key=lambda x: -x["score"])[:n_best + 1]
        else:
            preds[qid] = best["text"] if best else ""
        scores = np.array([x["score"] for x in entries], dtype=np.float64)
        if len(scores):
            p = np.exp(scores - scores.max())
            p /= p.sum()
            for x, prob in zip(entries, p):
                x["probability"] = float(prob)
        nbest[qid] = entries
    return Decoded(preds, best_spans, nbest, odds)


__all__ = ["Decoded", "decode", "context_logits"]
