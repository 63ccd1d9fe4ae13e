"""The shared fine-tuning runner: `finetune.max_train_examples` limits the examples every task
trains on (classify, GLUE, NER, SQuAD, through the real CLI), each command's default recipe is
its own, and every split type is cut the same way (`Split.head`)."""

from __future__ import annotations

import csv
import json
import math
import random

import numpy as np
import pytest
from conftest import ONE_THREAD, run_cli
from finetune_fixtures import corpus_texts, tagged_sentence, tiny_checkpoint, write_conll
from helpers.cards import check_card

N, BATCH = 12, 4          # training examples kept, batch: 3 steps in one epoch without windows
COMMON = ["--set", f"finetune.max_train_examples={N}", "--set", "finetune.save_model=false"]


def _results(out):
    return json.loads((out / "results.json").read_text())


def test_classify_trains_on_the_first_n_rows(tmp_path):
    rng = random.Random(1)
    rows = [(" ".join(rng.choices(["good", "bad", "the", "a", "film", "plot"], k=6)), rng.choice(["pos", "neg"]))
            for _ in range(60)]
    for name, part in (("train", rows[:50]), ("dev", rows[50:])):
        with open(tmp_path / f"{name}.csv", "w", newline="") as f:
            csv.writer(f).writerows([("text", "label"), *part])
    ckpt = tiny_checkpoint(tmp_path / "ckpt", [r[0] for r in rows])
    out = tmp_path / "out"
    r = run_cli("finetune", "classify", "-c", ckpt, "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv",
                "-o", out, *COMMON, "--set", f"finetune.classify.batch_size={BATCH}", "--set", "finetune.classify.epochs=1",
                "--set", "finetune.classify.max_seq_length=32", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    res = _results(out)
    assert res["data"]["train"] == N and res["data"]["dev_dev"] == 10      # dev is never cut
    assert res["steps"] == math.ceil(N / BATCH)
    assert f"{N} train examples" in r.output and "classify dev results" in r.stdout
    assert "glue_name" not in res                                         # no GLUE preset faked
    # the classify recipe's `auto` for a tiny model (a base model gets the paper's 2e-5: test_finetune_ux)
    assert res["hyperparameters"]["learning_rate"] == 1e-3 and res["learning_rate"]["source"] == "auto"
    assert "name: classify" in (out / "recipe.yaml").read_text()


def test_glue_trains_on_the_first_n_rows(tmp_path):
    from helpers.glue import write_tasks

    data = write_tasks(tmp_path / "glue", n_sst=64)
    ckpt = tiny_checkpoint(tmp_path / "ckpt",
                           [ln.split("\t")[0] for ln in (data / "SST-2" / "train.tsv").read_text().splitlines()])
    out = tmp_path / "out"
    r = run_cli("finetune", "glue", "-c", ckpt, "--tasks", "sst2", "-d", data, "-o", out, *COMMON,
                "--set", f"finetune.batch_size={BATCH}", "--set", "finetune.epochs=1",
                "--set", "finetune.max_seq_length=32", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    res = _results(out / "sst2")
    assert res["data"]["train"] == N and res["data"]["dev_dev"] == 120 and res["steps"] == math.ceil(N / BATCH)
    assert res["glue_name"] == "SST-2" and res["submission"] == [str(out / "submission" / "SST-2.tsv")]
    assert len((out / "submission" / "SST-2.tsv").read_text().splitlines()) == 31       # the test set is never cut
    assert "SST-2 acc" in r.stdout


def test_ner_trains_on_the_first_n_sentences(tmp_path):
    rng = random.Random(2)
    data = tmp_path / "data"
    write_conll(data / "train.txt", [tagged_sentence(rng) for _ in range(60)])
    write_conll(data / "valid.txt", [tagged_sentence(rng) for _ in range(10)])
    ckpt = tiny_checkpoint(tmp_path / "ckpt", corpus_texts(100))
    out = tmp_path / "out"
    r = run_cli("finetune", "ner", "-c", ckpt, "-d", data, "-o", out, *COMMON,
                "--set", f"finetune.ner.batch_size={BATCH}", "--set", "finetune.ner.epochs=1",
                "--set", "finetune.ner.max_seq_length=64", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    res = _results(out)
    # the synthetic sentences are far shorter than 64 sub-tokens: one window each
    assert res["data"]["train"] == N and res["data"]["dev_dev"] == 10 and res["steps"] == math.ceil(N / BATCH)
    assert f"{N} train examples," in r.output and "NER dev results" in r.stdout
    # the ner recipe's `auto` for a tiny model (a base model gets BERT 5.3's 5e-5: test_finetune_ux)
    assert res["hyperparameters"]["learning_rate"] == 1e-3 and res["learning_rate"]["source"] == "auto"
    assert "name: ner" in (out / "recipe.yaml").read_text()


def test_squad_trains_on_the_first_n_questions(tmp_path):
    from squad_synth import all_text, write_squad
    from squad_synth import tiny_checkpoint as squad_checkpoint

    data = write_squad(tmp_path / "squad", n_train=40, n_dev=10, code_words=1)
    texts = [t for p in sorted(data.glob("*.json")) for t in all_text(json.loads(p.read_text()))]
    ckpt = squad_checkpoint(tmp_path / "ckpt", texts)
    out = tmp_path / "out"
    sets = ["max_seq_length=64", "doc_stride=32", "max_query_length=16", f"batch_size={BATCH}", "epochs=1"]
    r = run_cli("finetune", "squad", "-c", ckpt, "-d", data, "-o", out, *COMMON, "--set", "finetune.save_model=true",
                *[a for s in sets for a in ("--set", f"finetune.squad.{s}")], cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    res = _results(out)
    dev_questions = len(json.loads((out / "predictions.json").read_text()))
    assert res["data"]["train"] == N and res["data"]["dev_dev"] == dev_questions > N
    windows = res["windows"]["train"]
    assert windows > N and res["steps"] == math.ceil(windows / BATCH)     # the N questions' windows only
    check_card(out, "question-answering", "AutoModelForQuestionAnswering")    # the saved model's README.md


def test_every_split_type_is_cut_alike():
    """`Split.head` of the three split classes keeps the first n examples with everything
    aligned to them (SQuAD: only the contexts those questions use)."""
    from bertcli.finetune.classification.glue_data import SequenceSplit
    from bertcli.finetune.tagging.data import TagSplit
    from bertcli.finetune.task import TaskSplits
    from bertcli.tasks.qa.data import SquadSplit

    text = SequenceSplit("train", "f", ["a", "b", "c"], ["x", "y", "z"], np.array([0, 1, 0]), ["0", "1", "2"]).head(2)
    assert ((text.text_a, text.text_b, text.labels.tolist(), text.ids, len(text))
            == (["a", "b"], ["x", "y"], [0, 1], ["0", "1"], 2))
    tags = TagSplit("train", "f", [["a"], ["b", "c"], ["d"]], [["O"], ["B-X", "O"], ["O"]], ["f:1", "f:3", "f:6"]).head(2)
    assert (tags.tokens, tags.tags, tags.lines, len(tags)) == ([["a"], ["b", "c"]], [["O"], ["B-X", "O"]], ["f:1", "f:3"], 2)
    qa = SquadSplit("train", "f", ["c0", "c1"], ["q0", "q1", "q2"], ["?0", "?1", "?2"], [1, 1, 0],
                    [["a"], ["b"], ["c"]], [[0], [1], [2]]).head(2)
    assert (qa.contexts, qa.context_of, qa.ids, len(qa)) == (["c1"], [0, 0], ["q0", "q1"], 2)
    splits = TaskSplits(text, [text])
    assert splits.limit_train(None) is splits and len(splits.limit_train(1).train) == 1


@pytest.mark.parametrize("recipe, block", [("ner", "ner"), ("squad", "squad"), ("squad", "squad_v2"),
                                           ("classify", "classify")])
def test_a_general_finetune_key_applies_to_each_commands_own_recipe(recipe, block):
    """`--set finetune.batch_size=16` must reach the task: the shipped task recipes keep their
    training values at the finetune level, not in the task block that would win over it (the
    precedence trap measured in docs/finetune-defaults.md)."""
    from bertcli.config.recipe import load_recipe
    from bertcli.finetune.task import overlay

    shipped = load_recipe(recipe, [])
    default = overlay(shipped.finetune, getattr(shipped.finetune, block))
    r = load_recipe(recipe, ["finetune.batch_size=16", "finetune.learning_rate=1e-4", "finetune.epochs=5"])
    h = overlay(r.finetune, getattr(r.finetune, block))
    assert (h.batch_size, h.learning_rate, h.epochs) == (16, 1e-4, 5.0)
    assert default.batch_size != 16 and default.learning_rate != 1e-4       # the override changed something
    r = load_recipe(recipe, [f"finetune.{block}.batch_size=8", "finetune.batch_size=16"])
    assert overlay(r.finetune, getattr(r.finetune, block)).batch_size == 8  # a task block still wins, by design
