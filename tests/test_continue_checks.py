"""Continued pretraining, the rest of the contract: exact resume after SIGKILL, `--resume`
refusing a changed init_from, a bare encoder (heads initialized as a new model's, an old BERT
directory with only vocab.txt), a grown position table, and bad input as one message."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
import torch
from conftest import ONE_THREAD, assert_user_error, finish, popen_cli, run_cli, wait_paused
from continue_fixtures import domain_documents, general_documents, hf_checkpoint, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)

TIMING = {"tokens_per_s", "train_seconds"}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("continue")
    general = general_documents(120)
    write_corpus(root / "domain.txt", domain_documents(80))
    hf_checkpoint(root / "start", "bert", [s for d in general for s in d], "pretraining")
    return root


def args(work: Path, out: Path, *more: str, steps: int = 12, start: Path | None = None) -> list[str]:
    sets = [f"corpus.sources=[{work / 'domain.txt'}]", f"output_dir={out}", f"cache_dir={work / 'cache'}",
            f"train.max_steps={steps}", "train.eval_every=6", "train.save_every=3", "train.warmup_steps=2",
            "train.num_workers=0", "train.tensorboard=false", "train.log_every=1", "train.keep_last=10"]
    return ["pretrain", "-r", "continue-tiny", "--init-from", str(start or work / "start"),
            *[x for s in sets for x in ("--set", s)], *more]


def records(out: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def weights(directory: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def test_sigkill_then_resume_is_bitwise_the_uninterrupted_run(work):
    ref = work / "ref"
    r = run_cli(*args(work, ref), cwd=work, env=ONE_THREAD)
    assert r.rc == 0, r.output
    killed = work / "killed"
    proc = popen_cli(*args(work, killed), cwd=work, pause="train-step-8", env=ONE_THREAD)
    wait_paused(proc)                                     # steps 1-7 done, step-6 checkpoint written
    proc.send_signal(signal.SIGKILL)
    assert finish(proc).rc == -signal.SIGKILL
    r = run_cli(*args(work, killed, "--resume", "auto"), cwd=work, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert "resuming from" in r.stderr and "step 6" in r.stderr, r.stderr
    assert records(killed) == records(ref)                # step 0 included, float for float
    assert records(ref)[0]["step"] == 0
    a, b = weights(ref / "final"), weights(killed / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the summary of a resumed run still shows where it started
    assert "val MLM loss (step 0 -> end)" in r.stdout


def test_resume_refuses_a_changed_init_from(work, tmp_path):
    out = tmp_path / "run"
    assert run_cli(*args(work, out, steps=3), cwd=work, env=ONE_THREAD).rc == 0
    other = shutil.copytree(work / "start", tmp_path / "other")
    # another directory: a model key of the run changed
    r = run_cli(*args(work, out, "--resume", "auto", steps=6, start=other), cwd=work, env=ONE_THREAD)
    assert_user_error(r, "model.init_from")
    # the same directory holding other weights
    moved = shutil.copytree(work / "start", tmp_path / "moved")
    out2 = tmp_path / "run2"
    assert run_cli(*args(work, out2, steps=3, start=moved), cwd=work, env=ONE_THREAD).rc == 0
    w = weights(moved)
    w["bert.embeddings.word_embeddings.weight"] = w["bert.embeddings.word_embeddings.weight"] + 1.0
    from safetensors.torch import save_file

    save_file(w, str(moved / "model.safetensors"), metadata={"format": "pt"})
    r = run_cli(*args(work, out2, "--resume", "auto", steps=6, start=moved), cwd=work, env=ONE_THREAD)
    assert_user_error(r, "holds other weights than the run started from")


def test_a_bare_encoder_with_only_vocab_txt_gets_new_heads_and_says_so(work, tmp_path):
    import transformers as tf

    start = hf_checkpoint(tmp_path / "bare", "bert", [s for d in general_documents(120) for s in d], "base")
    vocab = json.loads((start / "tokenizer.json").read_text())["model"]["vocab"]
    (start / "vocab.txt").write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    (start / "tokenizer.json").unlink()                  # an old BERT directory: vocab.txt + casing
    (start / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True}))
    out = tmp_path / "run"
    r = run_cli(*args(work, out, "--set", "data.objective=nsp", steps=12, start=start), cwd=work, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert "initialized as a new model's" in r.stdout and "cls.seq_relationship.weight" in r.stdout
    assert "cls.predictions.transform.dense.weight" in r.stdout
    rec = records(out)
    assert rec[-1]["val_mlm_loss"] < rec[0]["val_mlm_loss"] - 0.1
    assert rec[0]["val_pair_acc"] is not None             # NSP rows, scored by the new NSP head
    final = tf.BertForPreTraining.from_pretrained(out / "final")
    # the decoder stays tied to the word embeddings
    assert torch.equal(final.cls.predictions.decoder.weight, final.bert.embeddings.word_embeddings.weight)
    hf_tok = tf.AutoTokenizer.from_pretrained(out / "final")
    assert hf_tok.tokenize("The River School") == tf.BertTokenizer(str(start / "vocab.txt")).tokenize("The River School")
    # the encoder continued from the bare model's weights, not from new ones: still close to them
    bare = tf.BertModel.from_pretrained(start)
    moved = (final.bert.encoder.layer[0].output.dense.weight - bare.encoder.layer[0].output.dense.weight).abs().max()
    assert moved < 0.05


def test_positions_grow_by_copying_and_dropout_changes(work):
    from bertcli.config.recipe import load_recipe
    from bertcli.model.init_from import init_model
    from bertcli.tokenization.load import load_tokenizer

    r = load_recipe("continue-tiny", [f"model.init_from={work / 'start'}", "model.max_position_embeddings=150",
                                      "model.hidden_dropout_prob=0.2"])
    assert (r.model.family, r.model.hidden_size, r.model.max_position_embeddings) == ("bert", 32, 150)
    model, notes = init_model(r, load_tokenizer(work / "start"))
    old = weights(work / "start")["bert.embeddings.position_embeddings.weight"]          # [64, 32]
    new = model.encoder.embeddings.position.weight.detach()                             # [150, 32]
    assert new.shape == (150, 32)
    assert torch.equal(new[:64], old) and torch.equal(new[64:128], old) and torch.equal(new[128:], old[:22])
    assert any("copies of the 64 learned positions" in n for n in notes)
    assert model.config.hidden_dropout_prob == 0.2
    assert not [n for n, _ in model.named_parameters() if "decoder" in n]    # the decoder is the embedding (tied)
    assert torch.equal(model.encoder.embeddings.word.weight, weights(work / "start")["bert.embeddings.word_embeddings.weight"])


@pytest.mark.parametrize("case", ["not a directory", "no config.json", "contradicting key", "sentencepiece only",
                                  "malformed tokenizer", "extend without init_from"])
def test_bad_input_is_one_message(work, tmp_path, case):
    start = work / "start"
    extra: list[str] = []
    needles: tuple = ()
    if case == "not a directory":
        start, needles = tmp_path / "nowhere", ("is not a directory",)
    elif case == "no config.json":
        start = tmp_path / "empty"
        start.mkdir()
        needles = ("no config.json",)
    elif case == "contradicting key":
        extra, needles = ["--set", "model.hidden_size=64"], ("model.hidden_size is 64 in the recipe, 32 in the checkpoint",)
    elif case in ("sentencepiece only", "malformed tokenizer"):
        start = shutil.copytree(work / "start", tmp_path / "copy")
        if case == "sentencepiece only":
            (start / "tokenizer.json").unlink()
            (start / "spiece.model").write_bytes(b"\x0a\x05hello")
            needles = ("sentencepiece", "save_pretrained")
        else:
            (start / "tokenizer.json").write_text('{"model": ')
            needles = ("tokenizer.json cannot be read",)
    else:
        r = run_cli("pretrain", "-r", "bert-tiny", "--set", "tokenizer.extend=10", "--set", f"output_dir={tmp_path}/o",
                    cwd=tmp_path)
        assert_user_error(r, "tokenizer.extend", "no model.init_from")
        return
    r = run_cli(*args(work, tmp_path / "out", *extra, start=start), cwd=tmp_path)
    assert_user_error(r, *needles)
    assert not (tmp_path / "out").exists()                # refused before any work
