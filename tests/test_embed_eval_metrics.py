"""Retrieval and STS metrics of `evaluate-embed` against independent implementations:
sentence-transformers' InformationRetrievalEvaluator (binary relevance) and a hand-written
trec_eval / pytrec_eval definition (graded relevance) on the same rankings; the exact search
against a brute-force full sort; STS against scipy."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from helpers.beir import write_beir
from scipy import stats

from bertcli.core.errors import UserError
from bertcli.finetune.embed import retrieval, sts


def random_case(seed: int, n_queries: int = 40, n_docs: int = 150, graded: bool = True):
    """Rankings (a permutation of part of the corpus per query) and qrels, some relevant
    documents ranked beyond 100 or not at all, some queries with 0-score judgements only."""
    r = random.Random(seed)
    docs = [f"d{i:04d}" for i in range(n_docs)]
    rankings, qrels = {}, {}
    for q in range(n_queries):
        qid = f"q{q}"
        run = r.sample(docs, r.randint(20, 120))
        judged = r.sample(docs, r.randint(1, 12))
        for d in judged:                               # about half the judged documents ranked near the top
            if r.random() < 0.5:
                if d in run:
                    run.remove(d)
                run.insert(r.randint(0, 12), d)
        rankings[qid] = run
        qrels[qid] = {d: (r.choice([0, 1, 2, 3]) if graded else r.choice([0, 1, 1])) for d in judged}
    qrels["q-none"] = {docs[0]: 0}                      # no relevant document: left out of the means
    return rankings, qrels


def trec_reference(rankings, qrels):
    """trec_eval's definitions, written independently: ndcg_cut_10 (gain = the judgement),
    recip_rank cut at 10, recall_k, map_cut_100; means over queries with a relevant document."""
    out = {k: [] for k in ("ndcg@10", "mrr@10", "recall@1", "recall@10", "recall@100", "map@100")}
    for q, rels in qrels.items():
        relevant = [d for d, g in rels.items() if g > 0]
        if not relevant:
            continue
        run = rankings.get(q, [])
        gains = [rels.get(d, 0) if rels.get(d, 0) > 0 else 0 for d in run]
        dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains[:10]))
        ideal = sorted([g for g in rels.values() if g > 0], reverse=True)
        out["ndcg@10"].append(dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal[:10])))
        ranks = [i + 1 for i, d in enumerate(run[:10]) if rels.get(d, 0) > 0]
        out["mrr@10"].append(1 / ranks[0] if ranks else 0.0)
        for k in (1, 10, 100):
            out[f"recall@{k}"].append(sum(rels.get(d, 0) > 0 for d in run[:k]) / len(relevant))
        precisions = [np.mean([rels.get(x, 0) > 0 for x in run[:i + 1]]) for i, d in enumerate(run[:100])
                      if rels.get(d, 0) > 0]
        out["map@100"].append(sum(precisions) / len(relevant))
    return {k: float(np.mean(v)) for k, v in out.items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_equal_trec_definitions_with_graded_relevance(seed):
    rankings, qrels = random_case(seed)
    ours = retrieval.metrics(rankings, qrels)
    ref = trec_reference(rankings, qrels)
    assert ours.keys() == ref.keys()
    for k in ref:
        assert ours[k] == pytest.approx(ref[k], abs=1e-12), k
    assert 0.2 < ours["ndcg@10"] < 0.9           # a case that discriminates (not all 0 or all 1)


@pytest.mark.parametrize("seed", [3, 4])
def test_metrics_equal_sentence_transformers_ir_evaluator(seed):
    """ST's InformationRetrievalEvaluator.compute_metrics on the same rankings (scores = minus
    the rank, so its sort reproduces them); it has binary relevance, so the qrels are 0/1."""
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    rankings, qrels = random_case(seed, graded=False)
    queries = {q: q for q in qrels}
    corpus = {d: d for rels in qrels.values() for d in rels} | {d: d for run in rankings.values() for d in run}
    relevant = {q: {d for d, g in rels.items() if g > 0} for q, rels in qrels.items()}
    ev = InformationRetrievalEvaluator(queries, corpus, relevant, mrr_at_k=[10], ndcg_at_k=[10],
                                       accuracy_at_k=[1], precision_recall_at_k=[1, 10, 100], map_at_k=[100],
                                       write_csv=False)
    results = [[{"corpus_id": d, "score": -float(i)} for i, d in enumerate(rankings[q])] for q in ev.queries_ids]
    st = ev.compute_metrics(results)
    ours = retrieval.metrics(rankings, qrels)
    assert ours["ndcg@10"] == pytest.approx(st["ndcg@k"][10], abs=1e-12)
    assert ours["mrr@10"] == pytest.approx(st["mrr@k"][10], abs=1e-12)
    assert ours["map@100"] == pytest.approx(st["map@k"][100], abs=1e-12)
    for k in (1, 10, 100):
        assert ours[f"recall@{k}"] == pytest.approx(st["recall@k"][k], abs=1e-12)


def test_running_top_k_equals_a_full_sort_and_breaks_ties_by_corpus_order():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(7, 16)).astype(np.float32)
    d = rng.normal(size=(530, 16)).astype(np.float32)
    d[300] = d[10] * 3.0                             # the same direction: an exact cosine tie with doc 10
    idx, scores = retrieval.search(q, (d[i:i + 64] for i in range(0, len(d), 64)), k=100)
    cos = retrieval.normalized(q) @ retrieval.normalized(d).T
    for row in range(len(q)):
        full = sorted(range(len(d)), key=lambda j: (-cos[row, j], j))[:100]
        assert list(idx[row]) == full
        np.testing.assert_allclose(scores[row], cos[row, full], atol=1e-5)
    # the tie: doc 10 ranks directly before doc 300 wherever both are in the top 100
    for row in range(len(q)):
        where = {int(j): p for p, j in enumerate(idx[row])}
        if 10 in where and 300 in where:
            assert where[300] == where[10] + 1


def test_ties_across_the_hundredth_place_keep_the_earliest_documents(monkeypatch):
    rng = np.random.default_rng(1)
    q = rng.normal(size=(3, 8)).astype(np.float32)
    d = rng.normal(size=(400, 8)).astype(np.float32)
    d[50:350] = d[0]                                  # 301 identical documents (0 and 50..349)
    q[0] = d[0]                                       # query 0: all 301 tie for first place
    for chunk in (400, 128):                          # one chunk, and ties spread over several
        monkeypatch.setattr(retrieval, "QUERY_BLOCK", 2 if chunk == 128 else 2048)   # query blocks of 2, 1
        idx, _ = retrieval.search(q, (d[i:i + chunk] for i in range(0, len(d), chunk)), k=100)
        assert list(idx[0]) == [0] + list(range(50, 149))
        cos = retrieval.normalized(q) @ retrieval.normalized(d).T
        for row in (1, 2):
            assert list(idx[row]) == sorted(range(len(d)), key=lambda j: (-cos[row, j], j))[:100]


@pytest.mark.parametrize("seed", [0, 1])
def test_sts_equals_scipy(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=200)
    y = np.round(x + rng.normal(size=200), 1)          # rounded: ties, which Spearman ranks by their average
    assert sts.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert sts.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    u, v = rng.normal(size=(50, 8)), rng.normal(size=(50, 8))
    want = [float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) for a, b in zip(u, v)]
    np.testing.assert_allclose(sts.cosine_rows(u, v), want, atol=1e-12)


def test_read_beir_keeps_judged_queries_and_joins_title_and_text(tmp_path):
    root = write_beir(tmp_path / "b", [("a", "Title", "body one"), ("b", "", "body two")],
                      [("q1", "first"), ("q2", "second"), ("q3", "third")], [("q2", "a", 1), ("q1", "b", 2)])
    data = retrieval.read_beir(root, "test")
    assert data.corpus == ["Title body one", "body two"]
    assert data.query_ids == ["q1", "q2"] and data.queries == ["first", "second"]   # q3 has no judgement
    assert data.qrels == {"q2": {"a": 1}, "q1": {"b": 2}}


@pytest.mark.parametrize("bad,needle,line", [(("q9", "a", 1), "query id 'q9'", 3), (("q1", "zz", 1), "corpus id 'zz'", 3),
                                             (("q1", "a", "x"), "score 'x'", 3)])
def test_qrels_errors_name_the_line(tmp_path, bad, needle, line):
    root = write_beir(tmp_path / "b", [("a", "", "x")], [("q1", "y")], [("q1", "a", 1), bad])
    with pytest.raises(UserError) as e:
        retrieval.read_beir(root, "test")
    assert needle in e.value.what
    assert e.value.where == f"{root / 'qrels' / 'test.tsv'}:{line}"


def test_missing_split_is_one_message(tmp_path):
    root = write_beir(tmp_path / "b", [("a", "", "x")], [("q1", "y")], [("q1", "a", 1)])
    with pytest.raises(UserError, match="no dev.tsv"):
        retrieval.read_beir(root, "dev")
