"""NSP / SOP pairs and packing on synthetic documents whose token ids say where they come from
(id = 10 + global position), so every segment can be traced back to its document."""

from __future__ import annotations

import numpy as np
import pytest

from bertcli.data import pairs
from bertcli.data.rng import KeyedRng
from bertcli.data.store import DocStore, TokenWriter

CLS, SEP, BASE = 2, 3, 10


def corpus(n_docs: int, seed: int, sent_len=(3, 30), n_sent=(1, 25)):
    rng = np.random.default_rng(seed)
    docs, owner, offset = [], [], 0
    for d in range(n_docs):
        lens = rng.integers(*sent_len, size=int(rng.integers(*n_sent)))
        n = int(lens.sum())
        ids = (BASE + offset + np.arange(n)).astype(np.int32)
        starts = (rng.random(n) < 0.7).astype(np.int8)
        docs.append(pairs.TokenDoc(ids, np.concatenate(([0], np.cumsum(lens))), starts))
        owner.append(np.full(n, d))
        offset += n
    return docs, np.concatenate(owner)


def where(ids, owner):
    """(document, position in the whole corpus) of each token."""
    g = np.asarray(ids) - BASE
    return owner[g], g


def picker(docs, d):
    def pick(rng):
        j = int(rng.integers(0, len(docs) - 1))
        return docs[j + (j >= d)]
    return pick


def segments(row_ids, types):
    a = row_ids[1 : int(np.argmax(types)) - 1]
    b = row_ids[int(np.argmax(types)) : -1]
    return a, b


def google_nsp(document, all_documents, d, max_seq_length, short_seq_prob, rng):
    """A literal port of create_instances_from_document (google-research/bert), with Python's
    rng.randint(a, b) as rng.integers(a, b + 1) and the random document drawn among the others."""
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = int(rng.integers(2, max_num_tokens + 1))
    instances, singles = [], 0
    current_chunk, current_length, i = [], 0, 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = int(rng.integers(1, len(current_chunk) - 1 + 1))
                tokens_a = [t for seg in current_chunk[:a_end] for t in seg]
                tokens_b = []
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    singles += len(current_chunk) == 1
                    target_b_length = target_seq_length - len(tokens_a)
                    j = int(rng.integers(0, len(all_documents) - 1))
                    random_document = all_documents[j + (j >= d)]
                    random_start = int(rng.integers(0, len(random_document) - 1 + 1))
                    for k in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[k])
                        if len(tokens_b) >= target_b_length:
                            break
                    i -= len(current_chunk) - a_end
                else:
                    is_random_next = False
                    tokens_b = [t for seg in current_chunk[a_end:] for t in seg]
                while len(tokens_a) + len(tokens_b) > max_num_tokens:
                    trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
                    if rng.random() < 0.5:
                        del trunc[0]
                    else:
                        trunc.pop()
                instances.append(([CLS] + tokens_a + [SEP] + tokens_b + [SEP], int(is_random_next)))
            current_chunk, current_length = [], 0
        i += 1
    return instances, singles


def test_nsp_is_googles_algorithm():
    """Instance for instance, the same as a literal port of Google's function fed the same
    random stream; then the properties of its output."""
    docs, owner = corpus(1000, 0)
    as_lists = [[d.ids[a:b].tolist() for a, b in zip(d.bounds, d.bounds[1:])] for d in docs]
    kr, kr2 = KeyedRng(), KeyedRng()
    n = label1 = singles = 0
    for d, doc in enumerate(docs):
        ours = pairs.nsp_instances(doc, picker(docs, d), 128, 0.1, kr.seed(1, d))
        ref, single = google_nsp(as_lists[d], as_lists, d, 128, 0.1, kr2.seed(1, d))
        singles += single
        assert len(ours) == len(ref)
        for inst, (ref_ids, ref_label) in zip(ours, ref):
            ids, types, starts = pairs.pair_row(inst, CLS, SEP)
            assert ids.tolist() == ref_ids and inst.label == ref_label
            assert len(ids) <= 128
            assert starts[1] == 1 and starts[int(np.argmax(types))] == 1
            a, b = segments(ids, types)
            (da, pa), (db, pb) = where(a, owner), where(b, owner)
            assert (da == d).all() and (np.diff(pa) == 1).all() and (np.diff(pb) == 1).all()
            assert len(set(db)) == 1
            if inst.label == 1:
                assert db[0] != d, "a random B must come from another document"
            else:
                assert db[0] == d and pb[0] > pa[-1], "B continues A"
            n += 1
            label1 += inst.label
    # random with p 0.5, plus always for chunks of a single sentence (Google's rule): among the
    # other chunks the share is 0.5 (n ~ 3000: standard error 0.9 points, tolerance 3 points)
    assert n > 2000
    assert abs((label1 - singles) / (n - singles) - 0.5) < 0.03, (label1, singles, n)


def test_nsp_truncation_from_both_ends_only_for_the_longer_segment():
    rng = np.random.default_rng(0)
    fronts = backs = 0
    for i in range(2000):
        la, lb = int(rng.integers(1, 200)), int(rng.integers(1, 200))
        af, ab, bf, bb = pairs.truncate_pair(la, lb, 125, KeyedRng().seed(i))
        la2, lb2 = la - af - ab, lb - bf - bb
        assert la2 + lb2 == min(la + lb, 125)
        if la + lb > 125:
            assert abs(la2 - lb2) <= 1 or min(la, lb) == min(la2, lb2)
        fronts += af + bf
        backs += ab + bb
    assert abs(fronts / (fronts + backs) - 0.5) < 0.01


