"""`bertcli compare` and the statistics under it (bertcli.core.stats).

- welch(): t, df and p equal `scipy.stats.ttest_ind(equal_var=False)` over 4,000 random cases
  (n from 2, unequal n, variance ratios 1e-12..1e12, |t| past 1e6): relative error below 1e-9
  (bertcli's t distribution is its own continued fraction; the errors seen are ~1e-13).
- summarize() equals `statistics` and numpy (sd ddof 1, the median of an even n).
- holm() equals known values and rejects exactly what Holm's step-down procedure rejects.
- The scorecard through the real CLI, on summaries written by the fixture builder below (the
  sweep's results.json contract): the table, --markdown and --json, the not-testable cases, the
  power warning, a difference within the seeds' spread, GLUE's average row, and each input
  mistake as one message, exit 2, no file changed.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import numpy as np
import pytest
from compare_fixtures import write_single, write_sweep
from conftest import run_cli
from scipy import stats as sps

from bertcli.core.stats import holm, summarize, welch

# --------------------------------------------------------------------------------- statistics
REL = 1e-9


def _cases(count: int, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(count):
        na, nb = rng.choice([2, 2, 3, 3, 5, 10, 40]), rng.choice([2, 3, 4, 5, 7, 20, 100])
        sa = 10 ** rng.uniform(-4, 2)
        sb = sa * 10 ** rng.uniform(-6, 6)                       # variance ratios up to 1e12 either way
        shift = rng.choice([0.0, 1e-3, 0.1, 1.0, 10.0, 1e4, 1e7]) * rng.choice([sa, sb])
        yield [rng.gauss(0, sa) for _ in range(na)], [rng.gauss(shift, sb) for _ in range(nb)]


def test_welch_equals_scipy_over_many_cases():
    largest_t = 0.0
    for a, b in _cases(4000):
        ours, ref = welch(a, b), sps.ttest_ind(a, b, equal_var=False)
        assert ours.p is not None and ours.reason is None
        assert ours.t == pytest.approx(float(ref.statistic), rel=REL)
        assert ours.df == pytest.approx(float(ref.df), rel=REL)
        assert ours.p == pytest.approx(float(ref.pvalue), rel=REL, abs=1e-300)
        assert ours.diff == pytest.approx(statistics.fmean(a) - statistics.fmean(b), rel=1e-12, abs=1e-15)
        largest_t = max(largest_t, abs(ours.t))
    assert largest_t > 1e6                                     # the far tail was exercised


@pytest.mark.filterwarnings("ignore:Precision loss occurred:RuntimeWarning")   # scipy, on the arm without variance
@pytest.mark.parametrize("a,b", [
    ([0.81, 0.79, 0.80], [0.70, 0.72]),                        # unequal n, the smallest testable
    ([0.5, 0.5, 0.5], [0.6, 0.61, 0.59]),                      # one arm without variance: still testable
    ([1.0, 1.0 + 1e-12], [0.0, 1e-12]),                        # |t| ~ 1e12: p far below 1e-100
    ([0.61, 0.61, 0.62], [0.61, 0.62, 0.61]),                  # no difference: p = 1
])
def test_welch_equals_scipy_at_the_edges(a, b):
    ours, ref = welch(a, b), sps.ttest_ind(a, b, equal_var=False)
    assert ours.t == pytest.approx(float(ref.statistic), rel=REL)
    assert ours.p == pytest.approx(float(ref.pvalue), rel=REL, abs=1e-300)


@pytest.mark.parametrize("scale", [1e-150, 1e150])
def test_welch_does_not_depend_on_the_unit(scale):
    """Rescaling every figure changes neither t, df nor p, even where the squared variances
    underflow (at 1e-150 scipy's df collapses to 1; bertcli's stays 2.88)."""
    a, b = [1.0, 2.0, 3.0], [0.0, 1.0]
    ref, scaled = welch(a, b), welch([x * scale for x in a], [x * scale for x in b])
    assert scaled.t == pytest.approx(ref.t, rel=1e-12)
    assert scaled.df == pytest.approx(ref.df, rel=1e-12)
    assert scaled.p == pytest.approx(ref.p, rel=1e-12)
    assert ref.df == pytest.approx(float(sps.ttest_ind(a, b, equal_var=False).df), rel=REL)


@pytest.mark.parametrize("a,b,reason", [
    ([0.8], [0.7, 0.71], "n = 1 and 2"),
    ([0.8, 0.81], [], "n = 2 and 0"),
    ([0.5, 0.5, 0.5], [0.5, 0.5], "no variance in either arm"),  # WNLI's majority class
    ([0.56, 0.56], [0.43, 0.43], "no variance in either arm"),
])
def test_welch_is_not_run_without_two_values_per_arm_or_any_variance(a, b, reason):
    w = welch(a, b)
    assert w.p is None and w.t is None and w.df is None
    assert reason in w.reason
    assert w.diff == (pytest.approx(statistics.fmean(a) - statistics.fmean(b)) if a and b else None)


@pytest.mark.parametrize("n", range(1, 9))
def test_summarize_equals_statistics_and_numpy(n):
    xs = [random.Random(n).uniform(0.3, 0.9) for _ in range(n)]
    s = summarize(xs)
    assert s["n"] == n and s["values"] == xs
    assert s["mean"] == pytest.approx(float(np.mean(xs)), rel=1e-12)
    assert s["median"] == pytest.approx(float(np.median(xs)), rel=1e-12)   # even n: mean of the middle two
    assert s["min"] == min(xs) and s["max"] == max(xs)
    assert s["sd"] == (None if n < 2 else pytest.approx(float(np.std(xs, ddof=1)), rel=1e-12))
    if n == 4:
        mid = sorted(xs)[1:3]
        assert s["median"] == pytest.approx(sum(mid) / 2)


def test_summarize_of_nothing_is_all_none():
    assert summarize([]) == {"n": 0, "mean": None, "sd": None, "median": None, "min": None, "max": None, "values": []}


def test_holm_known_values():
    # R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") -> 0.03 0.06 0.06 0.02
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.2, 0.9]) == pytest.approx([0.4, 0.9])        # capped at 1, kept monotone
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])
    assert holm([0.04]) == [0.04] and holm([]) == []


def _step_down(ps: list[float], alpha: float) -> set[int]:
    """Holm's procedure by its definition: walk the p-values up from the smallest, rejecting
    the k-th (k from 0) while p <= alpha / (m - k); stop at the first that is not."""
    rejected = set()
    for k, i in enumerate(sorted(range(len(ps)), key=lambda i: ps[i])):
        if ps[i] > alpha / (len(ps) - k):
            break
        rejected.add(i)
    return rejected


def test_holm_rejects_what_the_step_down_procedure_rejects():
    rng = random.Random(1)
    for _ in range(500):
        ps = [rng.random() ** rng.choice([1, 3, 6]) for _ in range(rng.randint(1, 12))]
        adjusted = holm(ps)
        assert all(q >= p for p, q in zip(ps, adjusted)) and max(adjusted) <= 1.0
        for alpha in (0.001, 0.01, 0.05, 0.1, 0.5):
            assert {i for i, q in enumerate(adjusted) if q <= alpha} == _step_down(ps, alpha)


def compare_json(*args) -> dict:
    r = run_cli("compare", *args, "--json")
    assert r.rc == 0, r.stderr
    return json.loads(r.stdout)["compare"]


BASE = [0.610, 0.616, 0.627, 0.605, 0.618]
CONTINUED = [0.657, 0.654, 0.640, 0.649, 0.661]


# --------------------------------------------------------------------------------- the scorecard
def test_json_figures_and_test_equal_the_references(tmp_path):
    a = write_sweep(tmp_path / "a", "ckpt/minilm", {"tweets": {5e-5: BASE, 3e-5: [0.5, 0.5, 0.5, 0.5, 0.5]}})
    b = write_sweep(tmp_path / "b", "ckpt/continued", {"tweets": {5e-5: [0.1] * 5, 3e-5: CONTINUED}},
                    chosen={"tweets": 3e-5})
    card = compare_json(a, b)
    assert [c["name"] for c in card["columns"]] == ["minilm", "continued"]
    (task,) = card["tasks"]
    score, accuracy, f1 = task["rows"]
    assert (score["metric"], score["name"], accuracy["metric"], f1["metric"]) == ("score", "accuracy", "accuracy", "f1")
    assert score["cells"]["minilm"]["median"] == pytest.approx(statistics.median(BASE))
    assert score["cells"]["continued"]["median"] == pytest.approx(statistics.median(CONTINUED))  # the chosen lr's
    assert score["cells"]["continued"]["lr"] == 3e-5
    assert score["cells"]["minilm"]["sd"] == pytest.approx(statistics.stdev(BASE))
    assert f1["cells"]["minilm"]["median"] == pytest.approx(statistics.median(BASE) - 0.02)
    (pair,) = task["pairs"]
    ref = sps.ttest_ind(BASE, CONTINUED, equal_var=False)
    assert (pair["a"], pair["b"]) == ("minilm", "continued")
    assert pair["t"] == pytest.approx(float(ref.statistic), rel=REL)
    assert pair["p"] == pytest.approx(float(ref.pvalue), rel=REL)
    assert pair["p_adjusted"] == pair["p"] and card["tests"] == 1        # Holm over one test changes nothing
    assert pair["diff"] == pytest.approx(statistics.median(BASE) - statistics.median(CONTINUED))
    assert pair["verdict"] == "continued higher" and pair["within_spread"] is False
    assert not any("little power" in n for n in card["notes"])          # 5 seeds per arm
    assert any("holds for these checkpoints" in n for n in card["notes"])


def test_holm_over_all_pairs_and_tasks_and_uncorrected(tmp_path):
    runs = [write_sweep(tmp_path / name, f"ckpt/{name}", {"sst2": {2e-5: s1}, "rte": {2e-5: s2}})
            for name, s1, s2 in (("x", [0.90, 0.91, 0.92], [0.60, 0.66, 0.62]),
                                 ("y", [0.85, 0.86, 0.88], [0.61, 0.64, 0.65]),
                                 ("z", [0.80, 0.84, 0.83], [0.70, 0.72, 0.69]))]
    card = compare_json(*runs)
    pairs = [p for t in card["tasks"] for p in t["pairs"]]
    assert len(pairs) == 6 and card["tests"] == 6 and card["correction"] == "holm"
    assert [p["p_adjusted"] for p in pairs] == pytest.approx(holm([p["p"] for p in pairs]))
    raw = compare_json(*runs, "--no-correction")
    assert raw["correction"] == "none"
    assert [p["p_adjusted"] for t in raw["tasks"] for p in t["pairs"]] == pytest.approx([p["p"] for p in pairs])
    r = run_cli("compare", *runs)
    assert "Holm-corrected over 6 tests" in r.stdout
    assert "uncorrected (6 tests)" in run_cli("compare", *runs, "--no-correction").stdout
    assert "little power" in r.stdout                                 # 3 seeds per arm


def test_a_difference_within_the_seeds_spread_is_no_win(tmp_path):
    a = write_sweep(tmp_path / "a", "ckpt/a", {"ner": {5e-5: [0.213, 0.251, 0.247]}}, metric="f1")
    b = write_sweep(tmp_path / "b", "ckpt/b", {"ner": {5e-5: [0.358, 0.237, 0.257]}}, metric="f1")
    (pair,) = compare_json(a, b)["tasks"][0]["pairs"]
    assert pair["within_spread"] is True and pair["verdict"] == "within the seeds' spread"
    assert pair["p"] == pytest.approx(float(sps.ttest_ind([0.213, 0.251, 0.247], [0.358, 0.237, 0.257],
                                                          equal_var=False).pvalue), rel=REL)
    table = run_cli("compare", a, b).stdout
    assert "within the seeds' spread" in table and "a higher" not in table and "b higher" not in table


def test_failed_runs_are_left_out_and_counted(tmp_path):
    a = write_sweep(tmp_path / "a", "ckpt/a", {"cola": {1e-5: [0.50, None, ("chance", 0.0), 0.52]}}, metric="matthews")
    b = write_sweep(tmp_path / "b", "ckpt/b", {"cola": {1e-5: [0.40, 0.41, 0.43, 0.42]}}, metric="matthews")
    card = compare_json(a, b)
    cell = card["tasks"][0]["rows"][0]["cells"]["a"]
    assert (cell["n"], cell["runs"], cell["failed"]) == (2, 4, {"diverged": 1, "chance": 1})
    assert cell["values"] == [0.50, 0.52]
    pair = card["tasks"][0]["pairs"][0]
    assert pair["p"] == pytest.approx(float(sps.ttest_ind([0.50, 0.52], [0.40, 0.41, 0.43, 0.42],
                                                          equal_var=False).pvalue), rel=REL)
    assert "0.5100 (sd 0.0141, n 2 of 4; 0.5000-0.5200)" in run_cli("compare", a, b).stdout


def test_a_task_where_every_run_failed_has_no_figure_and_no_test(tmp_path):
    a = write_sweep(tmp_path / "a", "ckpt/a", {"cola": {1e-4: [None, ("chance", 0.0)], 1e-3: [None, None]}},
                    metric="matthews")
    b = write_sweep(tmp_path / "b", "ckpt/b", {"cola": {1e-5: [0.40, 0.43]}}, metric="matthews")
    task = compare_json(a, b)["tasks"][0]
    cell = task["rows"][0]["cells"]["a"]
    assert (cell["lr"], cell["n"], cell["runs"], cell["failed"]) == (None, 0, 4, {"diverged": 3, "chance": 1})
    assert task["pairs"][0]["p"] is None and "n = 0 and 2" in task["pairs"][0]["reason"]
    assert "no run finished ok (diverged 3, chance 1)" in run_cli("compare", a, b).stdout


def test_a_sweep_whose_median_run_ended_at_chance_has_no_figure(tmp_path):
    """The sweep never chooses a rate whose median run ended at chance, though one seed finished
    ok (a legitimate summary, written here by the sweep's own rule): compare reads it, counts
    the runs and gives no figure, since the one ok seed alone would hide the failed majority."""
    from bertcli.finetune.sweep_summary import task_entry

    runs = [{"lr": 1e-3, "seed": 42 + i, "dir": f"lr-0.001/seed-{42 + i}", "status": status, "score": score,
             "dev": {"dev": {"accuracy": score}}, "test": {}}
            for i, (status, score) in enumerate([("ok", 0.61), ("chance", 0.33), ("chance", 0.34)])]
    entry = task_entry(runs, [1e-3], "accuracy")
    assert entry["chosen_lr"] is None
    a = tmp_path / "a"
    a.mkdir()
    sweep = {"version": 1, "command": "classify", "checkpoint": "ckpt/a", "seeds": [42, 43, 44],
             "learning_rates": [1e-3], "threads": 1, "statistic": "median", "tasks": {"classify": entry}}
    (a / "results.json").write_text(json.dumps({"sweep": sweep}), encoding="utf-8")
    b = write_sweep(tmp_path / "b", "ckpt/b", {"classify": {1e-3: [0.60, 0.62, 0.64]}})
    task = compare_json(a, b)["tasks"][0]
    cell = task["rows"][0]["cells"]["a"]
    assert (cell["lr"], cell["n"], cell["runs"], cell["failed"]) == (None, 0, 3, {"diverged": 0, "chance": 2})
    assert task["pairs"][0]["p"] is None
    assert "no rate chosen: the median run failed (chance 2, ok 1)" in run_cli("compare", a, b).stdout


def test_single_runs_are_shown_but_not_testable(tmp_path):
    a = write_single(tmp_path / "a", "ckpt/a", "classify", 0.81)
    b = write_sweep(tmp_path / "b", "ckpt/b", {"classify": {5e-5: [0.8, 0.82, 0.83]}})
    card = compare_json(a, b)
    (pair,) = card["tasks"][0]["pairs"]
    assert pair["p"] is None and pair["p_adjusted"] is None and "n = 1 and 3" in pair["reason"]
    assert card["tests"] == 0
    assert card["tasks"][0]["rows"][0]["cells"]["a"]["median"] == 0.81
    table = run_cli("compare", a, b).stdout
    assert "not testable" in table and "0.8100 (n 1)" in table


def test_zero_variance_in_both_arms_is_not_testable(tmp_path):
    a = write_sweep(tmp_path / "a", "ckpt/a", {"wnli": {2e-5: [0.5634] * 3}}, command="glue")
    b = write_sweep(tmp_path / "b", "ckpt/b", {"wnli": {2e-5: [0.5634] * 3}}, command="glue")
    (pair,) = compare_json(a, b)["tasks"][0]["pairs"]
    assert pair["p"] is None and "no variance" in pair["reason"] and pair["verdict"].startswith("not testable")


def test_glue_cells_average_row_and_mnli_mark(tmp_path):
    scores = {"rte": {2e-5: [0.66, 0.68, 0.70]}, "mrpc": {2e-5: [0.85, 0.86, 0.84]}}
    a = write_sweep(tmp_path / "a", "ckpt/base", scores, command="glue", glue=0.79, from_mnli=("rte",))
    b = write_sweep(tmp_path / "b", "ckpt/other", {**scores, "sst2": {2e-5: [0.9, 0.91, 0.92]}}, command="glue",
                    glue=0.81, splits=("matched", "mismatched"))
    card = compare_json(a, b)
    assert [t["task"] for t in card["tasks"]] == ["rte", "mrpc"]
    assert card["glue_dev_average"]["values"] == {"base": 0.79, "other": 0.81}
    assert any("sst2" in n and "not compared" in n for n in card["notes"])
    md = run_cli("compare", a, b, "--markdown").stdout
    assert "| task, metric | base | other |" in md and "|---|---|---|" in md
    average = next(line for line in md.splitlines() if line.startswith("| GLUE-dev average"))
    assert average == "| GLUE-dev average (no test) | 0.7900 | 0.8100 |"
    assert "| rte score (accuracy) | 0.6800 (sd 0.0200, n 3; 0.6600-0.7000) † |" in md
    assert "accuracy (matched)" in md                      # two dev splits: each row names its split


def test_same_checkpoint_names_are_told_apart_by_directory(tmp_path):
    a = write_sweep(tmp_path / "r1", "one/ckpt", {"t": {1e-5: [0.1, 0.2]}})
    b = write_sweep(tmp_path / "r2", "two/ckpt", {"t": {1e-5: [0.1, 0.3]}})
    assert [c["name"] for c in compare_json(a, b)["columns"]] == [f"ckpt ({a})", f"ckpt ({b})"]
    c = write_sweep(tmp_path / "r3", "runs/tweets/final", {"t": {1e-5: [0.1, 0.3]}})   # a pretraining run's final
    assert [c["name"] for c in compare_json(a, c)["columns"]] == ["ckpt", "tweets-final"]


# --------------------------------------------------------------------------------- mistakes
def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("make,needle", [
    (lambda t: [t / "good", t / "missing"], "does not exist"),
    (lambda t: [t / "good", (t / "empty").mkdir() or t / "empty"], "no results.json in"),
    (lambda t: [t / "good", _file(t / "other/results.json", '{"loss": 1.0}').parent],
     "is not a bertcli fine-tuning summary"),
    (lambda t: [t / "good", _file(t / "bad/results.json", '{"sweep": {"version": 1,').parent], "not valid JSON"),
    (lambda t: [t / "good", write_sweep(t / "ner", "ckpt/b", {"ner": {1e-5: [0.1, 0.2]}})], "no task in common"),
    (lambda t: [t / "good", t / "good"], "is given twice"),
    (lambda t: [t / "good"], "at least two run directories"),
    (lambda t: [t / "good", _file(t / "nulls/results.json", json.dumps(_damaged())).parent],
     "field 'score' is None, not a finite number"),
])
def test_input_mistakes_are_one_message_and_change_nothing(tmp_path, make, needle):
    write_sweep(tmp_path / "good", "ckpt/a", {"rte": {1e-5: [0.6, 0.7]}})
    dirs = make(tmp_path)
    before = _tree(tmp_path)
    r = run_cli("compare", *dirs)
    assert r.rc == 2 and "error:" in r.stderr and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert _tree(tmp_path) == before


def _file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _damaged() -> dict:
    """A sweep summary whose ok run lost its score (null)."""
    return {"sweep": {"version": 1, "command": "classify", "checkpoint": "c", "seeds": [1, 2], "learning_rates": [1e-5],
                      "threads": 1, "statistic": "median",
                      "tasks": {"rte": {"score": "accuracy", "chosen_lr": 1e-5, "from_mnli": False, "runs": [
                          {"lr": 1e-5, "seed": 1, "status": "ok", "score": None, "dev": {}}]}}}}
