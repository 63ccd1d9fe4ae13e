"""SQuAD windows and decoding: every gold answer is recovered exactly from the offsets for
WordPiece, byte-level BPE and Unigram, also when it straddles a window boundary (found whole in
another window); the windows are the tokenizer's own pair encoding; decoding never leaves the
context, never ends before it starts and respects the length limit."""

from __future__ import annotations

import random

import numpy as np
import pytest
from squad_synth import all_text, squad_json, tiny_tokenizer

from bertcli.core.errors import UserError
from bertcli.tasks.qa.data import read_json
from bertcli.tasks.qa.decode import context_logits, decode
from bertcli.tasks.qa.features import build_features, template_of

KINDS = ("wordpiece", "bpe", "unigram")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    import json

    rng = random.Random(1)
    docs = {v: squad_json(rng, 25, version=v, n_words=(120, 220), n_facts=3) for v in (1, 2)}
    texts = all_text(docs[1]) + all_text(docs[2])
    toks = {k: tiny_tokenizer(k, texts) for k in KINDS}
    root = tmp_path_factory.mktemp("squad")
    splits = {}
    for v, doc in docs.items():
        (root / f"d{v}.json").write_text(json.dumps(doc), encoding="utf-8")
        splits[v] = read_json(root / f"d{v}.json", "train")[0]
    return toks, splits


@pytest.mark.parametrize("kind", KINDS)
def test_every_answer_recovered_exactly_from_offsets(corpus, kind):
    toks, splits = corpus
    split = splits[1]
    f = build_features(toks[kind], split, max_seq_length=64, doc_stride=20, max_query_length=16)
    assert f.unaligned == 0
    lab = f.labels
    found = np.zeros(len(split), dtype=bool)
    straddled = 0
    for w in range(len(f)):
        q = f.example[w]
        gold = split.answers[q][0]
        start, end = lab[w]
        assert f.lengths[w] <= 64
        if start == 0:
            assert end == 0
            # does the answer cross this window's edge? (partly inside, partly outside)
            sp = f.spans[split.context_of[q]]
            a0, a1 = split.starts[q][0], split.starts[q][0] + len(gold)
            lo, hi = sp[f.doc_start[w], 0], sp[f.doc_start[w] + f.doc_len[w] - 1, 1]
            straddled += (a0 < lo < a1) or (a0 < hi < a1)
            continue
        assert f.ctx_start[w] <= start <= end < f.ctx_start[w] + f.doc_len[w]
        sp = f.spans[split.context_of[q]]
        a = f.doc_start[w] + start - f.ctx_start[w]
        b = f.doc_start[w] + end - f.ctx_start[w]
        assert split.context(q)[sp[a, 0]:sp[b, 1]] == gold
        found[q] = True
    assert found.all()                       # every answer lies whole in some window
    assert straddled > 0                     # and some windows cut an answer in two
    assert len(f) > 2 * len(split)           # contexts are several windows long


@pytest.mark.parametrize("kind", KINDS)
def test_windows_are_the_tokenizers_pair_encoding(corpus, kind):
    toks, splits = corpus
    tok, split = toks[kind], splits[1]
    f = build_features(tok, split, max_seq_length=384, doc_stride=128, max_query_length=64)
    tpl = template_of(tok)
    for q in range(10):
        w = int(np.flatnonzero(f.example == q)[0])
        ids = f.ids[f.offsets[w]:f.offsets[w + 1]]
        ref = tok.encode(split.questions[q], split.context(q))
        if f.doc_len[w] == len(ref.ids) - len(ref.ids[:f.ctx_start[w]]) - len(tpl.suffix):  # one window
            assert ids.tolist() == ref.ids
            assert f.types[f.offsets[w]:f.offsets[w + 1]].tolist() == ref.type_ids
    # all context tokens are covered, consecutive windows start doc_stride apart
    g = build_features(tok, split, max_seq_length=64, doc_stride=20, max_query_length=16)
    for q in range(len(split)):
        ws = np.flatnonzero(g.example == q)
        assert (np.diff(g.doc_start[ws]) == 20).all()
        assert g.doc_start[ws[-1]] + g.doc_len[ws[-1]] == len(g.spans[split.context_of[q]])


def test_unanswerable_questions_label_the_first_token(corpus):
    toks, splits = corpus
    split = splits[2]
    f = build_features(toks["wordpiece"], split, 64, 20, 16)
    impossible = np.array([not a for a in split.answers])
    assert impossible.sum() > 5
    assert (f.labels[impossible[f.example]] == 0).all()
    assert (f.labels[~impossible[f.example]] > 0).any()


def test_question_longer_than_the_window_is_a_user_error(corpus):
    toks, splits = corpus
    with pytest.raises(UserError, match="leave no room"):
        build_features(toks["wordpiece"], splits[1], max_seq_length=8, doc_stride=4, max_query_length=64)


@pytest.mark.parametrize("kind", KINDS)
def test_decoding_invariants_and_oracle(corpus, kind):
    toks, splits = corpus
    split = splits[2]
    f = build_features(toks[kind], split, 64, 20, 16)
    rng = np.random.default_rng(0)
    T = int(f.lengths.max())
    start, end = rng.normal(size=(len(f), T)), rng.normal(size=(len(f), T))
    s, e = context_logits(start, end, f)
    null = np.stack([start[:, 0], end[:, 0]], 1)
    d = decode(split, f, s, e, null, n_best=20, max_answer_length=5, version=2, null_threshold=0.0)
    for q, qid in enumerate(split.ids):
        ctx = split.context(q)
        entries = [x for x in d.nbest[qid] if x["text"]]
        assert entries and len(entries) <= 20
        assert sum(x["probability"] for x in d.nbest[qid]) == pytest.approx(1.0)
        for x in entries:
            assert 0 <= x["answer_start"] < len(ctx)
            assert ctx[x["answer_start"]:x["answer_start"] + len(x["text"])] == x["text"]
            sp = f.spans[split.context_of[q]]
            a = np.flatnonzero((sp[:, 0] == x["answer_start"]) & (sp[:, 1] > sp[:, 0]))
            b = np.flatnonzero((sp[:, 1] == x["answer_start"] + len(x["text"])) & (sp[:, 1] > sp[:, 0]))
            # at most max_answer_length tokens (byte-level BPE: a character's bytes share its span)
            assert any(0 <= bb - aa < 5 for aa in a for bb in b)
        assert d.best_spans[qid] == entries[0]["text"]
        assert d.predictions[qid] == ("" if d.null_odds[qid] > 0 else entries[0]["text"])
    # oracle logits: a peak at the labelled start and end of each window decodes to the gold text
    v1 = splits[1]
    f1 = build_features(toks[kind], v1, 64, 20, 16)
    start = np.full((len(f1), T), -10.0)
    end = np.full((len(f1), T), -10.0)
    rows = np.arange(len(f1))
    start[rows, f1.labels[:, 0]] = 10.0
    end[rows, f1.labels[:, 1]] = 10.0
    s, e = context_logits(start, end, f1)
    d = decode(v1, f1, s, e, np.stack([start[:, 0], end[:, 0]], 1), version=1)
    assert all(d.predictions[qid] == v1.answers[q][0] for q, qid in enumerate(v1.ids))
