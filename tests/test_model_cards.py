"""The model card (README.md) of a fine-tuned model directory: huggingface_hub reads it, and its
metadata and evaluation table are results.json's dev figures; its metrics.jsonl. (Pretraining's final/ card:
tests/test_trackers.py.)"""

from __future__ import annotations

import csv
import json
import random

import pytest
from conftest import ONE_THREAD, run_cli
from finetune_fixtures import tiny_checkpoint
from helpers.glue import FILL, NEG, POS
from helpers.wandb_log import wandb_records

pytest.importorskip("huggingface_hub")


def test_a_finetuned_model_has_a_card_that_matches_results_json(tmp_path):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    rng = random.Random(3)
    rows = [{"text": " ".join(rng.choices(FILL, k=5) + [rng.choice([NEG, POS][y])]), "label": y}
            for y in (rng.randrange(2) for _ in range(48))]
    for name, part in (("train.csv", rows[:32]), ("dev.csv", rows[32:])):
        with open(tmp_path / name, "w", newline="") as f:
            w = csv.DictWriter(f, ["text", "label"])
            w.writeheader()
            w.writerows(part)
    ckpt = tiny_checkpoint(tmp_path / "ckpt", [r["text"] for r in rows], hidden=32, layers=1)
    out = tmp_path / "out"
    r = run_cli("finetune", "classify", "-c", ckpt, "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv",
                "-o", out, "--set", "finetune.classify.epochs=1", "--set", "finetune.classify.batch_size=16",
                "--set", "finetune.classify.max_seq_length=16", "--set", "language=[en]", "--set", "finetune.report_to=[wandb]",
                cwd=tmp_path,
                env={**ONE_THREAD, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_API_KEY": ""})
    assert r.rc == 0, r.output
    [card_path] = list(out.rglob("README.md"))
    results = json.loads((card_path.parent / "results.json").read_text())
    card = ModelCard.load(card_path)
    meta = card.data.to_dict()
    assert meta["language"] == ["en"] and meta["pipeline_tag"] == "text-classification"
    assert "base_model" not in meta and "datasets" not in meta     # a local checkpoint and local files
    _, evals = model_index_to_eval_results(meta["model-index"])
    want = {f"{split} {k}": round(v, 6) for split, vals in results["dev"].items() for k, v in vals.items()
            if isinstance(v, (int, float))}
    assert {e.metric_name: e.metric_value for e in evals} == want and want
    for name, value in want.items():
        assert f"| {name} | {value:.4f} |" in card.text
    assert "AutoModelForSequenceClassification" in card.text and str(ckpt) in card.text
    # metrics.jsonl beside it, as pretraining writes: a record per step, then each epoch's dev figures
    from bertcli.train.metrics import read_metrics

    recs = read_metrics(card_path.parent / "metrics.jsonl")
    steps = [x for x in recs if "loss" in x]
    assert [x["step"] for x in steps] == list(range(1, results["steps"] + 1)) and all(x["lr"] >= 0 for x in steps)
    [ep] = [x for x in recs if "train_loss" in x]
    assert ep["step"] == results["steps"] and ep["epoch"] == 1
    assert {k.removeprefix("dev_"): v for k, v in ep.items() if k.startswith("dev_")} == {
        f"{split}_{k}": v for split, vals in results["dev"].items() for k, v in vals.items() if isinstance(v, (int, float))}

    # finetune.report_to: the W&B offline run inside the model folder holds the same records and the recipe
    from wandb.proto import wandb_internal_pb2 as pb

    [wb] = list((card_path.parent / "wandb").glob("offline-run-*/*.wandb"))
    losses, config = {}, {}
    for data in wandb_records(wb):
        rec = pb.Record()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
            if "loss" in items:
                losses[items["_step"]] = items["loss"]
        elif rec.WhichOneof("record_type") == "run":
            config.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
    assert losses == {x["step"]: x["loss"] for x in steps}
    assert config["finetune"]["report_to"] == ["wandb"] and config["output_dir"] == str(card_path.parent)
    assert config["group"] is None                                      # a single run: no sweep to group under
    assert config["name"].endswith(f"-{results['task']}-lr{results['hyperparameters']['learning_rate']:g}"
                                   f"-seed{results['seed']}")
