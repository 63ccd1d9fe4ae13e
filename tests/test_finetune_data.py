"""GLUE readers (original TSV layout, save_to_disk, hub parquet), metrics against scikit-learn /
scipy, submission files. No model involved: fast."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.glue import GLUE_FILES, QUOTED, QUOTED2, write_glue

from bertcli.core.errors import UserError
from bertcli.finetune.classification import metrics
from bertcli.finetune.classification.glue import TASKS, get_task, resolve_hyper
from bertcli.finetune.classification.glue_data import find_tasks, load_task
from bertcli.finetune.classification.submission import prediction_strings, write_predictions


@pytest.fixture
def glue_dir(tmp_path):
    return write_glue(tmp_path / "glue_data")


def test_every_tsv_layout_reads_with_raw_quotes(glue_dir):
    found = find_tasks(glue_dir)
    assert sorted(found) == sorted(TASKS)
    cola = load_task(TASKS["cola"], glue_dir)
    assert cola.layout == "tsv"
    assert cola.train.text_a[2] == 'He said "hello" and left.'           # headerless, quotes kept
    assert cola.train.labels.tolist() == [1, 0, 1]
    assert cola.test[0].ids == ["0", "1"] and cola.test[0].text_a[1] == 'The "car" honked.'
    assert cola.test[0].labels is None

    sst = load_task(TASKS["sst2"], glue_dir)
    assert sst.train.text_a[1] == 'contains no wit , only labored " gags " '
    assert sst.train.text_b is None and sst.train.labels.tolist() == [0, 0, 1]

    mrpc = load_task(TASKS["mrpc"], glue_dir)                              # BOM in the header
    assert (mrpc.train.text_a[0], mrpc.train.text_b[0]) == (QUOTED, QUOTED2)
    assert mrpc.train.labels.tolist() == [1, 0] and mrpc.dev[0].labels.tolist() == [1]

    stsb = load_task(TASKS["stsb"], glue_dir)
    assert stsb.train.labels.dtype == np.float32
    np.testing.assert_allclose(stsb.train.labels, [5.0, 3.8], rtol=1e-6)
    assert stsb.train.text_a[1] == 'A man is "playing" a flute.'

    qqp = load_task(TASKS["qqp"], glue_dir)
    assert qqp.train.text_a[0] == 'How is "life" of a math student?' and qqp.train.labels.tolist() == [0, 1]
    assert qqp.test[0].ids == ["0", "1"] and qqp.test[0].text_a[1] == 'What is "this"?'

    mnli = load_task(TASKS["mnli"], glue_dir)
    assert mnli.train.text_a[0] == 'Conceptually "cream skimming" has two dimensions.'
    assert mnli.train.labels.tolist() == [1, 0, 2]                        # gold_label, not label1
    assert [d.name for d in mnli.dev] == ["matched", "mismatched"]
    assert mnli.dev[0].labels.tolist() == [1] and mnli.dev[1].labels.tolist() == [2, 0]
    assert [t.name for t in mnli.test] == ["matched", "mismatched", "ax"]   # diagnostic found
    assert mnli.test[2].text_b == ["The cat did not sit."]

    assert load_task(TASKS["qnli"], glue_dir).train.labels.tolist() == [1]
    rte = load_task(TASKS["rte"], glue_dir)
    assert rte.dev[0].labels.tolist() == [1, 0] and rte.train.text_b[0] == 'Weapons of "Mass Destruction" Found in Iraq.'
    wnli = load_task(TASKS["wnli"], glue_dir)
    assert wnli.train.labels.tolist() == [1] and wnli.dev[0].labels.tolist() == [0]
    assert load_task(TASKS["qnli"], glue_dir).test == []                  # no test.tsv: no submission


def test_task_folder_itself_and_spellings(glue_dir):
    assert get_task("SST-2").name == "sst2" and get_task("sts_b").name == "stsb" and get_task("CoLA").name == "cola"
    data = load_task(get_task("RTE"), glue_dir / "RTE")                   # --data-dir pointing at the task
    assert len(data.dev[0]) == 2
    with pytest.raises(UserError, match="did you mean mrpc"):
        get_task("mrcp")


def _error(fn) -> UserError:
    with pytest.raises(UserError) as info:
        fn()
    return info.value


def test_bad_tsv_inputs_name_file_and_line(tmp_path, glue_dir):
    (glue_dir / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n"
                                                "1\tc\td\tmaybe\n", encoding="utf-8")
    e = _error(lambda: load_task(TASKS["rte"], glue_dir))
    assert "unknown RTE label 'maybe'" in e.what and e.where.endswith("RTE/train.tsv:3")

    (glue_dir / "SST-2" / "train.tsv").write_text("text\tlabel\nfine\t1\n", encoding="utf-8")
    e = _error(lambda: load_task(TASKS["sst2"], glue_dir))
    assert "sentence" in e.what and e.where.endswith("SST-2/train.tsv:1") and "found: text, label" in e.fix

    (glue_dir / "CoLA" / "dev.tsv").write_text("gj04\t1\t\tok.\ngj04\t1\ttoo few\n", encoding="utf-8")
    e = _error(lambda: load_task(TASKS["cola"], glue_dir))
    assert "3 tab-separated fields" in e.what and e.where.endswith("CoLA/dev.tsv:2")
    cola = load_task(TASKS["cola"], glue_dir, bad_rows="skip")            # the opt-in QQP-style tolerance
    assert cola.dev[0].text_a == ["ok."] and list(cola.skipped.values()) == [1]

    (glue_dir / "STS-B" / "train.tsv").write_text(GLUE_FILES["STS-B/train.tsv"].replace("3.800", "high"), encoding="utf-8")
    e = _error(lambda: load_task(TASKS["stsb"], glue_dir))
    assert "'high' is not a number" in e.what and e.where.endswith("STS-B/train.tsv:3")

    (glue_dir / "WNLI" / "dev.tsv").unlink()
    e = _error(lambda: load_task(TASKS["wnli"], glue_dir))
    assert "dev.tsv is missing" in e.what and "train.tsv" in e.fix

    empty = tmp_path / "other"
    (empty / "Stuff").mkdir(parents=True)
    e = _error(lambda: load_task(TASKS["mrpc"], empty))
    assert "no MRPC folder" in e.what and "Stuff" in e.fix


def _hub_rows():
    """The `datasets` GLUE columns for RTE and MNLI (+ ax), with test labels -1."""
    rte = {"train": {"sentence1": ['He said "yes".', "b"], "sentence2": ["c", "d"], "label": [0, 1], "idx": [0, 1]},
           "validation": {"sentence1": ["e"], "sentence2": ["f"], "label": [1], "idx": [0]},
           "test": {"sentence1": ["g", "h"], "sentence2": ["i", "j"], "label": [-1, -1], "idx": [7, 8]}}
    nli = {"premise": ["p1", "p2"], "hypothesis": ["h1", "h2"], "label": [2, 0], "idx": [0, 1]}
    mnli = {"train": nli, "validation_matched": nli, "validation_mismatched": {**nli, "label": [1, 1]},
            "test_matched": {**nli, "label": [-1, -1]}, "test_mismatched": {**nli, "label": [-1, -1]}}
    ax = {"test": {"premise": ["a"], "hypothesis": ["b"], "label": [-1], "idx": [0]}}
    return {"rte": rte, "mnli": mnli, "ax": ax}


def _check_hub_layout(root, layout):
    rte = load_task(TASKS["rte"], root)
    assert rte.layout == layout
    assert rte.train.text_a == ['He said "yes".', "b"] and rte.train.labels.tolist() == [0, 1]
    assert rte.test[0].ids == ["7", "8"] and rte.test[0].labels is None
    mnli = load_task(TASKS["mnli"], root)
    assert [d.labels.tolist() for d in mnli.dev] == [[2, 0], [1, 1]]
    assert [t.name for t in mnli.test] == ["matched", "mismatched", "ax"]
    assert sorted(find_tasks(root)) == ["mnli", "rte"]


def test_save_to_disk_layout(tmp_path):
    import datasets

    root = tmp_path / "glue_hf"
    for config, splits in _hub_rows().items():
        datasets.DatasetDict({k: datasets.Dataset.from_dict(v) for k, v in splits.items()}).save_to_disk(str(root / config))
    _check_hub_layout(root, "save_to_disk")


def test_hub_parquet_layout_and_bad_label(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "glue_parquet"
    for config, splits in _hub_rows().items():
        (root / config).mkdir(parents=True)
        for split, cols in splits.items():
            pq.write_table(pa.table(cols), root / config / f"{split}-00000-of-00001.parquet")
    _check_hub_layout(root, "parquet")
    pq.write_table(pa.table({**_hub_rows()["rte"]["train"], "label": [0, 5]}), root / "rte" / "train-00000-of-00001.parquet")
    e = _error(lambda: load_task(TASKS["rte"], root))
    assert "label 5 at row 1" in e.what and "rte/train" in e.where


# ------------------------------------------------------------------------------------ metrics
def test_metrics_match_sklearn_and_scipy():
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    rng = np.random.default_rng(0)
    for _ in range(10):
        n = int(rng.integers(5, 400))
        gold = rng.integers(0, 2, n)
        pred = np.where(rng.random(n) < 0.7, gold, 1 - gold)
        assert metrics.accuracy(pred, gold) == pytest.approx(accuracy_score(gold, pred), abs=1e-12)
        assert metrics.f1_binary(pred, gold) == pytest.approx(f1_score(gold, pred), abs=1e-12)
        assert metrics.matthews(pred, gold) == pytest.approx(matthews_corrcoef(gold, pred), abs=1e-12)
        gold3, pred3 = rng.integers(0, 3, n), rng.integers(0, 3, n)
        assert metrics.matthews(pred3, gold3) == pytest.approx(matthews_corrcoef(gold3, pred3), abs=1e-12)
        # STS-B-like scores with many ties (gold in steps of 0.2, predictions rounded).
        x = rng.integers(0, 26, n) / 5.0
        y = np.round(x + rng.normal(0, 1.0, n), 1)
        assert metrics.pearson(y, x) == pytest.approx(pearsonr(x, y)[0], abs=1e-9)
        assert metrics.spearman(y, x) == pytest.approx(spearmanr(x, y)[0], abs=1e-9)
    # Degenerate cases, as scikit-learn reports them.
    assert metrics.matthews(np.ones(6, int), np.array([0, 1, 0, 1, 1, 0])) == 0.0
    assert metrics.f1_binary(np.zeros(4, int), np.zeros(4, int)) == 0.0
    assert metrics.pearson(np.ones(5), np.arange(5)) == 0.0


def test_average_ranks_by_hand():
    np.testing.assert_allclose(metrics.average_ranks(np.array([3.0, 1.0, 3.0, 2.0, 3.0])), [4, 1, 4, 2, 4])


def test_task_scores_and_glue_average():
    mrpc, mnli = TASKS["mrpc"], TASKS["mnli"]
    assert metrics.task_score(mrpc, {"dev": {"f1": 0.9, "accuracy": 0.8}}) == pytest.approx(0.85)
    assert metrics.task_score(mnli, {"matched": {"accuracy": 0.84}, "mismatched": {"accuracy": 0.82}}) == pytest.approx(0.83)
    assert metrics.glue_average({"mrpc": 0.85, "mnli": 0.83, "rte": 0.6}) == pytest.approx((0.85 + 0.83 + 0.6) / 3)
    assert metrics.format_metrics(mrpc, {"dev": {"f1": 0.8812, "accuracy": 0.84}}) == "88.1/84.0"
    assert metrics.metric_header(mnli) == "acc-m/acc-mm" and metrics.metric_header(mrpc) == "F1/acc"


# ------------------------------------------------------------------------------------ submission
def test_submission_format(tmp_path):
    path = write_predictions(tmp_path / "sub" / "MNLI-m.tsv", ["0", "1", "2"],
                             prediction_strings(TASKS["mnli"].label, np.array([0, 2, 1])))
    assert path.read_text() == "index\tprediction\n0\tentailment\n1\tcontradiction\n2\tneutral\n"
    assert prediction_strings(TASKS["rte"].label, np.array([1, 0])) == ["not_entailment", "entailment"]
    assert prediction_strings(TASKS["wnli"].label, np.array([1, 0])) == ["1", "0"]
    assert prediction_strings(TASKS["stsb"].label, np.array([-0.3, 2.34567, 5.7])) == ["0.000", "2.346", "5.000"]
    assert not list((tmp_path / "sub").glob(".*"))                         # no temporary left behind


def test_task_overrides(tmp_path):
    from bertcli.config.recipe import load_recipe

    r = load_recipe("glue", ["finetune.tasks.RTE.learning_rate=3e-5"])
    h = resolve_hyper(r.finetune, TASKS["rte"])
    assert (h.learning_rate, h.epochs, h.batch_size) == (3e-5, 10, 16)   # --set over the recipe's rte entry
    assert resolve_hyper(r.finetune, TASKS["sst2"]).epochs == 3
    bad = load_recipe("glue", ["finetune.tasks.rtee.epochs=2"])
    with pytest.raises(UserError, match="did you mean rte"):
        resolve_hyper(bad.finetune, TASKS["rte"])


def test_hub_code_path_on_a_local_copy(tmp_path, monkeypatch):
    """`--hub NAME` runs the real datasets.load_dataset(NAME, task); a local copy of the hub
    repository (parquet files + README configs, as nyu-mll/glue is laid out) needs no network."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    repo = tmp_path / "glue_repo"
    configs = []
    for config, splits in _hub_rows().items():
        (repo / config).mkdir(parents=True)
        files = []
        for split, cols in splits.items():
            pq.write_table(pa.table(cols), repo / config / f"{split}-00000-of-00001.parquet")
            files.append(f"  - split: {split}\n    path: {config}/{split}-*")
        configs.append(f"- config_name: {config}\n  data_files:\n" + "\n".join(files))
    (repo / "README.md").write_text("---\nconfigs:\n" + "\n".join(configs) + "\n---\n")
    rte = load_task(TASKS["rte"], hub=str(repo))
    assert rte.layout == "hub" and rte.train.text_a == ['He said "yes".', "b"] and rte.test[0].ids == ["7", "8"]
    mnli = load_task(TASKS["mnli"], hub=str(repo))
    assert [t.name for t in mnli.test] == ["matched", "mismatched", "ax"]
    e = _error(lambda: load_task(TASKS["cola"], hub=str(repo)))
    assert "cannot load" in e.what and "'cola'" in e.what
