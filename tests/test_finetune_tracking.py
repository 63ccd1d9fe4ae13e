"""finetune.report_to in a seed sweep (bertcli/finetune/tracking.py): the trackers log while the
run trains (read back from MLflow's live store at each dev evaluation), one tracker run per
(lr, seed) grouped under the sweep, an interrupted run of a `--resume`d sweep continues its
tracker runs without logging a step twice; the kept model's card shows the mean ± sd over
seeds and the rate rule, read back with huggingface_hub. A hanging tracker costs a bounded
wait (trackers.BOUND_S): in the sweep (a stand-in whose finish never returns) and alone."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from conftest import ONE_THREAD, run_cli
from finetune_fixtures import tiny_checkpoint

from bertcli.train.metrics import read_metrics

pytest.importorskip("mlflow")
pytest.importorskip("tensorboard")
pytest.importorskip("huggingface_hub")

POS, NEG = ["good", "great", "fine"], ["bad", "awful", "poor"]


def _write(path: Path, rng, n: int) -> list[str]:
    """n rows of a task one word decides; their texts."""
    rows = [(y, f"{rng.choice(POS if y else NEG)} {rng.choice('xyz')}") for y in (rng.randrange(2) for _ in range(n))]
    path.write_text("text,label\n" + "".join(f"{t},{['neg', 'pos'][y]}\n" for y, t in rows), encoding="utf-8")
    return [t for _, t in rows]


ENV = {**ONE_THREAD, "MLFLOW_TRACKING_URI": "", "MLFLOW_ALLOW_FILE_STORE": "true"}


def _sweep(root: Path, *extra: str):
    return run_cli("finetune", "classify", "-c", root / "ckpt", "--train", root / "train.csv", "--dev",
                   root / "dev.csv", "-o", root / "out", "--epochs", "2", "--max-seq-length", "16", "--batch-size", "8",
                   "--lr", "0.01",
                   "--set", "finetune.dropout=0", "--set", "finetune.report_to=[tensorboard,mlflow,wandb]",
                   "--set", "language=[en]", "--seeds", "2", *extra, cwd=root, env=ENV)


def _client(store: Path):
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=store.absolute().as_uri())


def _runs(store: Path) -> list:
    client = _client(store)
    exp = client.get_experiment_by_name("bertcli")
    return [] if exp is None else client.search_runs([exp.experiment_id])


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A 2-seed classify sweep (2 epochs of 8 steps) with TensorBoard and MLflow: SIGTERM at
    step 9 of its first run (epoch 1 kept: results.json says interrupted, the sweep stops), then
    `--resume`. At every dev evaluation the live MLflow store's loss steps are read back. The
    third tracker is a stand-in for W&B whose finish never returns (bound 0.3 s here)."""
    from bertcli.finetune import engine, tracking
    from bertcli.train import trackers

    root = tmp_path_factory.mktemp("tracked_sweep")
    import random

    rng = random.Random(1)
    texts = _write(root / "train.csv", rng, 64)
    _write(root / "dev.csv", rng, 40)
    tiny_checkpoint(root / "ckpt", texts * 3, hidden=32, layers=1, positions=40)

    mp = pytest.MonkeyPatch()
    seen: list[tuple[str, list[int], list[int]]] = []      # (run folder, loss steps, dev steps) live
    real_eval, real_log = engine.evaluate_devs, tracking.RunLog.__call__
    kill = {"at": 9}

    def spy_eval(*a, **k):
        live = list((root / "out").glob(".*bertcli-tmp-*/mlruns"))
        assert len(live) == 1, live                        # the run's trackers write while it trains
        client, [run] = _client(live[0]), _runs(live[0])
        seen.append((live[0].parent.name[1:].split(".bertcli-tmp-")[0],
                     [m.step for m in client.get_metric_history(run.info.run_id, "loss")],
                     [m.step for m in client.get_metric_history(run.info.run_id, "dev_dev_accuracy")]))
        return real_eval(*a, **k)

    def killing_log(self, record):
        real_log(self, record)
        if record["step"] == kill["at"] and "loss" in record:
            kill["at"] = None
            os.kill(os.getpid(), signal.SIGTERM)           # as a scheduler stops a job: the step ends, epoch 1 is kept

    release = threading.Event()

    class FinishHangs:
        bound_s = 0.3    # its own bound: MLflow and TensorBoard beside it keep the real one, however loaded the machine

        def start(self, *a):
            return {"id": "stand-in"}

        def log(self, values, step):
            pass

        def finish(self):
            release.wait(30)

    mp.setitem(trackers.BACKENDS, "wandb", FinishHangs)
    mp.setattr(engine, "evaluate_devs", spy_eval)
    mp.setattr(tracking.RunLog, "__call__", killing_log)
    try:
        first = _sweep(root)
        ids = json.loads((root / "out" / "seed-42" / "trackers.json").read_text())
        second = _sweep(root, "--resume")
    finally:
        release.set()
        mp.undo()
    # each of the 3 runs (the interrupted one included) waited 0.3 s for the hung finish, warned once, and ended
    assert (first.output + second.output).count("wandb finish failed (TimeoutError") == 3
    assert first.rc == 128 + signal.SIGTERM, first.output
    assert second.rc == 0, second.output
    return root / "out", ids, seen