def test_sop_negatives_are_exact_swaps():
    # documents short enough that nothing is truncated: A and B are exactly adjacent
    docs, owner = corpus(300, 1, sent_len=(2, 8), n_sent=(2, 12))
    kr = KeyedRng()
    seen = {0: 0, 1: 0}
    for d, doc in enumerate(docs):
        for inst in pairs.sop_instances(doc, 512, 0.0, kr.seed(2, d)):
            ids, types, _ = pairs.pair_row(inst, CLS, SEP)
            a, b = segments(ids, types)
            (da, _), (db, _) = where(a, owner), where(b, owner)
            assert (da == d).all() and (db == d).all(), "SOP never uses another document"
            first, second = (a, b) if inst.label == 0 else (b, a)
            # the in-order text is first + second, contiguous, and is the whole document here
            assert np.array_equal(np.concatenate((first, second)), doc.ids)
            seen[inst.label] += 1
    assert abs(seen[1] / (seen[0] + seen[1]) - 0.5) < 0.06


def test_sop_with_truncation_keeps_order_semantics():
    docs, owner = corpus(300, 2)
    kr = KeyedRng()
    for d, doc in enumerate(docs):
        for inst in pairs.sop_instances(doc, 64, 0.1, kr.seed(3, d)):
            ids, types, _ = pairs.pair_row(inst, CLS, SEP)
            assert len(ids) <= 64
            a, b = segments(ids, types)
            (_, pa), (_, pb) = where(a, owner), where(b, owner)
            if inst.label == 0:
                assert pa[-1] < pb[0]
            else:
                assert pb[-1] < pa[0]


@pytest.mark.parametrize("cross,sent_len,min_fill", [(True, (1, 40), 0.85), (False, (1, 40), 0.6),
                                                     (True, (60, 300), 0.5)])
def test_packing_full_and_doc_sentences(cross, sent_len, min_fill):
    docs, owner = corpus(200, 3, sent_len=sent_len)
    budget = 126
    plan = pairs.pack_plan((np.diff(d.bounds) for d in docs), budget, cross)
    seen = []
    for row in plan:
        ids, starts = pairs.packed_row(row, docs.__getitem__, CLS, SEP)
        assert len(ids) <= budget + 2 and ids[0] == CLS and ids[-1] == SEP
        body = ids[1:-1]
        parts = np.split(body, np.flatnonzero(body == SEP))
        parts = [p[p != SEP] for p in parts]
        doc_of = [set(owner[p - BASE].tolist()) for p in parts]
        assert all(len(s) == 1 for s in doc_of), "a separator between every two documents"
        if not cross:
            assert len(parts) == 1
        seen.append(body[body != SEP])
    seen = np.concatenate(seen)
    assert np.array_equal(seen, np.concatenate([d.ids for d in docs])), "every token once, in order"
    # whole sentences: a row starts at a sentence start unless it continues a too-long sentence
    sent_start = {int(d.ids[s]) for d in docs for s in d.bounds[:-1]}
    for row in plan:
        ids, _ = pairs.packed_row(row, docs.__getitem__, CLS, SEP)
        first = int(ids[1])
        d, p = owner[first - BASE], first - BASE
        assert first in sent_start or _in_long_sentence(docs[d], int(p - (docs[d].ids[0] - BASE)), budget)
    fill = sum(len(pairs.packed_row(r, docs.__getitem__, CLS, SEP)[0]) for r in plan) / (len(plan) * (budget + 2))
    assert fill > min_fill


def _in_long_sentence(doc, pos, budget):
    i = int(np.searchsorted(doc.bounds, pos, side="right")) - 1
    return doc.bounds[i + 1] - doc.bounds[i] > budget


def test_store_round_trip(tmp_path):
    docs, _ = corpus(50, 4)
    w = TokenWriter(tmp_path / "s0", flush_tokens=100)
    for d in docs[:30]:
        w.add([d.ids[a:b] for a, b in zip(d.bounds, d.bounds[1:])], [d.starts[a:b] for a, b in zip(d.bounds, d.bounds[1:])])
    w.add([np.zeros(0, np.int32)], [np.zeros(0, np.int8)])  # an empty document is dropped
    w.flush()
    w2 = TokenWriter(tmp_path / "s1")
    for d in docs[30:]:
        w2.add([d.ids[a:b] for a, b in zip(d.bounds, d.bounds[1:])], [d.starts[a:b] for a, b in zip(d.bounds, d.bounds[1:])])
    w2.flush()
    import pickle

    store = pickle.loads(pickle.dumps(DocStore([tmp_path / "s0", tmp_path / "s1"])))
    assert len(store) == 50
    for j in (0, 29, 30, 49):
        got = store[j]
        assert np.array_equal(got.ids, docs[j].ids) and np.array_equal(got.bounds, docs[j].bounds)
        assert np.array_equal(got.starts, docs[j].starts)
    lens = list(store.sentence_lengths())
    assert all(np.array_equal(x, np.diff(d.bounds)) for x, d in zip(lens, docs))
