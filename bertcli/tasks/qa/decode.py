"""From start / end logits of every window to one answer per question (n-best over all windows).

Per window, the `n_best` highest start and end logits among its context tokens form the
candidate spans; a span is kept when it ends at or after its start, is at most
`max_answer_length` tokens long and covers text (a bare-space token never starts or ends one).
Candidates of all windows of a question compete on start + end logit; the best `n_best` distinct
texts form the n-best list with softmax probabilities (a span seen by several windows counts once,
with its best score). Google's run_squad.py also drops spans whose start token has more context
in another window; that loses answers which lie whole only in the other window, so it is not
done. Nothing outside the context can be chosen: only context positions are ever read.

v2.0: the null score of a question is the lowest start + end logit at the first token over its
windows; null odds = null score - best span score. The prediction is "" when the odds exceed
`null_threshold`, else the best span; null_odds.json is the official evaluation's na-prob file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bertcli.config.finetune_sections import SquadConfig
from bertcli.core.errors import UserError
from bertcli.tasks.featurizer import Context, field
from bertcli.tasks.qa.data import SquadSplit
from bertcli.tasks.qa.features import Windows, build_features


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
        # a window's n_best best pairs are all it can contribute to its question's n-best list
        # (a text's best pair is in its window's top n_best, or n_best better texts are)
        k = si.shape[1]
        flat = np.where(ok, score, -np.inf).reshape(F_, k * k)                     # [F, k*k]
        keep = _top(flat, n_best)                                                  # [F, n]
        pick = np.isfinite(flat[np.arange(F_)[:, None], keep])
        cand_f: np.ndarray = np.nonzero(pick)[0]
        pair = keep[pick]
        cand_s, cand_e = si[cand_f, pair // k], ei[cand_f, pair % k]
        cand_score = flat[cand_f, pair]
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
    # everything per candidate as plain lists (numpy scalars are slow in the loop below)
    base = np.concatenate([[0], np.cumsum([len(sp) for sp in f.spans])]).astype(np.int64)
    flat_spans = np.concatenate(f.spans) if f.spans else np.zeros((0, 2), np.int64)
    ctx_of = np.asarray(split.context_of, dtype=np.int64)
    tok0 = base[ctx_of[cand_q]] + f.doc_start[cand_f]                              # [n] first window token
    c0s = flat_spans[tok0 + cand_s, 0].tolist() if len(cand_q) else []
    c1s = flat_spans[tok0 + cand_e, 1].tolist() if len(cand_q) else []
    s_log = doc_start_logits[cand_f, cand_s].tolist() if len(cand_q) else []
    e_log = doc_end_logits[cand_f, cand_e].tolist() if len(cand_q) else []
    scores = cand_score.tolist()
    bounds = q_bounds.tolist()
    for q in range(len(split)):
        qid, context = split.ids[q], split.context(q)
        entries, seen = [], set()
        for k in range(bounds[q], bounds[q + 1]):
            text = context[c0s[k]:c1s[k]]
            if text in seen:
                continue
            seen.add(text)
            entries.append({"text": text, "answer_start": c0s[k], "start_logit": s_log[k], "end_logit": e_log[k],
                            "score": scores[k]})
            if len(entries) >= n_best:
                break
        best = entries[0] if entries else None
        best_spans[qid] = best["text"] if best else ""
        if version == 2:
            nw = null_window[q]
            null_entry = {"text": "", "answer_start": -1, "start_logit": float(null_logits[nw, 0]),
                          "end_logit": float(null_logits[nw, 1]), "score": float(null[q])}
            diff = float(null[q]) - (best["score"] if best else -math.inf)
            odds[qid] = diff if math.isfinite(diff) else 1e9
            preds[qid] = "" if best is None or diff > null_threshold else best["text"]
            entries = sorted(entries + [null_entry], key=lambda x: -x["score"])[:n_best + 1]
        else:
            preds[qid] = best["text"] if best else ""
        if entries:   # softmax over the n-best scores
            top = max(x["score"] for x in entries)
            weights = [math.exp(x["score"] - top) for x in entries]
            total = sum(weights)
            for x, wgt in zip(entries, weights):
                x["probability"] = wgt / total
        nbest[qid] = entries
    return Decoded(preds, best_spans, nbest, odds)


QA_WINDOW = 384   # recipes/squad.yaml's max_seq_length: windows for a QA model without results.json


class _Window:
    """One window as predict's batches read it."""

    def __init__(self, ids: list[int], type_ids: list[int]) -> None:
        self.ids, self.type_ids = ids, type_ids


