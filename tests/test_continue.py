"""Continued pretraining (`model.init_from` / `--init-from`): for every family, start from a tiny
checkpoint that transformers itself wrote, check that the step-0 validation MLM loss bertcli logs
is transformers' loss for the same weights and rows, continue through the real CLI, check that
the validation loss goes down and that transformers loads the result with its tokenizer and
computes the final validation loss bertcli logged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import ONE_THREAD, run_cli
from continue_fixtures import domain_documents, general_documents, hf_checkpoint, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)

STEPS = ["--set", "train.max_steps=30", "--set", "train.eval_every=30", "--set", "train.save_every=10",
         "--set", "train.warmup_ratio=0.1", "--set", "train.num_workers=0", "--set", "train.tensorboard=false",
         "--set", "train.log_every=10"]


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    root = tmp_path_factory.mktemp("texts")
    general, domain = general_documents(120), domain_documents(120)
    return {"root": root, "general": [s for d in general for s in d],
            "general_file": write_corpus(root / "general.txt", general[:60]),
            "domain_file": write_corpus(root / "domain.txt", domain)}


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def stage(run: Path, name: str) -> Path:
    (found,) = [p for p in run.iterdir() if p.name.startswith(f"{name}-") and p.is_dir()]
    return found


def transformers_val_loss(model_dir: Path, run: Path, family: str) -> float:
    """transformers' MLM loss over the run's validation rows (all of them: eval_batches null),
    masked exactly as bertcli's trainer masks them (PretrainCollator, epoch 0)."""
    import transformers as tf

    from bertcli.config.recipe import load_recipe
    from bertcli.data.collator import PretrainCollator
    from bertcli.data.dataset import PretrainDataset, load_data
    from bertcli.tokenization.load import load_tokenizer

    recipe = load_recipe(str(run / "recipe.yaml"))
    val = PretrainDataset(load_data(stage(run, "data"))["validation"])
    b = PretrainCollator(load_tokenizer(stage(run, "tokenizer")), recipe.data, recipe.seed)(
        [val[(0, i)] for i in range(len(val))])
    model = tf.AutoModelForMaskedLM.from_pretrained(model_dir).eval()
    kw = {"token_type_ids": b["token_type_ids"]} if family in ("bert", "albert") else {}
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], **kw).logits   # [B, T, V]
    flat = logits.reshape(-1, logits.shape[-1])[b["mlm_positions"]]                              # [N, V]
    return torch.nn.functional.cross_entropy(flat.double(), b["mlm_labels"]).item()


CASES = [("bert", "pretraining"), ("roberta", "mlm"), ("albert", "pretraining"), ("modernbert", "mlm")]


@pytest.mark.parametrize("family, arch", CASES, ids=[c[0] for c in CASES])
def test_continued_pretraining_from_a_transformers_checkpoint(tmp_path, texts, family, arch):
    import transformers as tf

    start = hf_checkpoint(tmp_path / "start", family, texts["general"], arch)
    run = tmp_path / "run"
    r = run_cli("pretrain", "-r", "continue-tiny", "--init-from", str(start), "--set",
                f"corpus.sources=[{texts['domain_file']}]", "--set", f"output_dir={run}", *STEPS, cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    records = metrics(run)
    first, last = records[0], records[-1]
    assert first["step"] == 0 and last["step"] == 30
    # the weights arrived: bertcli's step-0 loss is transformers' on the same rows and masks
    assert first["val_mlm_loss"] == pytest.approx(transformers_val_loss(start, run, family), rel=1e-4)
    assert last["val_mlm_loss"] < first["val_mlm_loss"] - 0.1, (first, last)   # fixed rows and masks: no noise
    assert "val MLM loss (step 0 -> end)" in r.stdout
    # the result is a transformers model with its tokenizer, computing what bertcli logged
    final = run / "final"
    assert last["val_mlm_loss"] == pytest.approx(transformers_val_loss(final, run, family), rel=1e-4)
    hf_tok = tf.AutoTokenizer.from_pretrained(final)
    text = "the polymerase binds glucosamine in the cell ."
    assert hf_tok(text)["input_ids"] == tf.AutoTokenizer.from_pretrained(start)(text)["input_ids"]
    config = json.loads((final / "config.json").read_text())
    start_config = json.loads((start / "config.json").read_text())
    for key in ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size", "max_position_embeddings"):
        assert config[key] == start_config[key], key
