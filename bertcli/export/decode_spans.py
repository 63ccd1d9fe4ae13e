"""Predict decoders of the per-token heads: NER entities and SQuAD answer spans.

Both window long inputs the way fine-tuning does (docs/design.md):
    ner   windows of max_length tokens overlapping by `stride`; every word is predicted once, from
          the window where it has the most context on both sides; the word's label is its first
          sub-token's; entities are chunked as conlleval does (IOB1 and IOB2 both: an I-X after
          O or another type starts an entity), with character offsets into the text
    qa    exactly fine-tuning's windows and decoding (bertcli.finetune.qa.features and
          squad_decode): the question cut to 64 tokens, 384-token windows whose starts are 128
          context tokens apart, n-best 20, answers up to 30 tokens, character offsets into the
          context; with --allow-impossible (SQuAD 2.0) the null span can win, its odds reported
"""

from __future__ import annotations

import numpy as np

from bertcli.core.errors import UserError
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


def _tight(text: str, start: int, end: int) -> tuple[int, int]:
    """A character span without the whitespace byte-level BPE tokens carry (`Ġcat` = " cat")."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


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
                        chars = _tight(text, enc.offsets[pos][0], enc.offsets[last][1])
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


class _Window:
    """One SQuAD window as pad_batch reads it."""

    def __init__(self, ids, type_ids):
        self.ids, self.type_ids = ids, type_ids


@decoder("question-answering")
class Spans:
    """Fine-tuning's own windows and decoding (finetune.squad_features / squad_decode), run on a
    whole chunk of records at once."""

    def __init__(self, ctx):
        o = ctx.options
        self.ctx = ctx
        self.max_length = min(int(o.get("qa_max_length") or 384), ctx.max_length)
        self.stride = int(o.get("doc_stride") or 128)
        self.max_question = int(o.get("max_question_length") or 64)
        self.n_best, self.max_answer = 20, int(o.get("max_answer_length") or 30)
        self.version = 2 if o.get("allow_impossible") else 1

    def encode_many(self, items):
        from bertcli.finetune.qa.data import SquadSplit
        from bertcli.finetune.qa.features import build_features

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
        f = self.f = build_features(self.ctx.info.tokenizer, self.split, self.max_length, self.stride,
                                    self.max_question, labels=False)
        windows: list[list] = [[] for _ in range(n)]
        for w in range(len(f)):
            a, b = f.offsets[w], f.offsets[w + 1]
            windows[int(f.example[w])].append(_Window(f.ids[a:b].tolist(), f.types[a:b].tolist()))
        return windows

    def decode_many(self, items, windows, outputs):
        from bertcli.finetune.qa.decode import context_logits, decode

        f = self.f
        T = int(np.diff(f.offsets).max())
        start = np.full((len(f), T), -np.inf, np.float32)
        end = np.full((len(f), T), -np.inf, np.float32)
        for w, out in enumerate(outputs):                  # windows are numbered in record order
            start[w, :len(out["start_logits"])] = out["start_logits"]
            end[w, :len(out["end_logits"])] = out["end_logits"]
        s, e = context_logits(start, end, f)
        d = decode(self.split, f, s, e, np.stack([start[:, 0], end[:, 0]], 1), self.n_best, self.max_answer,
                   self.version)
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