class SpanFeaturizer:
    """Fine-tuning's own windows (features.build_features) and decoding (`decode`) with one set
    of settings, read from the Context: max_length tokens per window, doc_stride,
    max_query_length, n_best, max_answer_length, null_threshold; version 2 (the null span may
    win, `allow_impossible`) or 1. SquadTask and predict both go through `windows` / `answers`."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        d = SquadConfig()
        # a model bertcli did not fine-tune gets the squad recipe's 384-token windows (or fewer positions)
        self.max_length = min(ctx.max_length, int(ctx.option("qa_max_length", QA_WINDOW)))
        self.stride = int(ctx.option("doc_stride", d.doc_stride))
        self.max_question = int(ctx.option("max_query_length", d.max_query_length))
        self.n_best = int(ctx.option("n_best", d.n_best))
        self.max_answer = int(ctx.option("max_answer_length", d.max_answer_length))
        self.null_threshold = float(ctx.option("null_threshold", d.null_threshold))
        self.version = 2 if ctx.option("allow_impossible", False) else 1

    def windows(self, split: SquadSplit, zero_types: bool = False, labels: bool = False) -> Windows:
        return build_features(self.ctx.info.tokenizer, split, self.max_length, self.stride, self.max_question,
                              zero_types, labels=labels)

    def answers(self, split: SquadSplit, f: Windows, start: np.ndarray, end: np.ndarray,
                null: np.ndarray) -> Decoded:
        """`start` / `end` [F, D] context logits (context_logits), `null` [F, 2] the first token's."""
        return decode(split, f, start, end, null, self.n_best, self.max_answer, self.version, self.null_threshold)

    # -- predict: records -------------------------------------------------------------------
    def encode_many(self, items) -> list[list[_Window]]:
        questions, contexts = [], []
        for where, rec in items:
            q, c = field(rec, ("question",), where), field(rec, ("context",), where)
            if not isinstance(q, str) or not isinstance(c, str):
                raise UserError("question and context must be strings", where=where)
            questions.append(q)
            contexts.append(c)
        n = len(items)
        self.split = SquadSplit("predict", "input", contexts, [str(i) for i in range(n)], questions, list(range(n)),
                                [[] for _ in range(n)], [[] for _ in range(n)], self.version)
        f = self.f = self.windows(self.split)
        windows: list[list[_Window]] = [[] for _ in range(n)]
        for w in range(len(f)):
            a, b = f.offsets[w], f.offsets[w + 1]
            windows[int(f.example[w])].append(_Window(f.ids[a:b].tolist(), f.types[a:b].tolist()))
        return windows

    def decode_many(self, items, windows, outputs) -> list[dict]:
        f = self.f
        T = int(np.diff(f.offsets).max())
        start = np.full((len(f), T), -np.inf, np.float32)
        end = np.full((len(f), T), -np.inf, np.float32)
        for w, out in enumerate(outputs):                  # windows are numbered in record order
            start[w, :len(out["start_logits"])] = out["start_logits"]
            end[w, :len(out["end_logits"])] = out["end_logits"]
        s, e = context_logits(start, end, f)
        d = self.answers(self.split, f, s, e, np.stack([start[:, 0], end[:, 0]], 1))
        preds = []
        for i in range(len(items)):
            qid = str(i)
            answer = d.predictions[qid]
            best = next((x for x in d.nbest.get(qid, []) if x["text"] == answer and answer), None)
            pred = {"answer": answer, "start": best["answer_start"] if best else None,
                    "end": best["answer_start"] + len(answer) if best else None,
                    "score": round(float(best["score"]), 6) if best else None}
            if self.version == 2:
                pred["null_odds"] = round(float(d.null_odds[qid]), 6)
            preds.append(pred)
        return preds


__all__ = ["Decoded", "decode", "context_logits", "SpanFeaturizer"]
