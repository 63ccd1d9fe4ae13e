"""`bertcli finetune glue` end to end through the real CLI: a learnable task from a pretrained
tiny checkpoint, several tasks with `all` (classification, 3-way NLI with two dev sets,
regression), a transformers-saved RoBERTa directory, and bad input (exit 2, one message)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import ONE_THREAD, assert_user_error, run_cli
from helpers.glue import glue_sentence, write_tasks
from helpers.models import roberta_dir

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)


def _tsv(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_all_tasks_from_pretrained_tiny(tmp_path, pretrained_tiny):
    data = write_tasks(tmp_path / "glue_data")
    out = tmp_path / "out"
    r = run_cli("finetune", "glue", "--checkpoint", pretrained_tiny, "--tasks", "all", "--data-dir", data,
                "--out", out, "--set", "finetune.learning_rate=5e-4", "--set", "finetune.batch_size=16",
                "--set", "finetune.max_seq_length=64", "--set", "finetune.epochs=3",
                "--set", "finetune.tasks.mnli.epochs=1", "--set", "finetune.tasks.stsb.epochs=1",
                cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert "SST-2 acc" in r.stdout and "average of 3 tasks" in r.stdout

    sst = json.loads((out / "sst2" / "results.json").read_text())
    assert sst["dev"]["dev"]["accuracy"] >= 0.90, sst["history"]
    assert len(sst["history"]) == 3 and sst["hyperparameters"]["epochs"] == 3
    mnli = json.loads((out / "mnli" / "results.json").read_text())
    assert sorted(mnli["dev"]) == ["matched", "mismatched"] and mnli["hyperparameters"]["epochs"] == 1
    assert mnli["score"] == pytest.approx((mnli["dev"]["matched"]["accuracy"] + mnli["dev"]["mismatched"]["accuracy"]) / 2)
    stsb = json.loads((out / "stsb" / "results.json").read_text())
    assert set(stsb["dev"]["dev"]) == {"pearson", "spearman"}
    summary = json.loads((out / "glue_results.json").read_text())
    assert summary["glue_average"] == pytest.approx(np.mean([sst["score"], mnli["score"], stsb["score"]]))

    sub = out / "submission"
    assert sorted(p.name for p in sub.iterdir()) == ["AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "SST-2.tsv", "STS-B.tsv"]
    rows = _tsv(sub / "SST-2.tsv")
    assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == [str(i) for i in range(30)]
    assert {r[1] for r in rows[1:]} <= {"0", "1"}
    # The test sentences follow the same rule as train: the predictions must mostly get it right.
    assert np.mean([int(r[1]) == i % 2 for i, r in enumerate(rows[1:])]) >= 0.8
    assert {r[1] for r in _tsv(sub / "MNLI-mm.tsv")[1:]} <= {"entailment", "neutral", "contradiction"}
    assert len(_tsv(sub / "AX.tsv")) == 6
    scores = [float(r[1]) for r in _tsv(sub / "STS-B.tsv")[1:]]
    assert len(scores) == 6 and all(0.0 <= s <= 5.0 for s in scores)

    # The saved classifier is the best epoch's: reloading it reproduces the dev predictions.
    import torch

    from bertcli.finetune.classification.glue import TASKS
    from bertcli.finetune.classification.glue_data import load_task
    from bertcli.model import load_checkpoint
    from bertcli.tokenization.load import load_tokenizer

    model, _ = load_checkpoint(out / "sst2", head="classification")
    tok = load_tokenizer(out / "sst2").tokenizer
    dev = load_task(TASKS["sst2"], data).dev[0]
    enc = tok.encode_batch(dev.text_a[:20])
    with torch.no_grad():
        preds = [int(model(torch.tensor([e.ids])).argmax()) for e in enc]
    saved = [int(r[1]) for r in _tsv(out / "sst2" / "dev_predictions" / "dev.tsv")[1:21]]
    assert preds == saved


@pytest.mark.slow
def test_transformers_roberta_directory(tmp_path):
    """A transformers-saved RoBERTa fine-tunes on a sentence-pair task (MRPC layout), and the
    classifier it writes loads in transformers with the same dev predictions."""
    rng = random.Random(1)
    texts = [glue_sentence(rng, i % 2) for i in range(300)]
    ckpt = roberta_dir(tmp_path / "roberta", texts)
    mrpc = tmp_path / "glue" / "MRPC"
    mrpc.mkdir(parents=True)
    head = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    for name, n in (("train", 96), ("dev", 24)):
        rows = [(i % 2, glue_sentence(rng, i % 2), glue_sentence(rng, 1)) for i in range(n)]
        (mrpc / f"{name}.tsv").write_text(head + "".join(f"{lab}\t{i}\t{i + 1}\t{a}\t{b}\n"
                                                         for i, (lab, a, b) in enumerate(rows)))
    out = tmp_path / "out"
    r = run_cli("finetune", "glue", "-c", ckpt, "--tasks", "MRPC", "-d", tmp_path / "glue", "-o", out,
                "--set", "finetune.tasks.mrpc.epochs=2", "--set", "finetune.learning_rate=1e-3",
                "--set", "finetune.max_seq_length=64",
                cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert "MRPC F1/acc" in r.stdout and "no submission file" in r.stderr
    res = json.loads((out / "mrpc" / "results.json").read_text())
    assert set(res["dev"]["dev"]) == {"f1", "accuracy"} and res["steps"] == 2 * 6  # recipe: mrpc batch 16
    assert res["fresh_parameters"] and all("classifier" in n for n in res["fresh_parameters"])

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(out / "mrpc").eval()
    assert model.config.id2label == {0: "not_equivalent", 1: "equivalent"}
    tok = AutoTokenizer.from_pretrained(out / "mrpc")
    rows = _tsv(mrpc / "dev.tsv")[1:]
    enc = tok([r[3] for r in rows], [r[4] for r in rows], padding=True, return_tensors="pt", truncation=True, max_length=64)
    with torch.no_grad():
        theirs = model(**enc).logits.argmax(-1).tolist()
    ours = [int(r[1]) for r in _tsv(out / "mrpc" / "dev_predictions" / "dev.tsv")[1:]]
    assert theirs == ours


def test_bad_input_is_one_clear_message(tmp_path):
    from helpers.glue import GLUE_FILES, write_glue

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"model_type": "bert"}')
    (ckpt / "model.safetensors").write_bytes(b"")
    glue = write_glue(tmp_path / "glue", {k: v for k, v in GLUE_FILES.items() if k.startswith(("RTE", "CoLA"))})

    r = run_cli("finetune", "glue", "-c", ckpt, "--tasks", "rte", "-d", glue, cwd=tmp_path)
    assert_user_error(r, "has no tokenizer", str(ckpt))

    (ckpt / "tokenizer.json").write_text("{}")
    r = run_cli("finetune", "glue", "-c", ckpt, "--tasks", "sts", "-d", glue, cwd=tmp_path)
    assert_user_error(r, "unknown GLUE task 'sts'", "did you mean stsb")
    r = run_cli("finetune", "glue", "-c", ckpt, "--tasks", "MRPC", "-d", glue, cwd=tmp_path)
    assert_user_error(r, "no MRPC folder", "found: CoLA, RTE")
    (glue / "RTE" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\td\tentails\n")
    r = run_cli("finetune", "glue", "-c", ckpt, "--tasks", "all", "-d", glue, cwd=tmp_path)
    assert_user_error(r, "unknown RTE label 'entails'", "RTE/dev.tsv:3")
    assert not (tmp_path / "runs").exists()          # nothing half-written


def test_same_seed_same_result(tmp_path, one_thread):
    """Two in-process runs with one seed give identical histories; another seed differs."""
    from bertcli.config.recipe import load_recipe
    from bertcli.finetune.classification.glue import TASKS
    from bertcli.finetune.classification.glue_data import load_task
    from bertcli.finetune.classification.glue_run import run_glue_task

    rng = random.Random(2)
    ckpt = roberta_dir(tmp_path / "roberta", [glue_sentence(rng, i % 2) for i in range(200)])
    write_tasks(tmp_path / "glue", n_sst=64)
    data = load_task(TASKS["sst2"], tmp_path / "glue")
    sets = ["finetune.epochs=2", "finetune.max_seq_length=32", "finetune.save_model=false", "finetune.learning_rate=1e-3"]
    runs = [run_glue_task(load_recipe("glue", sets + [f"seed={s}"]), ckpt, data, tmp_path / f"o{i}")
            for i, s in enumerate((7, 7, 8))]
    assert runs[0]["history"] == runs[1]["history"]
    assert runs[0]["history"] != runs[2]["history"]
    assert not (tmp_path / "o0" / "sst2" / "model.safetensors").exists()   # save_model=false


def test_freeze_encoder_trains_only_the_head(tmp_path, one_thread):
    """finetune.freeze_encoder=true (the feature-based probe) leaves every encoder weight as
    loaded; without it the encoder moves."""
    from safetensors.torch import load_file

    from bertcli.config.recipe import load_recipe
    from bertcli.finetune.classification.glue import TASKS
    from bertcli.finetune.classification.glue_data import load_task
    from bertcli.finetune.classification.glue_run import run_glue_task

    rng = random.Random(3)
    ckpt = roberta_dir(tmp_path / "roberta", [glue_sentence(rng, i % 2) for i in range(200)])
    write_tasks(tmp_path / "glue", n_sst=64)
    data = load_task(TASKS["sst2"], tmp_path / "glue")
    before = load_file(ckpt / "model.safetensors")
    for freeze in (True, False):
        sets = ["finetune.epochs=1", "finetune.max_seq_length=32", "finetune.learning_rate=1e-3",
                f"finetune.freeze_encoder={str(freeze).lower()}"]
        run_glue_task(load_recipe("glue", sets), ckpt, data, tmp_path / f"o{freeze}")
        after = load_file(tmp_path / f"o{freeze}" / "sst2" / "model.safetensors")
        shared = [k for k in after if k.startswith("roberta.") and k in before]
        assert len(shared) > 10 and any(k.startswith("classifier.") for k in after)
        same = [k for k in shared if after[k].equal(before[k])]
        assert (len(same) == len(shared)) if freeze else (len(same) < len(shared) // 2), (freeze, len(same), len(shared))
