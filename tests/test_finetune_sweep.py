"""Seeds and learning-rate grids (bertcli/finetune/sweep.py, sweep_summary.py): the statistics
against `statistics` / numpy, the rate rule with its ties and failures, the flags' mistakes, and
end to end through the real CLI on a tiny learnable task (one word decides the label): one seed
and one rate give today's results.json, a killed sweep resumes without redoing finished runs and
ends with the figures of an uninterrupted one, a diverged run is counted and the sweep goes on."""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
from pathlib import Path

import numpy as np
import pytest
from conftest import ONE_THREAD, assert_user_error, finish, popen_cli, run_cli, wait_paused
from helpers import sweeps

from bertcli.config.options import parse_rates, parse_seeds
from bertcli.config.recipe import load_recipe
from bertcli.core.errors import UserError
from bertcli.finetune import sweep_summary as ss

_rows, _write, _classify, _json = sweeps.rows, sweeps.write, sweeps.classify, sweeps.read_json
_timeless = sweeps.timeless


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> Path:
    """A tiny L1 H32 BERT and a binary task it learns in 24 steps at lr 1e-2 (at chance at 1e-3)."""
    return sweeps.write_task(tmp_path_factory.mktemp("sweep"))


def _plan_line(output: str) -> str:
    """The one line a sweep prints before any work (its runs, threads and steps)."""
    lines = [line for line in output.splitlines() if line.startswith("sweep: ") and " runs (" in line]
    assert len(lines) == 1, output
    return lines[0]


# ------------------------------------------------------------------------------------ units
def _record(lr, seed, status, score, acc=None):
    dev = {} if status == "diverged" else {"dev": {"accuracy": acc if acc is not None else score, "f1": score / 2}}
    return {"lr": lr, "seed": seed, "dir": f"lr-{lr!r}/seed-{seed}", "status": status,
            "score": None if status == "diverged" else score, "dev": dev,
            "test": {} if status == "diverged" else {"test": {"accuracy": score - 0.1}}}


def test_statistics_equal_statistics_and_numpy():
    """Per rate: n counts every run, the statistics are over the finished ones, sd with ddof 1,
    the median of an even n the mean of the middle two; dev and test metrics likewise."""
    rng = random.Random(3)
    runs = [_record(5e-5, s, "ok", rng.uniform(0.5, 0.9)) for s in range(4)]
    runs += [_record(5e-5, 4, "diverged", None), _record(5e-5, 5, "chance", 0.5)]
    runs += [_record(3e-5, s, "ok", rng.uniform(0.5, 0.9)) for s in range(3)]
    entry = ss.task_entry(runs, [5e-5, 3e-5], "accuracy")
    for key, lr in (("5e-05", 5e-5), ("3e-05", 3e-5)):
        ok = [r for r in runs if r["lr"] == lr and r["status"] == "ok"]
        g = entry["by_lr"][key]
        scores = np.array([r["score"] for r in ok])
        assert g["n"] == sum(r["lr"] == lr for r in runs)
        assert g["score"]["n"] == len(ok)
        assert g["score"]["mean"] == pytest.approx(np.mean(scores), rel=1e-12)
        assert g["score"]["sd"] == pytest.approx(np.std(scores, ddof=1), rel=1e-12)
        assert g["score"]["median"] == pytest.approx(np.median(scores), rel=1e-12)
        assert g["score"]["median"] == statistics.median(scores.tolist())
        assert (g["score"]["min"], g["score"]["max"]) == (scores.min(), scores.max())
        f1 = [r["dev"]["dev"]["f1"] for r in ok]
        assert g["dev"]["dev"]["f1"]["sd"] == pytest.approx(statistics.stdev(f1), rel=1e-12)
        test = [r["test"]["test"]["accuracy"] for r in ok]
        assert g["test"]["test"]["accuracy"]["mean"] == pytest.approx(statistics.fmean(test), rel=1e-12)
    assert entry["by_lr"]["5e-05"]["failed"] == {"diverged": 1, "chance": 1}
    assert entry["by_lr"]["5e-05"]["score"]["n"] == 4      # even n: the mean of the middle two (checked above)


