"""train.report_to: a tiny real pretraining run with TensorBoard, W&B (offline) and MLflow (the
local file store in the run directory), read back with each package's own reader; a resume
continues the same runs without logging a step twice; a tracker that fails mid-run costs one
warning and nothing else; a missing package is refused before work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_documents
from helpers.pretrain import pretrain_cli
from helpers.wandb_log import wandb_records

from bertcli.train.metrics import read_metrics

pytest.importorskip("wandb")
pytest.importorskip("mlflow")
pytest.importorskip("tensorboard")

OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_API_KEY": "", "MLFLOW_TRACKING_URI": ""}
ALL = "train.report_to=[tensorboard,wandb,mlflow]"


def _corpus(root: Path) -> Path:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    docs = [[" ".join(words[(d + s + k) % len(words)] for k in range(6 + s % 3)) + " ." for s in range(5)]
            for d in range(30)]
    return write_documents(root / "corpus.txt", docs)


def _run(root: Path, *sets: str, steps: int = 4, resume: bool = False, monkeypatch=None):
    for k, v in OFFLINE.items():
        monkeypatch.setenv(k, v) if v else monkeypatch.delenv(k, raising=False)
    args = [x for s in sets for x in ("--set", s)] + (["--resume", "auto"] if resume else [])
    return pretrain_cli(root / "corpus.txt", root / "run", *args, steps=steps)


def _scalars(series: dict[int, float]) -> dict[int, float]:
    return {s: round(v, 5) for s, v in series.items()}


def _jsonl(run: Path, key: str) -> dict[int, float]:
    return _scalars({r["step"]: r[key] for r in read_metrics(run / "metrics.jsonl") if key in r})


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """A 4-step run with all three trackers, then resumed to 6 steps."""
    root = tmp_path_factory.mktemp("tracked")
    _corpus(root)
    mp = pytest.MonkeyPatch()
    try:
        first = _run(root, ALL, monkeypatch=mp)
        assert first.rc == 0, first.output
        ids = json.loads((root / "run" / "trackers.json").read_text())
        second = _run(root, ALL, steps=6, resume=True, monkeypatch=mp)
        assert second.rc == 0, second.output
    finally:
        mp.undo()
    return root / "run", ids, first.output + second.output


def test_mlflow_file_store_holds_the_metrics_and_params(tracked):
    from mlflow.tracking import MlflowClient

    run, ids, _ = tracked
    monkeypatch_env = pytest.MonkeyPatch()
    monkeypatch_env.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(run / "mlruns").absolute().as_uri())
    exp = client.get_experiment_by_name("bertcli")
    runs = client.search_runs([exp.experiment_id])
    assert [r.info.run_id for r in runs] == [ids["mlflow"]["run_id"]]       # the resume continued it
    for key in ("loss", "lr", "val_loss", "mlm_acc"):
        hist = client.get_metric_history(ids["mlflow"]["run_id"], key)
        steps = [m.step for m in hist]
        assert len(steps) == len(set(steps)), f"{key} logged twice at a step: {steps}"
        assert _scalars({m.step: m.value for m in hist}) == _jsonl(run, key)
    params = runs[0].data.params
    import yaml

    saved = yaml.safe_load((run / "recipe.yaml").read_text())
    assert params["train.learning_rate"] == str(saved["train"]["learning_rate"])
    assert params["model.hidden_size"] == "32" and params["output_dir"] == str(run)
    assert runs[0].info.status == "FINISHED"
    monkeypatch_env.undo()


def test_tensorboard_events_hold_the_same_scalars(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, _, _ = tracked
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    for key, tag in (("loss", "train/loss"), ("lr", "train/lr"), ("val_loss", "val/loss")):
        got: dict[int, float] = {}
        for e in acc.Scalars(tag):
            got[e.step] = e.value          # a purged-and-rewritten step: the latest event wins
        assert _scalars(got) == _jsonl(run, key)


def test_wandb_offline_run_holds_the_metrics_and_config(tracked):
    from wandb.proto import wandb_internal_pb2 as pb

    run, ids, _ = tracked
    # offline-run-DATE_TIME-ID, and -ID-1 for a resume that starts within the same second
    dirs = sorted(p for p in (run / "wandb").glob("offline-run-*") if p.name.split("-")[3] == ids["wandb"]["id"])
    assert dirs, sorted(p.name for p in (run / "wandb").iterdir())
    losses: dict[int, float] = {}
    config: dict = {}
    for d in dirs:                                  # the first run and its resume: one run id
        for data in wandb_records(next(d.glob("*.wandb"))):
            rec = pb.Record()
            rec.ParseFromString(data)
            if rec.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
                if "loss" in items:
                    assert items["_step"] not in losses, "a step logged twice"
                    losses[items["_step"]] = items["loss"]
            elif rec.WhichOneof("record_type") in ("config", "run"):
                update = rec.config.update if rec.HasField("config") else rec.run.config.update
                for i in update:
                    config[i.key] = json.loads(i.value_json)
    assert _scalars(losses) == _jsonl(run, "loss")
    assert config["model"]["hidden_size"] == 32 and config["output_dir"] == str(run)


def test_a_failing_tracker_warns_once_and_training_completes(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    calls = {"n": 0}
    real = MlflowClient.log_batch

    def flaky(self, run_id, metrics=(), *args, **kwargs):
        if metrics:
            calls["n"] += 1
            if calls["n"] >= 2:                     # mid-run: the second logged step
                raise OSError("No space left on device")
        return real(self, run_id, metrics, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", flaky)
    _corpus(tmp_path)
    r = _run(tmp_path, "train.report_to=[mlflow]", monkeypatch=monkeypatch)
    assert r.rc == 0, r.output
    assert r.output.count("warning: mlflow") == 1 and "No space left on device" in r.output
    assert calls["n"] == 2                          # dropped: never called again
    assert [x["step"] for x in read_metrics(tmp_path / "run" / "metrics.jsonl") if x["step"] > 0] == [1, 2, 3, 4]
    assert (tmp_path / "run" / "final" / "config.json").is_file()


def test_a_missing_tracker_package_is_refused_before_work(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    _corpus(tmp_path)
    r = _run(tmp_path, "train.report_to=[wandb]", monkeypatch=monkeypatch)
    assert r.rc == 2 and "bertcli[wandb]" in r.output
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_old_tensorboard_key_is_read_with_a_note():
    from bertcli.config.recipe import load_recipe

    assert load_recipe(None, ["train.tensorboard=true"]).train.report_to == ["tensorboard"]
    assert load_recipe(None, ["train.tensorboard=false"]).train.report_to == "none"
    assert load_recipe(None, []).train.report_to == "none"


def test_final_has_a_model_card_that_matches_the_results(tracked):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    run, _, _ = tracked
    card = ModelCard.load(run / "final" / "README.md")
    last_val = [r for r in read_metrics(run / "metrics.jsonl") if "val_loss" in r][-1]
    assert last_val["step"] == 6
    meta = card.data.to_dict()
    assert meta["library_name"] == "transformers" and "bertcli" in meta["tags"] and "base_model" not in meta
    assert "datasets" not in meta                                    # a local corpus is named in the body
    name, results = model_index_to_eval_results(meta["model-index"])
    got = {r.metric_name: r.metric_value for r in results}
    assert got == {"validation MLM loss": round(last_val["val_loss"], 6),
                   "validation MLM accuracy": round(last_val["val_mlm_acc"], 6)}
    assert f"| validation MLM loss | {last_val['val_loss']:.4f} |" in card.text
    assert "steps: 6 of batch 4" in card.text and f"`{run.parent / 'corpus.txt'}`" in card.text


def test_a_users_readme_is_never_replaced(tmp_path):
    from bertcli.core.outputs import write_marker
    from bertcli.model.card import card_wanted, write_card

    (tmp_path / "README.md").write_text("my card\n")
    write_marker(tmp_path, ["config.json"])
    assert not card_wanted(tmp_path) and not write_card(tmp_path, "---\n---\nbertcli's\n")
    assert (tmp_path / "README.md").read_text() == "my card\n"
    write_marker(tmp_path, ["config.json", "README.md"])                # bertcli's own card: replaced
    assert write_card(tmp_path, "new\n") and (tmp_path / "README.md").read_text() == "new\n"


@pytest.mark.parametrize("text, message", [("{not json", "not valid JSON"), ('["wandb"]', "not the tracker state")])
def test_a_damaged_tracker_state_is_one_message_on_resume(tmp_path, text, message):
    """trackers.json (the tracker run ids a resume continues) read back strictly: bad JSON or
    another shape is one message naming the file and how to start new tracker runs."""
    from bertcli.core.errors import UserError
    from bertcli.train.trackers import STATE, Trackers

    (tmp_path / STATE).write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=message) as e:
        Trackers(["tensorboard"], tmp_path, resume_step=3)
    assert str(tmp_path / STATE) in str(e.value) and "delete" in str(e.value)
