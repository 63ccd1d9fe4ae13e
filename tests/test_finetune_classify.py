"""`bertcli finetune classify` on files the test writes: a learnable csv task end to end through
the real CLI, the other file kinds, regression, metrics against scikit-learn, bad input."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import ONE_THREAD, assert_user_error, run_cli
from finetune_fixtures import tiny_checkpoint
from helpers.recipes import classify_config
from helpers.reviews import review_rows as _rows
from helpers.reviews import write_csv as _write_csv

from bertcli.core.errors import UserError


def test_classify_csv_learns_end_to_end(tmp_path):
    """A randomly initialized L2 H64 BERT reaches dev accuracy >= 0.9 on a three-class task
    (chance 0.33, one deciding word among 4-12 fillers); test predictions are written with the
    label strings."""
    rng = random.Random(5)
    rows = _rows(rng, 600)
    ckpt = tiny_checkpoint(tmp_path / "ckpt", [r["review"] for r in rows])
    train = _write_csv(tmp_path / "train.csv", rows)
    dev = _write_csv(tmp_path / "dev.csv", _rows(rng, 150))
    test_rows = _rows(rng, 40)
    test = _write_csv(tmp_path / "test.csv", test_rows, columns=("review",))
    out = tmp_path / "out"
    r = run_cli("finetune", "classify", "-c", ckpt, "--train", train, "--dev", dev, "--test", test,
                "--text-column", "review", "--label-column", "stars", "-o", out,
                "--set", "finetune.classify.learning_rate=1e-3", "--set", "finetune.classify.batch_size=16",
                "--set", "finetune.dropout=0",
                "--set", "finetune.classify.epochs=5", "--set", "finetune.classify.max_seq_length=48",
                cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    res = json.loads((out / "results.json").read_text())
    dev_m = res["dev"]["dev"]
    assert list(dev_m) == ["accuracy", "macro_f1", "mcc"]
    assert dev_m["accuracy"] >= 0.9 and dev_m["macro_f1"] >= 0.85, res["history"]
    assert res["hyperparameters"]["learning_rate"] == 1e-3 and res["hyperparameters"]["epochs"] == 5
    lines = (out / "test_predictions" / "test.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 41
    pred = [ln.split("\t")[1] for ln in lines[1:]]
    assert np.mean([p == t["stars"] for p, t in zip(pred, test_rows)]) >= 0.8

    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.id2label == {0: "negative", 1: "neutral", 2: "positive"}          # sorted labels


def test_file_kinds_and_labels(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bertcli.finetune.classification.classify import load_classify

    rows = [{"t": "a b", "u": "c", "y": 1}, {"t": 'say "hi"', "u": "d", "y": 0}, {"t": "e", "u": "f", "y": 2}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in "tuy"}), tmp_path / "a.parquet")
    (tmp_path / "a.tsv").write_text("t\tu\ty\n" + "".join(f"{r['t']}\t{r['u']}\t{r['y']}\n" for r in rows))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows), "validation": datasets.Dataset.from_list(rows)}
                         ).save_to_disk(str(tmp_path / "dd"))
    cfg = classify_config("finetune.classify.text_column=t", "finetune.classify.text_pair_column=u",
               "finetune.classify.label_column=y")
    for src in ("a.jsonl", "a.parquet", "a.tsv", "dd"):
        spec, data = load_classify(cfg, tmp_path / src, tmp_path / src, None)
        assert spec.labels == ("0", "1", "2") and data.train.labels.tolist() == [1, 0, 2], src
        assert data.train.text_a[1] == 'say "hi"' and data.train.text_b == ["c", "d", "f"], src
    reg_spec, reg = load_classify(classify_config("finetune.classify.text_column=t", "finetune.classify.label_column=y",
                             "finetune.classify.regression=true"), tmp_path / "a.jsonl", tmp_path / "a.tsv", None)
    assert reg_spec.is_regression and reg_spec.metrics == ("pearson", "spearman")
    assert reg.dev[0].labels.dtype == np.float32


def test_bad_classify_input(tmp_path):
    from bertcli.finetune.classification.classify import load_classify

    train = _write_csv(tmp_path / "train.csv", [{"review": "a", "stars": "good"}, {"review": "b", "stars": "bad"}])
    dev = _write_csv(tmp_path / "dev.csv", [{"review": "a", "stars": "good"}, {"review": "c", "stars": "great"}])
    with pytest.raises(UserError, match="no text column 'text'") as e:
        load_classify(classify_config(), train, dev, None)
    assert "review, stars" in e.value.fix
    with pytest.raises(UserError, match="dev label 'great' never occurs in the training file") as e:
        load_classify(classify_config("finetune.classify.text_column=review", "finetune.classify.label_column=stars"),
                      train, dev, None)
    assert e.value.where.endswith("dev.csv:3")
    with pytest.raises(UserError, match="not a number"):
        load_classify(classify_config("finetune.classify.text_column=review", "finetune.classify.label_column=stars",
                           "finetune.classify.regression=true"), train, dev, None)

    ckpt = tmp_path / "ckpt"       # never loaded: the files are checked first
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"model_type": "bert"}')
    (ckpt / "tokenizer.json").write_text("{}")
    r = run_cli("finetune", "classify", "-c", ckpt, "--train", train, "--dev", dev, "--text-column", "review",
                "--label-column", "stars", cwd=tmp_path)
    assert_user_error(r, "dev label 'great'", "dev.csv:3")
    assert not (tmp_path / "runs").exists()


def test_macro_f1_matches_sklearn():
    from sklearn.metrics import f1_score

    from bertcli.finetune.classification.metrics import f1_macro

    rng = np.random.default_rng(0)
    for k in (2, 3, 5):
        gold, pred = rng.integers(0, k, 200), rng.integers(0, k, 200)
        pred[:50] = gold[:50]
        assert f1_macro(pred, gold) == pytest.approx(f1_score(gold, pred, average="macro"), abs=1e-12)
    gold, pred = np.array([0, 0, 1]), np.array([2, 2, 1])          # a class only predicted
    assert f1_macro(pred, gold) == pytest.approx(f1_score(gold, pred, average="macro", zero_division=0), abs=1e-12)
