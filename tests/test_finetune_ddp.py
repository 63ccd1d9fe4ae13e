"""The fine-tuning engine under torchrun (bertcli/finetune/ddp.py) on CPU with gloo: two processes
equal one process (classify, NER, SQuAD: the per-epoch train losses, the dev metrics, the dev
predictions and the trained weights), only rank 0 writes, and a bad input fails every worker
with exit 2 and one message before the process group is joined.

Tiny L1 H32 models, dropout 0, a few steps; a global batch of 8 over 61 examples, so the short
last batch of 5 splits 3 / 2 over the ranks."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys

import pytest
from conftest import ONE_THREAD, popen_cli, run_cli, wait_paused
from finetune_fixtures import corpus_texts, tagged_sentence, tiny_checkpoint, write_conll
from helpers.ddp import COMMON, WORKER, assert_same_model_folder
from helpers.ddp import free_port as _free_port
from helpers.ddp import outputs as _outputs
from helpers.ddp import torchrun as _torchrun
from helpers.reviews import review_rows as _rows
from helpers.reviews import write_csv as _write_csv
from squad_synth import all_text, write_squad
from squad_synth import tiny_checkpoint as squad_checkpoint


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """{task: (argv after `bertcli finetune`, output folder of one process, of two)}; and "tracked":
    (the MLflow store both ranks of a tracked classify run logged to, its output folder)."""
    root = tmp_path_factory.mktemp("ddp")
    rng = random.Random(7)
    rows = _rows(rng, 61)
    cls_ckpt = tiny_checkpoint(root / "cls_ckpt", [r["review"] for r in rows], hidden=32, layers=1)
    train = _write_csv(root / "train.csv", rows)
    dev = _write_csv(root / "dev.csv", _rows(rng, 21))
    classify = ["classify", "-c", cls_ckpt, "--train", train, "--dev", dev, "--text-column", "review",
                "--label-column", "stars", "--set", "finetune.classify.learning_rate=1e-3",
                "--set", "finetune.classify.batch_size=8", "--set", "finetune.classify.epochs=2",
                "--set", "finetune.classify.max_seq_length=32"]
    ner_dir = root / "ner"
    for name, n in (("train.txt", 61), ("valid.txt", 21), ("test.txt", 5)):
        write_conll(ner_dir / name, [tagged_sentence(rng) for _ in range(n)])
    ner_ckpt = tiny_checkpoint(root / "ner_ckpt", corpus_texts(), hidden=32, layers=1)
    ner = ["ner", "-c", ner_ckpt, "-d", ner_dir, "--set", "finetune.ner.learning_rate=2e-3",
           "--set", "finetune.ner.batch_size=8", "--set", "finetune.ner.epochs=2",
           "--set", "finetune.ner.max_seq_length=16", "--set", "finetune.ner.window_overlap=4"]
    sq_dir = write_squad(root / "squad", version=1, n_train=8, n_dev=4, seed=1, code_words=1)
    texts = [t for p in sorted(sq_dir.glob("*.json")) for t in all_text(json.loads(p.read_text()))]
    sq_ckpt = squad_checkpoint(root / "sq_ckpt", texts, hidden_size=32, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=64)
    squad = ["squad", "-c", sq_ckpt, "-d", sq_dir, "--set", "finetune.squad.max_seq_length=64",
             "--set", "finetune.squad.doc_stride=32", "--set", "finetune.squad.max_query_length=16",
             "--set", "finetune.squad.batch_size=8", "--set", "finetune.squad.learning_rate=1e-3",
             "--set", "finetune.squad.epochs=1"]
    out = {}
    for name, argv in (("classify", classify), ("ner", ner), ("squad", squad)):
        one = root / f"{name}_one"
        r = run_cli("finetune", *argv, "-o", one, *COMMON, cwd=root, env=ONE_THREAD)
        assert r.rc == 0, r.output
        out[name] = (argv, one, root / f"{name}_two")
    # the real launcher and CLI for classify; NER and SQuAD in one more launch (the worker runs both)
    r = _torchrun("-m", "bertcli", "finetune", *classify, "-o", out["classify"][2], *COMMON, cwd=root)
    assert r.returncode == 0, r.stdout + r.stderr
    # and a classify run with MLflow logging to one store outside the run (MLFLOW_TRACKING_URI): a
    # second rank that logged would leave a second run there
    spec = root / "jobs.json"
    tracked = ["finetune", *map(str, classify), "-o", str(root / "tracked"), *COMMON,
               "--set", "finetune.report_to=[mlflow]"] if importlib.util.find_spec("mlflow") else []
    spec.write_text(json.dumps([["finetune", *map(str, out[t][0]), "-o", str(out[t][2]), *COMMON]
                                for t in ("ner", "squad")] + ([tracked] if tracked else [])))
    store = (root / "mlstore").absolute().as_uri()
    r = _torchrun(WORKER, spec, cwd=root, env={"MLFLOW_TRACKING_URI": store, "MLFLOW_ALLOW_FILE_STORE": "true"})
    assert r.returncode == 0, r.stdout + r.stderr
    if tracked:
        out["tracked"] = (store, root / "tracked")
    return out


@pytest.mark.parametrize("task", ["classify", "ner", "squad"])
def test_two_processes_equal_one(jobs, task):
    """Tolerance: float32 sums in another order (each rank's shard, then the all-reduce):
    rel 1e-5 on the losses and metrics, 1e-4 on the weights after the last step (absolute too:
    Adam divides a near-zero gradient by its own size, so its rounding moves a weight by up to a
    fraction of the learning rate). The dev (and
    test) prediction files are byte-identical: every example predicted once, in order."""
    _, one, two = jobs[task]
    r1, r2 = (json.loads((d / "results.json").read_text()) for d in (one, two))
    assert len(r1["history"]) == len(r2["history"]) >= 1 and r1["steps"] == r2["steps"] >= 6
    for h1, h2 in zip(r1["history"], r2["history"]):
        assert h2["train_loss"] == pytest.approx(h1["train_loss"], rel=1e-5), (task, h1["epoch"])
        for split, metrics in h1["dev"].items():
            for k, v in metrics.items():
                assert h2["dev"][split][k] == pytest.approx(v, rel=1e-5, abs=1e-6), (task, split, k)
    assert r1["best_epoch"] == r2["best_epoch"]
    assert any("dev" in k or k == "predictions.json" for k in _outputs(one)), sorted(_outputs(one))
    assert len((one / "metrics.jsonl").read_text().splitlines()) >= r1["steps"], task
    assert_same_model_folder(one, two, task)


def test_only_rank_0_logs_to_the_trackers(jobs, monkeypatch):
    """Two ranks, finetune.report_to [mlflow], both pointed at one MLflow store: the store holds
    one run, finished, whose per-step loss and dev accuracy are the run's metrics.jsonl (the
    global figures, not a rank's share), and the run folder has no tracker store of its own."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    store, folder = jobs["tracked"]
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")      # as the workers had it
    client = MlflowClient(tracking_uri=store)
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert len(runs) == 1 and runs[0].info.status == "FINISHED", [r.info for r in runs]
    recs = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    for key in ("loss", "dev_dev_accuracy"):
        hist = client.get_metric_history(runs[0].info.run_id, key)
        want = {r["step"]: round(r[key], 5) for r in recs if key in r}
        assert {m.step: round(m.value, 5) for m in hist} == want and want, key
    alone = [json.loads(line) for line in (jobs["classify"][1] / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in recs if "loss" in r] == pytest.approx([r["loss"] for r in alone if "loss" in r],
                                                                    rel=1e-5)      # one process's losses
    assert not (folder / "mlruns").exists()


def test_bad_input_fails_every_rank_before_joining(tmp_path):
    """Two workers of one torchrun job (RANK 0 and 1 of WORLD_SIZE 2), a training file without
    the label column: each exits 2 with the one message, before the process group is joined
    (had they joined, the check on rank 1 alone would leave rank 0 waiting for its peer)."""
    rows = _rows(random.Random(1), 12)
    ckpt = tiny_checkpoint(tmp_path / "ckpt", [r["review"] for r in rows], hidden=32, layers=1)
    train = _write_csv(tmp_path / "train.csv", rows, columns=("review",))
    dev = _write_csv(tmp_path / "dev.csv", rows)
    port = str(_free_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bertcli", "finetune", "classify", "-c", str(ckpt), "--train", str(train),
             "--dev", str(dev), "--text-column", "review", "--label-column", "stars", "-o", str(tmp_path / "out"),
             "--set", "finetune.classify.batch_size=8"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for rank, p in enumerate(procs):
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 2, (rank, stdout, stderr)
        text = stdout + stderr
        assert "Traceback" not in text, (rank, text)
        assert text.count("stars") >= 1 and text.lower().count("error") == 1, (rank, text)
    assert not (tmp_path / "out").exists()


def test_what_torchrun_refuses(monkeypatch):
    """Before joining: a global batch that does not divide by the world size, and sweeps, each one
    message naming the fix; alone, nothing."""
    from bertcli.core.errors import UserError
    from bertcli.finetune import ddp

    ddp.check_batch(7)                      # one process: any batch
    ddp.check_sweep()
    monkeypatch.setenv("WORLD_SIZE", "2")
    ddp.check_batch(8)
    with pytest.raises(UserError, match=r"batch_size 7 .*does not divide by the 2 processes") as e:
        ddp.check_batch(7)
    assert "multiple of 2" in e.value.fix
    ddp.check_sweep()                             # a seed / rate sweep: each run on all ranks
    with pytest.raises(UserError, match="GLUE's sweep"):
        ddp.check_sweep(protocol=True)
    with pytest.raises(UserError, match="--shared"):
        ddp.check_sweep(shared=True)


def test_prediction_rows_travel_exactly():
    """The rows gathered between ranks (ddp._encode / _decode): arrays keep dtype, shape and bits,
    scalars stay scalars, tuples stay tuples (SQuAD's rows; -inf included)."""
    import numpy as np

    from bertcli.finetune import ddp

    row = (np.array([1.5, -np.inf, 3e-9], dtype=np.float32), np.arange(6, dtype=np.int64).reshape(2, 3),
           (np.float32(0.1), np.float32(-2.0)), [1, "x", None])
    back = ddp._decode(json.loads(json.dumps(ddp._encode(row))))
    assert isinstance(back, tuple) and isinstance(back[2], tuple) and back[3] == [1, "x", None]
    for a, b in ((row[0], back[0]), (row[1], back[1]), (row[2][0], back[2][0])):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b) and a.tobytes() == b.tobytes()
    assert isinstance(back[2][0], np.generic)


def _two_workers_rank1_held_at_step_11(argv, out, tmp_path) -> list:
    """RANK 0 and 1 of 2 of a classify run into `out`, started as torchrun would start them;
    rank 1 waits before step 11 (testhooks) for the test to signal it."""
    port, procs = str(_free_port()), []
    for rank in (0, 1):
        env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "OMP_NUM_THREADS": "1"}
        procs.append(popen_cli("finetune", *argv, "-o", out, *COMMON, cwd=tmp_path, env=env,
                               pause="finetune-step-11" if rank else None))
    return procs


def test_sigterm_on_one_rank_stops_both_at_one_step(jobs, tmp_path):
    """Two workers (RANK 0 and 1 of 2) of the classify run, 8 steps an epoch; rank 1 is held before
    step 11 and sent SIGTERM there. Both stop at that step (the stop travels with the step's
    all-reduce: rank 0, never signalled, would otherwise wait for its peer), both exit 128 + 15,
    and rank 0 alone writes the kept epoch 1 once, its results.json recording the stop."""
    out = tmp_path / "out"
    procs = _two_workers_rank1_held_at_step_11(jobs["classify"][0], out, tmp_path)
    wait_paused(procs[1])
    procs[1].send_signal(signal.SIGTERM)
    for rank, p in enumerate(procs):
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 128 + signal.SIGTERM, (rank, p.returncode, stdout[-2000:], stderr[-3000:])
    res = json.loads((out / "results.json").read_text())
    assert res["interrupted"] == {"signal": "SIGTERM", "step": 10, "total_steps": 16} and res["best_epoch"] == 1
    assert sorted(p.name for p in tmp_path.glob("out*")) == ["out"]


def test_a_killed_rank_stops_the_other_with_one_message(jobs, tmp_path):
    """Rank 1 is held before step 11 and killed outright (SIGKILL: no handler runs). Rank 0, waiting
    in that step's all-reduce, fails within seconds (gloo sees the socket close; a silent peer
    would take ddp.TIMEOUT_S) with one message, exit 2, no traceback, and writes nothing."""
    out = tmp_path / "out"
    procs = _two_workers_rank1_held_at_step_11(jobs["classify"][0], out, tmp_path)
    wait_paused(procs[1])
    procs[1].kill()
    procs[1].communicate()
    stdout, stderr = procs[0].communicate(timeout=600)
    assert procs[0].returncode == 2, (procs[0].returncode, stdout[-2000:], stderr[-3000:])
    assert "Traceback" not in stdout + stderr and "another process of this torchrun job" in stderr, stderr[-3000:]
    assert not (out / "results.json").exists()
