"""Training and serving featurize alike: for every task (classify -- GLUE's presets are the same
task --, NER, SQuAD) and every tokenizer kind (WordPiece, byte-level BPE, Unigram), `bertcli
predict` on the dev file gives exactly the predictions fine-tuning wrote for its dev split, with
PyTorch (the checkpoint) and with ONNX Runtime (the export bundle); and `bertcli features` gives
the vectors `predict --task features` gives.

The models are tiny and trained for a few steps only: nearly random, so their predictions change
from one sub-token to the next, and reading a position fine-tuning never labelled (the old NER
decoder read the lone Unigram `▁` before a word's pieces) or windowing a sentence differently
shows up as a different tag. Windows are short (16 tokens for NER, 48 for SQuAD), so long
sentences and contexts span several windows, and classify texts are truncated.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import ONE_THREAD, run_cli
from finetune_fixtures import LOC, ORG, PER, SURNAME, corpus_texts, tagged_sentence, tiny_checkpoint
from squad_synth import all_text, squad_json

KINDS = ["wordpiece", "bpe", "unigram"]
# words no training text holds: the tokenizers split them into several pieces (Unigram: a lone `▁`
# and then the pieces, its word-start marker being no piece of its own)
RARE = ["kowalskiano", "limanovak", "novakgarcia", "chenlima"]


def short(block: str, max_seq_length: int, **more) -> list[str]:
    """A few steps of fine-tuning (the task block's own settings win over the section's)."""
    keys = {"epochs": 1, "batch_size": 8, "learning_rate": 1e-4, "max_seq_length": max_seq_length, **more}
    return ["--set", "finetune.dropout=0", "--set", "finetune.eval_batch_size=8",
            *[x for k, v in keys.items() for x in ("--set", f"finetune.{block}.{k}={v}")]]


def ok(r):
    assert r.rc == 0, r.output
    return r


def predict(model, file, out, *extra):
    """`bertcli predict` -> its records."""
    ok(run_cli("predict", "-c", model, "-i", file, "-o", out, "--batch-size", "5", *extra, env=ONE_THREAD))
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def both_backends(tmp, run, file, *extra):
    """predict with the fine-tuned checkpoint (PyTorch) and with its export bundle (ONNX Runtime)."""
    ok(run_cli("export", "-c", run, "-o", tmp / "bundle", "--no-verify", env=ONE_THREAD))
    info = json.loads((tmp / "bundle" / "export_info.json").read_text())
    assert info["featurizer"]["max_seq_length"] == json.loads((run / "results.json").read_text())[
        "hyperparameters"]["max_seq_length"]                               # the bundle keeps the windows
    return {"torch": predict(run, file, tmp / "torch.jsonl", *extra),
            "onnx": predict(tmp / "bundle", file, tmp / "onnx.jsonl", *extra)}


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# Byte-level BPE runs with the slow tests: WordPiece and Unigram (the lone-`▁` case training
# labels past) cover every task in the default run, and the BPE cases add ~2 minutes.
@pytest.fixture(scope="module", params=[pytest.param(k, marks=pytest.mark.slow) if k == "bpe" else k for k in KINDS])
def checkpoint(request, tmp_path_factory):
    """A tiny random pretraining checkpoint of each tokenizer kind, whose vocabulary covers all
    three tasks' texts."""
    root = tmp_path_factory.mktemp(f"parity_{request.param}")
    texts = corpus_texts(120) + all_text(squad_json(random.Random(0), 12))
    return request.param, tiny_checkpoint(root / "ckpt", texts, request.param, hidden=32, layers=2, init_range=0.5)


def test_classify(checkpoint, tmp_path):
    kind, ckpt = checkpoint
    rng = random.Random(1)

    def rows(n):
        out = []
        for _ in range(n):
            label = rng.choice(["place", "company", "none"])
            words = [rng.choice(LOC if label == "place" else ORG)] + tagged_sentence(rng)[0] * rng.randint(1, 3)
            out.append({"text": " ".join(words), "label": label})
        return out
    train, dev = jsonl(tmp_path / "train.jsonl", rows(32)), jsonl(tmp_path / "dev.jsonl", rows(30))
    run = tmp_path / "run"
    ok(run_cli("finetune", "classify", "-c", ckpt, "--train", train, "--dev", dev, "-o", run,
               *short("classify", 16), cwd=tmp_path, env=ONE_THREAD))
    lines = (run / "dev_predictions" / "dev.tsv").read_text().splitlines()[1:]
    trained = [line.split("\t")[1] for line in lines]
    assert len(trained) == 30 and len(set(trained)) >= 2, trained          # the check can fail
    for backend, preds in both_backends(tmp_path, run, dev).items():
        assert [p["label"] for p in preds] == trained, backend