def test_finetune_trackers_log_live_and_a_resumed_run_continues_its_tracker_run(swept):
    out, ids, seen = swept
    # live: at each dev evaluation the store already holds every step so far and the earlier epochs' dev figures
    fresh = [(steps, dev) for folder, steps, dev in seen if folder == "seed-43"]
    assert fresh == [(list(range(1, 9)), []), (list(range(1, 17)), [8])]
    for folder in ("seed-42", "seed-43"):
        run_dir = out / folder
        assert not list(run_dir.glob(".*bertcli-tmp-*")) and not list(out.glob(".*bertcli-tmp-*"))
        recs = read_metrics(run_dir / "metrics.jsonl")
        [run] = _runs(run_dir / "mlruns")                   # one tracker run per (lr, seed)
        client = _client(run_dir / "mlruns")
        for key in ("loss", "lr", "train_loss", "dev_dev_accuracy"):
            hist = client.get_metric_history(run.info.run_id, key)
            steps = [m.step for m in hist]
            assert len(steps) == len(set(steps)), f"{folder}: {key} logged twice at a step: {steps}"
            assert {m.step: round(m.value, 5) for m in hist} == {r["step"]: round(r[key], 5) for r in recs if key in r}
        assert run.data.tags["bertcli.group"] == "out-classify" and run.info.status == "FINISHED"
        assert run.info.run_name == f"out-classify-lr0.01-seed{folder[5:]}"
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(run_dir / "tensorboard"))   # a subdir per run under the sweep's --out
        acc.Reload()
        assert {e.step: round(e.value, 5) for e in acc.Scalars("train/loss")} == {
            r["step"]: round(r["loss"], 5) for r in recs if "loss" in r}
    # the interrupted first run: trained again, into the same MLflow run, steps 1-3 not logged twice
    [again] = _runs(out / "seed-42" / "mlruns")
    assert again.info.run_id == ids["mlflow"]["run_id"]
    assert [s for folder, s, _ in seen if folder == "seed-42"] == [list(range(1, 9)), list(range(1, 10)),
                                                                   list(range(1, 17))]
    # the kept model folder (--out) is the model's: tracker files stay with their runs
    assert not any((out / name).exists() for name in ("mlruns", "tensorboard", "trackers.json", "metrics.jsonl"))


def test_a_swept_models_card_shows_the_mean_and_sd_over_seeds_and_the_rate_rule(swept):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    out, _, _ = swept
    summary = json.loads((out / "results.json").read_text())["sweep"]
    entry = summary["tasks"]["classify"]
    chosen = entry["by_lr"][entry["chosen_key"]]
    card = ModelCard.load(out / "README.md")
    meta = card.data.to_dict()
    assert meta["language"] == ["en"] and meta["pipeline_tag"] == "text-classification"
    _, evals = model_index_to_eval_results(meta["model-index"])
    want = {f"{split} {m} (mean of 2 seeds)": round(s["mean"], 6) for split, ms in chosen["dev"].items()
            for m, s in ms.items()}
    assert {e.metric_name: e.metric_value for e in evals} == want and want
    assert meta["bertcli_sweep"] == {"statistic": "mean over seeds", "seeds": [42, 43],
                                     "learning_rates": entry["learning_rates"], "chosen_lr": entry["chosen_lr"],
                                     "rule": entry["rule"], "kept": {k: entry["kept"][k] for k in ("lr", "seed", "dir")}}
    for split, ms in chosen["dev"].items():
        for m, s in ms.items():
            assert f"| {split} {m} | {s['mean']:.4f} ± {s['sd']:.4f} | 2 |" in card.text
    assert entry["rule"] in card.text and f"Learning rate {entry['chosen_lr']:g} was chosen" in card.text
    # ModelCard round-trips the metadata as written
    again = ModelCard.load(out / "README.md")
    assert again.data.to_dict() == meta and str(again) == str(card)


def test_a_hanging_tracker_costs_a_bounded_wait(tmp_path, monkeypatch):
    """A tracker whose start and finish never return: each is given up after BOUND_S (120 s in
    use, 0.3 s here) with one warning, and the run's records go on."""
    from bertcli.train import trackers

    release = threading.Event()
    calls: list[str] = []

    class Hanging:
        def start(self, *a):
            calls.append("start")
            release.wait(30)
            calls.append("start returned")
            return {}

        def log(self, values, step):
            calls.append(f"log {step}")

        def finish(self):
            calls.append("finish")
            release.wait(30)
            calls.append("finish returned")

    warnings: list[str] = []
    monkeypatch.setattr(trackers.console, "log", lambda message, *a, **k: warnings.append(message))
    monkeypatch.setattr(trackers, "BOUND_S", 0.3)
    monkeypatch.setitem(trackers.BACKENDS, "wandb", Hanging)
    try:
        t0 = time.monotonic()
        hung = trackers.Trackers(["wandb"], tmp_path)
        hung.start({"name": "x"})
        assert calls == ["start"] and not hung.live              # dropped after the bound
        started = trackers.Trackers(["wandb"], tmp_path)
        monkeypatch.setattr(Hanging, "start", lambda self, *a: {})
        started.start({"name": "x"})
        started.log({"step": 1, "loss": 1.0}, 1)
        started.finish()
        took = time.monotonic() - t0
        seen = list(calls)                  # before the release: the hung calls never returned, the run went on
    finally:
        release.set()
    assert seen == ["start", "log 1", "finish"]
    assert len(warnings) == 2 and all("took longer than 0.3 s" in w for w in warnings), warnings
    assert took >= 0.5, took                                    # each bound of 0.3 s was waited out