def test_rate_rule_median_ties_and_failures():
    """The highest median wins; a tie goes to the smaller rate; failed runs rank below every
    finished one, so a rate whose median is a failed run is never chosen, even with the best
    single run; every rate failing chooses none."""
    a = [_record(5e-5, s, "ok", v) for s, v in enumerate((0.70, 0.80, 0.90))]
    b = [_record(3e-5, s, "ok", v) for s, v in enumerate((0.60, 0.80, 0.95))]
    e = ss.task_entry(a + b, [5e-5, 3e-5], "accuracy")
    assert e["chosen_lr"] == 3e-5 and e["kept"]["dir"] == "lr-3e-05/seed-2"        # equal medians: the smaller
    c = [_record(2e-5, s, "ok", v) for s, v in enumerate((0.75, 0.81, 0.82))]
    assert ss.task_entry(a + b + c, [5e-5, 3e-5, 2e-5], "accuracy")["chosen_lr"] == 2e-5
    bad = [_record(1e-4, 0, "ok", 0.99), _record(1e-4, 1, "diverged", None), _record(1e-4, 2, "chance", 0.5)]
    e = ss.task_entry(a + bad, [5e-5, 1e-4], "accuracy")
    assert e["chosen_lr"] == 5e-5 and e["by_lr"]["0.0001"]["selection_median"] is None
    one_of_three = [_record(1e-4, 0, "ok", 0.99), _record(1e-4, 1, "ok", 0.98), _record(1e-4, 2, "diverged", None)]
    assert ss.task_entry(a + one_of_three, [5e-5, 1e-4], "accuracy")["chosen_lr"] == 1e-4   # median 0.98
    none = ss.task_entry([_record(5e-5, 0, "diverged", None), _record(5e-5, 1, "chance", 0.5)], [5e-5], "accuracy")
    assert none["chosen_lr"] is None and none["kept"] is None


def test_score_name_is_read_off_the_runs():
    mean = [{"dev": {"dev": {"accuracy": a, "f1": f}}, "score": (a + f) / 2} for a, f in ((0.8, 0.6), (0.7, 0.7))]
    assert ss.score_name(mean) == "mean of accuracy, f1"
    first = [{"dev": {"dev": {"f1": f, "precision": p}}, "score": f} for f, p in ((0.8, 0.6), (0.7, 0.9))]
    assert ss.score_name(first) == "f1"
    mnli = [{"dev": {"matched": {"accuracy": 0.8}, "mismatched": {"accuracy": 0.6}}, "score": 0.7}]
    assert ss.score_name(mnli) == "mean of matched accuracy, mismatched accuracy"


def test_seeds_and_rates_parse_or_say_why():
    assert parse_seeds("3", 42) == [42, 43, 44] and parse_seeds("1,7,42", 0) == [1, 7, 42]
    assert parse_rates("5e-5,3e-5") == [5e-5, 3e-5] and parse_rates("auto") is None and parse_rates("2e-5") == [2e-5]
    for bad in ("0", "1,1", "a,b", "-1,2", "1.5", "1e308", "10001", "1,4294967296"):
        with pytest.raises(UserError, match="--seeds"):
            parse_seeds(bad, 42)
    with pytest.raises(UserError, match="--seeds"):
        parse_seeds("2", 4294967295)                     # the second seed would pass numpy's largest
    for bad in ("5e-5,x", "0,1e-5", "1e-5,1e-5", "nan", "inf", "1e308", "3e-5,11"):
        with pytest.raises(UserError, match="--lr"):
            parse_rates(bad)


def test_a_runs_thread_count_survives_the_tasks_recipe_changes(tmp_path):
    """run_recipe's thread count reaches the engine through a task's dataclasses.replace of the
    recipe (classify's column flags, embed's options, distill's columns): it was an attribute set
    on the instance, which replace dropped. It stays out of recipe.yaml (a single run's)."""
    from bertcli.finetune.distill.run import make_task
    from bertcli.finetune.sweep import run_recipe

    run = run_recipe(load_recipe("classify"), 3e-5, 7, threads=3)
    train = _write(tmp_path / "train.csv", _rows(random.Random(0), 8))
    _, replaced = make_task("classify", run, train=train, dev=train, text_column="text")
    assert replaced is not run and replaced.finetune.classify.text_column == "text"
    assert (replaced.sweep_threads, replaced.seed, replaced.finetune.learning_rate) == (3, 7, 3e-5)
    assert "sweep_threads" not in replaced.to_yaml() and load_recipe("classify").sweep_threads is None


