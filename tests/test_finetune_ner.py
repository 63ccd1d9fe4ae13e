"""`bertcli finetune ner` end to end through the real CLI on synthetic learnable CoNLL data,
the saved tagger in transformers, and bad input (exit 2, one message)."""

from __future__ import annotations

import json
import random

import pytest
from conftest import ONE_THREAD, assert_user_error, run_cli
from finetune_fixtures import corpus_texts, tagged_sentence, tiny_checkpoint, write_conll
from helpers.cards import check_card


def _data(root, rng, n_train=480, n_dev=120, adjacent=0.0):
    sents = lambda n: [tagged_sentence(rng, adjacent=adjacent) for _ in range(n)]  # noqa: E731
    write_conll(root / "train.txt", sents(n_train))
    write_conll(root / "valid.txt", sents(n_dev))
    write_conll(root / "test.txt", sents(40))
    return root


def test_ner_learns_and_saves_a_transformers_tagger(tmp_path):
    """A randomly initialized L2 H64 BERT learns the synthetic task (entities are known names,
    places, companies; chance F1 is near 0) to entity F1 >= 0.9 on dev; long sentences are
    windowed (max_seq_length 16) and every word is predicted once."""
    ckpt = tiny_checkpoint(tmp_path / "ckpt", corpus_texts())
    data = _data(tmp_path / "data", random.Random(3))
    out = tmp_path / "out"
    r = run_cli("finetune", "ner", "-c", ckpt, "-d", data, "-o", out, "--set", "finetune.ner.learning_rate=2e-3",
                "--set", "finetune.ner.batch_size=16", "--set", "finetune.ner.epochs=4",
                "--set", "finetune.ner.max_seq_length=16", "--set", "finetune.ner.window_overlap=4",
                cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert "IOB1 tags (detected)" in r.stderr + r.stdout and "windows" in r.output
    res = json.loads((out / "results.json").read_text())
    dev = res["dev"]["dev"]
    assert dev["f1"] >= 0.9 and dev["accuracy"] >= 0.95, res["history"]
    assert {"PER/f1", "LOC/f1", "ORG/f1"} <= set(dev) and res["scheme"] == "iob1"
    check_card(out, "token-classification", "AutoModelForTokenClassification")     # its README.md: results.json's

    # Predictions in CoNLL layout: token gold predicted, every word of every sentence once.
    blocks = (out / "dev_predictions.txt").read_text().strip("\n").split("\n\n")
    gold = (data / "valid.txt").read_text().strip("\n").split("\n\n")[1:]   # after -DOCSTART-
    assert len(blocks) == len(gold) == 120
    for b, g in zip(blocks, gold):
        rows, src = [ln.split() for ln in b.splitlines()], [ln.split() for ln in g.splitlines()]
        assert [(x[0], x[1]) for x in rows] == [(x[0], x[3]) for x in src]
    assert (out / "test_predictions.txt").is_file()

    # The best model is a transformers token classifier with id2label; it tags like bertcli.
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    model = AutoModelForTokenClassification.from_pretrained(out).eval()
    assert model.config.id2label == dict(enumerate(res["labels"]))
    tok = AutoTokenizer.from_pretrained(out)
    short = [b for b in blocks if len(b.splitlines()) <= 6][:10]
    for b in short:
        rows = [ln.split() for ln in b.splitlines()]
        enc = tok(" ".join(x[0] for x in rows), return_tensors="pt", return_offsets_mapping=True)
        offsets = enc.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            pred = model(**enc).logits[0].argmax(-1).tolist()
        text, starts, pos = " ".join(x[0] for x in rows), [], 0
        for x in rows:
            starts.append(pos)
            pos += len(x[0]) + 1
        first = [next(i for i, (s, e) in enumerate(offsets) if s == st and e > s) for st in starts]
        assert [model.config.id2label[pred[i]] for i in first] == [x[2] for x in rows], text


@pytest.mark.parametrize("kind,least", [("bpe", 0.7), ("unigram", 0.4)], ids=["roberta", "albert"])
def test_other_families_tag_every_word(tmp_path, kind, least):
    """RoBERTa (byte-level BPE) and ALBERT (Unigram) checkpoints fine-tune on the same task
    in-process: windows of 24 sub-tokens, every dev word predicted once, entity F1 far above
    chance (~0). `tokenizers`' Unigram trainer keeps only ~90 pieces of this tiny corpus, so the
    ALBERT model reads most words letter by letter and learns slower (measured 0.53)."""
    from bertcli.config.recipe import load_recipe
    from bertcli.finetune.tagging.task import run_ner

    ckpt = tiny_checkpoint(tmp_path / "ckpt", corpus_texts(), kind=kind)
    data = _data(tmp_path / "data", random.Random(6), n_train=320, n_dev=60)
    recipe = load_recipe("ner", ["finetune.ner.learning_rate=2e-3", "finetune.ner.batch_size=16",
                                  "finetune.ner.epochs=3", "finetune.ner.max_seq_length=24",
                                  "finetune.ner.window_overlap=6", "finetune.save_model=false"])
    res = run_ner(recipe, ckpt, data, tmp_path / "out")
    blocks = (tmp_path / "out" / "dev_predictions.txt").read_text().strip("\n").split("\n\n")
    assert len(blocks) == 60 and all(len(ln.split()) == 3 for b in blocks for ln in b.splitlines())
    assert res["dev"]["dev"]["f1"] >= least, res["history"]


def _task(data_dir, *sets):
    from bertcli.config.recipe import load_recipe
    from bertcli.finetune.tagging.task import NerTask

    task = NerTask(load_recipe("ner", list(sets)).finetune, data_dir)
    task.data = task.read()
    return task


def test_bad_ner_input_is_one_clear_message(tmp_path):
    from bertcli.core.errors import UserError

    data = _data(tmp_path / "d", random.Random(4), n_train=30, n_dev=10)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.txt").write_text((data / "train.txt").read_text())
    with pytest.raises(UserError, match="the dev split is missing") as e:
        _task(bad)
    assert "valid.txt" in e.value.fix
    for text, needles in (("Bonn NNP I-NP I-CITY\n", ("'I-CITY'", "never occurs in the training data", "valid.txt:1")),
                          ("Bonn NNP I-NP U-LOC\n", ("unknown tag scheme", "valid.txt:1"))):
        (bad / "valid.txt").write_text(text)
        with pytest.raises(UserError) as e:
            _task(bad)
        assert all(n in str(e.value) for n in needles), str(e.value)

    # An IOB2 file with a chunk opened by I-: refused on request, else repaired (and said so).
    (bad / "train.txt").write_text("John NNP I-NP B-PER\nSmith NNP I-NP I-PER\nin IN I-PP O\nBonn NNP I-NP B-LOC\n\n"
                                   "Mary NNP I-NP B-PER\nvisited VBD I-VP O\nOslo NNP I-NP I-LOC\n\n")
    (bad / "valid.txt").write_text("Bonn NNP I-NP B-LOC\n")
    with pytest.raises(UserError, match="invalid for IOB2") as e:
        _task(bad, "finetune.ner.invalid_tags=error")
    assert e.value.where.endswith("train.txt:6") and "B-PER O B-LOC" in e.value.fix
    task = _task(bad)
    assert task.scheme == "iob2" and task.data.train.tags[1] == ["B-PER", "O", "B-LOC"]
    assert task.data.facts["repaired_sentences"] == {"train": 1, "dev": 0}

    # Through the CLI: exit code 2 and one message, the output path checked before any work.
    ckpt = tiny_checkpoint(tmp_path / "ckpt", corpus_texts(100))
    (bad / "valid.txt").write_text("-DOCSTART- -X- -X- O\n\nEU NNP I-NP I-ORG\nrejects VBZ\n")
    r = run_cli("finetune", "ner", "-c", ckpt, "-d", bad, cwd=tmp_path)
    assert_user_error(r, "malformed CoNLL line", "valid.txt:4")
    (tmp_path / "file").write_text("x")
    r = run_cli("finetune", "ner", "-c", ckpt, "-d", data, "-o", tmp_path / "file", cwd=tmp_path)
    assert_user_error(r, "not a directory")
    assert "fine-tuning" not in r.output
