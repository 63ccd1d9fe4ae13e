"""`bertcli evaluate-embed` and `bertcli embed` through the real CLI, on raw mean pooling of the
shared pretrained checkpoint: the figures equal sentence-transformers' own evaluators run on the
same model (written as a sentence-transformers directory), beat a random ranking by a margin,
and bad inputs are one message with exit code 2."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
from conftest import assert_user_error
from test_embed_eval_metrics import write_beir

from bertcli.finetune.embed import retrieval
from bertcli.model.pooling import Pooling
from bertcli.model.sentence import write_sentence_dir

TOPICS = {"music": "the band played songs and the singer sang music on the stage",
          "food": "the cook made bread and soup for dinner in the kitchen",
          "war": "the army fought the battle and the soldiers won the war",
          "school": "the students read books and the teacher taught the class at school",
          "sea": "the ship sailed across the sea and the water was cold",
          "church": "the church was built by the king and the bishop prayed",
          "football": "the team scored a goal and won the football game",
          "train": "the railway station opened and the train carried passengers",
          "river": "the river flows through the valley into the lake",
          "election": "the party won the election and the president gave a speech"}


def beir_set(root):
    """Two relevant documents per topic query (graded 2 and 1) among 30 documents, ids in corpus order."""
    r = random.Random(0)
    docs, queries, qrels = [], [], []
    n = 0
    for topic, text in TOPICS.items():
        words = text.split()
        for grade in (2, 1, 0):
            kept = [w for w in words if r.random() < 0.8]
            docs.append((f"d{n:03d}", "", " ".join(kept)))
            if grade:
                qrels.append((topic, f"d{n:03d}", grade))
            n += 1
        queries.append((topic, f"about the {topic} " + " ".join(r.sample(words, 3))))
    return write_beir(root, docs, queries, qrels)


def sts_set(path):
    """STS-B's layout: pairs of topic sentences, scored 5 for the same topic, 0-2 for others."""
    r = random.Random(1)
    names = list(TOPICS)
    lines = ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"]
    for i in range(40):
        a = r.choice(names)
        b = a if i % 2 == 0 else r.choice([x for x in names if x != a])
        score = 5.0 if a == b else round(r.uniform(0, 2), 2)
        s1 = " ".join(w for w in TOPICS[a].split() if r.random() < 0.7)
        s2 = " ".join(w for w in TOPICS[b].split() if r.random() < 0.7)
        lines.append(f"{i}\tmain\tx\t2012\t{i}\tx\tx\t{s1}\t{s2}\t{score}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def st_copy(pretrained_tiny, tmp_path):
    """The pretrained checkpoint as a sentence-transformers directory with raw mean pooling."""
    path = tmp_path / "st"
    shutil.copytree(pretrained_tiny, path)
    write_sentence_dir(path, Pooling("mean", False, json.loads((path / "config.json").read_text())["hidden_size"]), 128)
    return path


def test_evaluate_embed_equals_sentence_transformers_evaluators(cli, pretrained_tiny, st_copy, tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import (
        EmbeddingSimilarityEvaluator,
        InformationRetrievalEvaluator,
    )

    beir, sts_file = beir_set(tmp_path / "beir"), sts_set(tmp_path / "sts-dev.tsv")
    r = cli("evaluate-embed", "-c", pretrained_tiny, "--beir", beir, "--sts", sts_file, "--max-seq-length", "128", "--json",
            "--threads", "2")
    assert r.rc == 0, r.output
    assert "threads: 2 (--threads: 2)" in r.stderr, r.stderr
    got = json.loads(r.stdout)
    assert got["model"]["pooling"] == "mean" and got["model"]["normalize"] is False
    ret, sts = got["retrieval"], got["sts"]
    assert (ret["queries"], ret["documents"], sts["pairs"]) == (10, 30, 40)

    # the same model in sentence-transformers, its own evaluators (binary relevance: the graded
    # qrels count as relevant alike there, so nDCG is compared on binary judgements below)
    model = SentenceTransformer(str(st_copy), device="cpu")
    data = retrieval.read_beir(beir, "test")
    corpus = dict(zip(data.corpus_ids, data.corpus))
    queries = dict(zip(data.query_ids, data.queries))
    relevant = {q: set(d) for q, d in data.qrels.items()}
    ev = InformationRetrievalEvaluator(queries, corpus, relevant, accuracy_at_k=[1], precision_recall_at_k=[1, 10, 100],
                                       write_csv=False)
    st = ev(model)
    for name in ("mrr@10", "recall@1", "recall@10", "recall@100", "map@100"):
        assert ret[name] == pytest.approx(st[f"cosine_{name}"], abs=1e-5), name
    vectors = model.encode(data.queries), model.encode(data.corpus)
    cos = retrieval.normalized(vectors[0]) @ retrieval.normalized(vectors[1]).T
    rankings = {q: [data.corpus_ids[j] for j in np.argsort(-cos[i], kind="stable")] for i, q in enumerate(data.query_ids)}
    assert ret["ndcg@10"] == pytest.approx(retrieval.metrics(rankings, data.qrels)["ndcg@10"], abs=1e-5)
    binary = {q: {d: 1 for d in rels} for q, rels in data.qrels.items()}
    assert retrieval.metrics(rankings, binary)["ndcg@10"] == pytest.approx(st["cosine_ndcg@10"], abs=1e-5)

    # raw mean pooling is far above a random ranking on this set (the figure fine-tuning must beat)
    rng = random.Random(0)
    chance = np.mean([retrieval.metrics({q: rng.sample(data.corpus_ids, 30) for q in data.query_ids},
                                        data.qrels)["ndcg@10"] for _ in range(200)])
    assert chance < 0.35 and ret["ndcg@10"] > chance + 0.25, (ret, chance)

    a, b = [], []
    for line in sts_file.read_text().splitlines()[1:]:
        f = line.split("\t")
        a.append(f[7]), b.append(f[8])
    gold = [float(line.split("\t")[9]) for line in sts_file.read_text().splitlines()[1:]]
    ev_sts = EmbeddingSimilarityEvaluator(a, b, gold, write_csv=False)(model)
    assert sts["spearman"] == pytest.approx(ev_sts["spearman_cosine"], abs=1e-5)
    assert sts["pearson"] == pytest.approx(ev_sts["pearson_cosine"], abs=1e-5)
    assert sts["spearman"] > 0.3                                    # same-topic pairs are the closer ones


def test_embed_writes_npy_and_parquet_equal_to_the_embedder(cli, st_copy, tmp_path):
    import pyarrow.parquet as pq

    from bertcli.serve.evaluate_embed import Embedder

    texts = [t for t in TOPICS.values()] + ["a", "the river and the train"]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"key": f"k{i}", "text": t}) + "\n"
                                               for i, t in enumerate(texts)), encoding="utf-8")
    want = Embedder.load(st_copy, device="cpu").encode(texts)
    r = cli("embed", "-c", st_copy, "-i", "in.jsonl", "-o", "out.npy", "--id-column", "key", "--batch-size", "3")
    assert r.rc == 0, r.output
    assert "threads: 1 (OMP_NUM_THREADS=1)" in r.stderr, r.stderr     # auto: the suite's environment says 1
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, atol=1e-5)
    assert (tmp_path / "out.ids.tsv").read_text().split() == [f"k{i}" for i in range(len(texts))]
    r = cli("embed", "-c", st_copy, "-i", "in.jsonl", "-o", "out.parquet", "--normalize", "--threads", "2")
    assert r.rc == 0, r.output
    assert "threads: 2 (--threads: 2)" in r.stderr, r.stderr          # the flag wins over OMP_NUM_THREADS
    table = pq.read_table(tmp_path / "out.parquet").to_pydict()
    assert table["id"] == [str(i) for i in range(len(texts))]
    np.testing.assert_allclose(np.array(table["embedding"]), retrieval.normalized(want), atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == \
        ["out.ids.tsv", "out.npy", "out.parquet"]                     # no temporaries left
    assert_user_error(cli("embed", "-c", st_copy, "-i", "in.jsonl", "-o", "out.npy"), "--force")


def test_bad_inputs_exit_2(cli, st_copy, tmp_path):
    beir = beir_set(tmp_path / "beir")
    qrels = beir / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "music\td999\t1\n")
    n = len(qrels.read_text().splitlines())
    assert_user_error(cli("evaluate-embed", "-c", st_copy, "--beir", beir), "corpus id 'd999' is not in corpus.jsonl",
                      f"test.tsv:{n}")
    assert_user_error(cli("evaluate-embed", "-c", st_copy, "--beir", beir, "--split", "dev"), "no dev.tsv")
    (tmp_path / "pairs.csv").write_text("a,b,score\nx,y,1\nz,w,2\n")
    assert_user_error(cli("evaluate-embed", "-c", st_copy, "--sts", "pairs.csv"), "no column 'text'")
    assert_user_error(cli("evaluate-embed", "-c", st_copy, "--sts", "pairs.csv", "--pooling", "sum"), "pooling 'sum'")