def _ner_data(root, rng):
    root.mkdir()

    def sentences(n, rare):
        out = []
        for _ in range(n):
            words, tags = tagged_sentence(rng)
            if rare:       # a rare word in a name, and sentences longer than one 16-token window
                i = next((k for k, w in enumerate(words) if w in PER or w in SURNAME), 0)
                words[i] = rng.choice(RARE)
                extra_words, extra_tags = tagged_sentence(rng)
                words, tags = words + extra_words, tags + extra_tags
            out.append({"tokens": words, "ner_tags": tags})
        return out
    jsonl(root / "train.jsonl", sentences(24, False))
    return jsonl(root / "dev.jsonl", sentences(20, True))


def test_ner(checkpoint, tmp_path):
    from tokenizers import Tokenizer

    kind, ckpt = checkpoint
    dev = _ner_data(tmp_path / "data", random.Random(2))
    run = tmp_path / "run"
    ok(run_cli("finetune", "ner", "-c", ckpt, "-d", tmp_path / "data", "-o", run,
               *short("ner", 16, window_overlap=4), cwd=tmp_path, env=ONE_THREAD))
    blocks = (run / "dev_predictions.txt").read_text().strip("\n").split("\n\n")
    trained = [[line.split()[2] for line in b.splitlines()] for b in blocks]
    # tags change from word to word inside sentences: a shifted position would show
    assert len(trained) == 20 and sum(len(set(s)) > 1 for s in trained) >= 5, trained
    # the cases the test is for: words of several pieces, and (Unigram) a lone `▁` before them
    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    pieces = {w: tok.encode(w, add_special_tokens=False).tokens for w in RARE}
    assert all(len(p) > 1 for p in pieces.values()), pieces
    if kind == "unigram":
        assert any(p[0] == "\u2581" for p in pieces.values()), pieces
    words = [json.loads(line)["tokens"] for line in dev.read_text().splitlines()]
    lengths = [len(tok.encode(" ".join(w), add_special_tokens=False).ids) for w in words]
    assert sum(n > 14 for n in lengths) >= 5, lengths                    # over one window's 14 sub-tokens
    for backend, preds in both_backends(tmp_path, run, dev).items():
        assert [p["tags"] for p in preds] == trained, backend


def test_squad(checkpoint, tmp_path):
    kind, ckpt = checkpoint
    data = tmp_path / "data"
    data.mkdir()
    rng = random.Random(3)
    for name, n in (("train-v1.1.json", 6), ("dev-v1.1.json", 6)):
        (data / name).write_text(json.dumps(squad_json(rng, n, n_words=(40, 90))), encoding="utf-8")
    run = tmp_path / "run"
    ok(run_cli("finetune", "squad", "-c", ckpt, "-d", data, "-o", run,
               *short("squad", 48, doc_stride=16, max_query_length=12), cwd=tmp_path, env=ONE_THREAD))
    trained = json.loads((run / "predictions.json").read_text())
    doc = json.loads((data / "dev-v1.1.json").read_text())
    questions = [{"id": q["id"], "question": q["question"], "context": p["context"]}
                 for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
    assert len(trained) == len(questions) >= 12 and len(set(trained.values())) > 1
    results = json.loads((run / "results.json").read_text())
    assert results["windows"]["dev"] > len(questions)                      # contexts span several windows
    for backend, preds in both_backends(tmp_path, run, jsonl(tmp_path / "dev.jsonl", questions)).items():
        assert {p["id"]: p["answer"] for p in preds} == trained, backend


def test_features_equal_predict_features(checkpoint, tmp_path):
    """`bertcli features` (last layer, mean over the real tokens) and `bertcli predict --task
    features` on a checkpoint without a task head: one vector per text, equal to predict's 6
    decimals (both pool with encoder_heads.pool_states; `cls` is its first row)."""
    kind, ckpt = checkpoint
    pool = "mean"
    texts = [" ".join(tagged_sentence(random.Random(i))[0] * 3) for i in range(6)]      # some truncated
    file = jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    ok(run_cli("features", "-c", ckpt, "-i", file, "-o", tmp_path / "f.npy", "--layers", "-1", "--pooling", pool,
               "--max-seq-length", "24", env=ONE_THREAD))
    feats = np.load(tmp_path / "f.npy")
    preds = predict(ckpt, file, tmp_path / "p.jsonl", "--task", "features", "--pooling", pool, "--max-seq-length", "24")
    got = np.array([p["embedding"] for p in preds])
    assert feats.shape == got.shape == (6, 32)
    np.testing.assert_allclose(got, feats, atol=2e-6, rtol=0)