def test_flag_mistakes_exit_2_with_one_message(task, tmp_path):
    r = run_cli(*_classify(task, tmp_path / "o", "--seeds", "1,x"), cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, "--seeds '1,x' is neither a count nor a comma list")
    r = run_cli(*_classify(task, tmp_path / "o", "--lr", "1e-3,0"), cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, "--lr")
    r = run_cli("finetune", "embed", "-c", task / "ckpt", "--train", task / "train.csv", "--lr", "1e-3,2e-3",
                "-o", tmp_path / "e", cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, "has no --dev to choose one on")
    r = run_cli(*_classify(task, tmp_path / "o", "--resume"), cwd=tmp_path, env=ONE_THREAD)  # nothing there: starts
    assert r.rc == 0, r.output
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("mine")
    r = run_cli(*_classify(task, tmp_path / "plain", "--resume"), cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, "holds no sweep")
    assert not (tmp_path / "o" / "o").exists() and not (tmp_path / "e").exists()


# ------------------------------------------------------------------------------------ end to end
def test_one_seed_one_rate_is_todays_run(task, tmp_path):
    """Without --seeds and with one --lr the output is today's (no sub-folders); a sweep of that
    one seed and rate writes exactly that results.json (timings aside) into seed-42/, and keeps
    the same weights at the top of its --out."""
    plain, swept = tmp_path / "plain", tmp_path / "swept"
    r = run_cli(*_classify(task, plain, "--lr", "1e-2"), cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert not any(p.is_dir() and p.name.startswith(("seed-", "lr-")) for p in plain.iterdir())
    assert "sweep" not in _json(plain / "results.json")
    r = run_cli(*_classify(task, swept, "--lr", "1e-2", "--seeds", "1"), cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert (_timeless(_json(swept / "seed-42" / "results.json"), swept / "seed-42")
            == _timeless(_json(plain / "results.json"), plain))
    summary = _json(swept / "results.json")["sweep"]
    entry = summary["tasks"]["classify"]
    assert summary["seeds"] == [42] and summary["learning_rates"] == [1e-2] and summary["statistic"] == "median"
    assert entry["kept"]["dir"] == "seed-42" and entry["runs"][0]["status"] == "ok"
    assert (swept / "model.safetensors").read_bytes() == (plain / "model.safetensors").read_bytes()


def test_killed_sweep_resumes_with_the_uninterrupted_figures(task, tmp_path):
    """2 rates x 2 seeds: killed (SIGTERM) before its third run, then --resume: the two finished
    runs are not run again (their files untouched), an interrupted run's folder (results.json
    with `interrupted`) starts again, and every figure equals an uninterrupted sweep's. Weights
    stay only with each rate's best run; the top of --out holds the chosen rate's best. Before
    any work, one line states the runs and the optimizer steps (each run's count is the one it
    then takes: 64 examples / batch 8 x 3 epochs), and on --resume the runs already done."""
    grid = ("--lr", "1e-3,1e-2", "--seeds", "2")
    full, cut = tmp_path / "full", tmp_path / "cut"
    r = run_cli(*_classify(task, full, *grid), cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    line = _plan_line(r.output)
    assert line.startswith("sweep: 4 runs (2 rates") and "finished earlier" not in line, line
    assert "about 24 optimizer steps each (64 training examples), about 96 in all" in line, line
    assert r.output.index(line) < r.output.index("classify run 1/4")
    runs = _json(full / "results.json")["sweep"]["tasks"]["classify"]["runs"]
    assert [_json(full / run["dir"] / "results.json")["steps"] for run in runs] == [24] * 4
    proc = popen_cli(*_classify(task, cut, *grid), cwd=tmp_path, pause="sweep-classify-run-3", env=ONE_THREAD)
    wait_paused(proc)
    os.killpg(proc.pid, signal.SIGTERM)
    assert finish(proc).rc != 0
    first = cut / "lr-0.001" / "seed-42" / "results.json"
    before = {p: p.stat().st_mtime_ns for p in (first, cut / "lr-0.001" / "seed-43" / "results.json")}
    assert not (cut / "lr-0.01").exists() and not (cut / "results.json").exists()
    r = run_cli(*_classify(task, cut, *grid), cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, "already holds an earlier result")                 # without --resume: refused
    r = run_cli(*_classify(task, cut, *grid, "--resume"), cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert r.output.count("finished earlier, kept") == 2
    assert _plan_line(r.output).endswith("about 96 in all; 2 finished earlier (--resume), 2 to run: about 48 steps")
    assert {p: p.stat().st_mtime_ns for p in before} == before
    a, b = _json(full / "results.json")["sweep"], _json(cut / "results.json")["sweep"]
    assert a["threads"] == b["threads"] == 1
    assert a == b
    for run in a["tasks"]["classify"]["runs"]:
        assert (_timeless(_json(full / run["dir"] / "results.json"), full)
                == _timeless(_json(cut / run["dir"] / "results.json"), cut))
    entry = b["tasks"]["classify"]
    assert entry["chosen_lr"] == 1e-2 and entry["by_lr"]["0.001"]["failed"]["chance"] == 2
    with_weights = sorted(run["dir"] for run in entry["runs"] if (cut / run["dir"] / "model.safetensors").exists())
    assert with_weights == [entry["kept"]["dir"]]            # the 1e-3 runs are at chance: no best, no weights
    assert (cut / "model.safetensors").read_bytes() == (cut / entry["kept"]["dir"] / "model.safetensors").read_bytes()

    # a run whose results.json says it was interrupted is run again from its start
    last = cut / "lr-0.01" / "seed-43" / "results.json"
    marked = {**_json(last), "interrupted": {"signal": "SIGTERM", "step": 5, "total_steps": 24}}
    last.write_text(json.dumps(marked))
    r = run_cli(*_classify(task, cut, *grid, "--resume"), cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0 and r.output.count("finished earlier, kept") == 3, r.output
    assert _plan_line(r.output).endswith("3 finished earlier (--resume), 1 to run: about 24 steps")
    r = run_cli(*_classify(task, cut, *grid, "--resume"), cwd=tmp_path, env=ONE_THREAD)   # nothing left
    assert r.rc == 0 and _plan_line(r.output).endswith("; all 4 finished earlier (--resume), none to run"), r.output
    assert "interrupted" not in _json(last)
    assert _json(cut / "results.json")["sweep"] == a


def test_diverged_run_is_counted_and_the_sweep_goes_on(task, tmp_path, monkeypatch):
    """A run that diverges (errors.Diverged, raised by the engine: here by its fit at lr 5, since
    every rate above 10 is refused before work and a tiny model does not reliably diverge below)
    is recorded as diverged, 1 of 1, and cannot be chosen; the next rate runs and is chosen."""
    from bertcli import api
    from bertcli.config.options import SweepArgs
    from bertcli.core.errors import Diverged
    from bertcli.finetune import engine

    real_fit = engine.fit

    def fit(model, ft_task, *a, **kw):
        if ft_task.hyper.learning_rate == 5.0:
            raise Diverged("training diverged at learning rate 5 (a test's stand-in)")
        return real_fit(model, ft_task, *a, **kw)

    monkeypatch.setattr(engine, "fit", fit)
    options = dict(train=task / "train.csv", dev=task / "dev.csv", test=task / "test.csv")
    overrides = ["finetune.epochs=3", "finetune.max_seq_length=16", "finetune.batch_size=8", "finetune.dropout=0",
                 "finetune.threads=1"]
    out = tmp_path / "o"
    api.finetune("classify", task / "ckpt", out=out, overrides=overrides, sweep=SweepArgs("1", [5.0, 1e-2]), **options)
    entry = _json(out / "results.json")["sweep"]["tasks"]["classify"]
    assert entry["by_lr"]["5.0"]["failed"] == {"diverged": 1, "chance": 0}
    assert entry["runs"][0]["status"] == "diverged" and entry["runs"][0]["score"] is None
    assert entry["chosen_lr"] == 1e-2 and entry["kept"]["dir"] == "lr-0.01/seed-42"
    assert "diverged" in _json(out / "lr-5.0" / "seed-42" / "results.json")

    # --force replaces that sweep by another (only what bertcli's markers list goes)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="already holds an earlier result"):
        api.finetune("classify", task / "ckpt", out=out, overrides=overrides, sweep=SweepArgs("1", [5.0, 6.0]), **options)
    api.finetune("classify", task / "ckpt", out=out, overrides=overrides, sweep=SweepArgs("1", [5.0, 6.0]), force=True,
                 **options)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "lr-5.0", "lr-6.0", "notes.txt", "results.json", "sweep.json"]
    entry = _json(out / "results.json")["sweep"]["tasks"]["classify"]
    assert entry["by_lr"]["5.0"]["failed"]["diverged"] == 1 and entry["runs"][0]["status"] == "diverged"


def test_distill_takes_the_shared_flags_and_seeds(task, tmp_path):
    """`distill` gains --lr, --epochs, --seed ... and sweeps seeds like every fine-tuning command."""
    teacher = tmp_path / "teacher"
    r = run_cli(*_classify(task, teacher, "--lr", "1e-2"), cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    out = tmp_path / "student"
    r = run_cli("distill", "-c", teacher, "--teacher-task", "classify", "--train", task / "train.csv", "--dev", task / "dev.csv",
                "-o", out, "--student-layers", "1", "--epochs", "2", "--max-seq-length", "16", "--lr", "3e-3", "--seeds", "5,9",
                cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert "sweep: 2 runs (1 rate x 2 seeds 5, 9)" in r.output                 # 64 examples / batch 32 x 2 epochs
    assert _plan_line(r.output).endswith("about 4 optimizer steps each (64 training examples), about 8 in all")
    summary = _json(out / "results.json")["sweep"]
    assert summary["command"] == "distill" and summary["seeds"] == [5, 9]
    for run in summary["tasks"]["classify"]["runs"]:
        res = _json(out / run["dir"] / "results.json")
        assert res["seed"] == run["seed"] and res["hyperparameters"]["epochs"] == 2 and "distill" in res
        assert res["hyperparameters"]["learning_rate"] == 3e-3


def test_compare_reads_two_real_sweeps(task, tmp_path):
    """The contract between the two halves of judging an encoder: `bertcli compare` reads what
    the sweep wrote (not a hand-made summary), and its cells and test are those of the chosen
    rate's per-seed scores: the median, and Welch's t-test equal to scipy's."""
    from scipy import stats as sps

    outs = [tmp_path / "first", tmp_path / "other"]
    for out, seeds in zip(outs, ("3", "7,8,9")):        # the same checkpoint: other seeds stand in for another one
        r = run_cli(*_classify(task, out, "--lr", "1e-2", "--seeds", seeds), cwd=tmp_path, env=ONE_THREAD)
        assert r.rc == 0, r.output
    r = run_cli("compare", *outs, "--json", cwd=tmp_path)
    assert r.rc == 0, r.output
    card = json.loads(r.stdout)["compare"]
    scores = []
    for out in outs:
        entry = _json(out / "results.json")["sweep"]["tasks"]["classify"]
        scores.append([run["score"] for run in entry["runs"] if run["status"] == "ok"])
    assert min(len(s) for s in scores) >= 2           # a run at chance is left out by both, and counted
    (task_card,) = card["tasks"]
    names = [c["name"] for c in card["columns"]]
    score_row = task_card["rows"][0]
    for name, values in zip(names, scores):
        assert score_row["cells"][name]["median"] == pytest.approx(statistics.median(values))
    (pair,) = task_card["pairs"]
    if statistics.pvariance(scores[0]) + statistics.pvariance(scores[1]) == 0:
        assert pair["p"] is None and "variance" in pair["reason"]
    else:
        ref = sps.ttest_ind(scores[0], scores[1], equal_var=False)
        assert pair["p"] == pytest.approx(float(ref.pvalue), rel=1e-9)
