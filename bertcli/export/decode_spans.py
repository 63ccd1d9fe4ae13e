"""Predict decoders of the per-token heads: NER entities and SQuAD answer spans.

Both window long inputs the way fine-tuning does (DESIGN.md):
    ner   windows of max_length tokens overlapping by `stride`; every word is predicted once, from
          the window where it has the most context on both sides; the word's label is its first
          sub-token's; entities are chunked as conlleval does (IOB1 and IOB2 both: an I-X after
          O or another type starts an entity), with character offsets into the text
    qa    the question cut to 64 tokens, the context in windows of 384 tokens with a 128-token
          overlap; per window the n-best 20 starts and ends inside the context, end >= start,
          at most 30 tokens; the best span over all windows, its text cut from the context by
          offsets; `null_score` (the [CLS] span, SQuAD v2) is reported, and with
          --allow-impossible an empty answer wins when it scores higher
"""

from __future__ import annotations

import numpy as np

from bertcli.errors import UserError
from bertcli.export.decode import TEXT, decoder, softmax
from bertcli.export.inputs import field


def _windowed(ctx, max_length: int, stride: int, strategy: str = "longest_first"):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(ctx.tokenizer.to_str())
    tok.no_padding()
    tok.enable_truncation(max_length=max_length, stride=stride, strategy=strategy)
    return tok


def _all_windows(enc) -> list:
    return [enc, *enc.overflowing]


def chunk_entities(tags: list[str]) -> list[tuple[str, int, int]]:
    """(type, first word, last word + 1) of every entity in a tag sequence (conlleval rules)."""
    out, start, kind = [], None, None
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, typ = tag.partition("-") if "-" in tag else ("O" if tag == "O" else "I", "", tag)
        begins = prefix in ("B", "S") or (prefix in ("I", "E") and typ != kind)
        if start is not None and (prefix == "O" or begins):
            out.append((kind, start, i))
            start, kind = None, None
        if prefix != "O" and start is None:
            start, kind = i, typ
        if prefix in ("E", "S") and start is not None:
            out.append((kind, start, i + 1))
            start, kind = None, None
    return out


@decoder("token-classification")
class Entities:
    def __init__(self, ctx):
        if not ctx.labels:
            raise UserError("the model's config.json has no labels (id2label)", fix="export a fine-tuned tagger")
        self.ctx = ctx
        self.tok = _windowed(ctx, ctx.max_length, min(int(ctx.options.get("stride") or 128), ctx.max_length // 2))

    def encode(self, rec, where):
        words = rec.get("tokens")
        if words is not None:
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise UserError("`tokens` must be a list of strings", where=where)
            rec["_text"] = " ".join(words)
            return _all_windows(self.tok.encode(words, is_pretokenized=True))
        rec["_text"] = field(rec, TEXT, where)
        return _all_windows(self.tok.encode(rec["_text"]))

    def decode(self, rec, windows, outputs):
        text = rec.pop("_text")
        best: dict[int, tuple[int, np.ndarray, tuple[int, int]]] = {}   # word -> (context, probs, chars)
        pretok = rec.get("tokens") is not None
        starts = np.cumsum([0] + [len(w) + 1 for w in rec["tokens"]]) if pretok else None
        for enc, out in zip(windows, outputs):
            ids = enc.word_ids
            content = [i for i, w in enumerate(ids) if w is not None]
            if not content:
                continue
            lo, hi = content[0], content[-1]
            for pos, word in enumerate(ids):
                if word is None or (pos > 0 and ids[pos - 1] == word):
                    continue                                                  # first sub-token only
                margin = min(pos - lo, hi - pos)
                if word not in best or margin > best[word][0]:
                    if pretok:
                        chars = (int(starts[word]), int(starts[word] + len(rec["tokens"][word])))
                    else:
                        last = max(p for p, w in enumerate(ids) if w == word)
                        chars = (enc.offsets[pos][0], enc.offsets[last][1])
                    best[word] = (margin, softmax(out["logits"][pos].astype(np.float64)), chars)
        words = sorted(best)
        labels = self.ctx.labels
        tags = [labels[int(best[w][1].argmax())] for w in words]
        entities = []
        for typ, a, b in chunk_entities(tags):
            start, end = best[words[a]][2][0], best[words[b - 1]][2][1]
            score = float(np.mean([best[words[i]][1].max() for i in range(a, b)]))
            entities.append({"type": typ, "start": int(start), "end": int(end), "text": text[start:end],
                             "score": round(score, 6), **({"words": [words[a], words[b - 1] + 1]} if pretok else {})})
        return {"entities": entities, "tags": tags}


@decoder("question-answering")
class Spans:
    def __init__(self, ctx):
        o = ctx.options
        self.ctx = ctx
        self.max_length = min(int(o.get("qa_max_length") or 384), ctx.max_length)
        self.stride = min(int(o.get("doc_stride") or 128), self.max_length // 2)
        self.max_question = int(o.get("max_question_length") or 64)
        self.n_best, self.max_answer = 20, int(o.get("max_answer_length") or 30)
        self.allow_impossible = bool(o.get("allow_impossible"))
        self.tok = _windowed(ctx, self.max_length, self.stride, strategy="only_second")

    def encode(self, rec, where):
        question, context = field(rec, ("question",), where), field(rec, ("context",), where)
        q = self.ctx.tokenizer.encode(question, add_special_tokens=False)
        if len(q.ids) > self.max_question:                                  # cut the question at a token edge
            question = question[:q.offsets[self.max_question - 1][1]]
        return _all_windows(self.tok.encode(question, context))

    def decode(self, rec, windows, outputs):
        context = rec["context"]
        best = (-np.inf, 0, 0)
        null = np.inf
        for enc, out in zip(windows, outputs):
            s, e = out["start_logits"].astype(np.float64), out["end_logits"].astype(np.float64)
            null = min(null, s[0] + e[0])
            inside = np.array([sid == 1 for sid in enc.sequence_ids])
            cand_s = [i for i in np.argsort(-s, kind="stable")[:self.n_best] if inside[i]]
            cand_e = [i for i in np.argsort(-e, kind="stable")[:self.n_best] if inside[i]]
            for i in cand_s:
                for j in cand_e:
                    if j < i or j - i + 1 > self.max_answer:
                        continue
                    score = s[i] + e[j]
                    if score > best[0]:
                        best = (score, enc.offsets[i][0], enc.offsets[j][1])
        score, a, b = best
        if not np.isfinite(score) or (self.allow_impossible and null > score):
            return {"answer": "", "start": None, "end": None, "score": None, "null_score": round(float(null), 6)}
        return {"answer": context[a:b], "start": int(a), "end": int(b), "score": round(float(score), 6),
                "null_score": round(float(null), 6)}
