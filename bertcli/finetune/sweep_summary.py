"""The figures of a seed / learning-rate sweep, from its runs' results.json (pure: no torch).

    task_entry(runs)      per rate and per metric the statistics over the seeds
                          (bertcli.core.stats.summarize), the failed runs, the chosen rate and
                          the run kept
    choose_rate(groups)   the rule: the median over seeds of the dev score; a diverged or
                          chance-level run ranks below every finished one, so that failures
                          cannot make their rate the chosen one; ties go to the smaller rate
    rows(entry)           the printed table

A run is one record: {"lr", "seed", "dir", "status": ok | diverged | chance, "score", "dev",
"test"}; "score" is the task's own score() of the kept epoch (what best-epoch selection uses),
None for a diverged run.
"""

from __future__ import annotations

import math
import statistics

from bertcli.core.stats import summarize

RULE = ("median over seeds of the dev score; ties go to the smaller rate; a diverged or chance-level run ranks "
        "below every finished one, so a rate whose median is such a run is never chosen")
STATISTIC = "median"


def rate_key(lr: float | None) -> str:
    """by_lr's key: the rate as Python writes it (5e-05), or `recipe` when no run told it."""
    return "recipe" if lr is None else repr(float(lr))


def status_of(results: dict) -> str:
    """ok, diverged (training raised Diverged: the sweep's record) or chance (the engine's
    chance-level finding)."""
    if "diverged" in results:
        return "diverged"
    return "chance" if results.get("chance") else "ok"


def run_record(lr: float | None, seed: int, rel: str, results: dict) -> dict:
    """One run's line of the summary. `lr`: the grid's rate, or None (the recipe's): then the
    rate the run trained with, as its results.json records it."""
    status = status_of(results)
    if lr is None and status != "diverged":
        lr = float(results["hyperparameters"]["learning_rate"])
    return {"lr": lr, "seed": seed, "dir": rel, "status": status,
            "score": None if status == "diverged" else float(results["score"]),
            "dev": results.get("dev", {}) if status != "diverged" else {},
            "test": results.get("test", {}) if status != "diverged" else {}}


def score_name(results: list[dict]) -> str:
    """What the task's score() is, read off its runs: the first interpretation that every run's
    score equals (to rounding): the main (first) metric of its dev split (of each, averaged),
    the mean of all its metrics, or one named metric. "score" when no run tells."""
    runs = [r for r in results if r.get("dev") and r.get("score") is not None]
    if not runs:
        return "score"
    dev = runs[0]["dev"]
    splits = list(dev)
    one = len(splits) == 1

    def label(pairs: list[tuple[str, str]]) -> str:
        names = [m if one else f"{s} {m}" for s, m in pairs]
        return names[0] if len(names) == 1 else "mean of " + ", ".join(names)

    firsts = [(s, next(iter(dev[s]))) for s in splits]
    every = [(s, m) for s in splits for m in dev[s]]
    candidates = [firsts, every] + [[(s, m)] for s, m in every]
    for pairs in candidates:
        if all(_close(statistics.fmean([r["dev"][s][m] for s, m in pairs]), r["score"]) for r in runs
               if all(m in r["dev"].get(s, {}) for s, m in pairs)):
            return label(pairs)
    return "score"


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _metric_stats(runs: list[dict], block: str) -> dict:
    """{split: {metric: summarize(values over the runs)}} of the runs' `block` (dev or test)."""
    out: dict[str, dict[str, None]] = {}           # splits and metrics in the order first seen
    for r in runs:
        for split, metrics in r[block].items():
            for metric in metrics:
                out.setdefault(split, {})[metric] = None
    return {split: {m: summarize([r[block][split][m] for r in runs if m in r[block].get(split, {})]) for m in metrics}
            for split, metrics in out.items()}


def selection_median(runs: list[dict]) -> float:
    """The rule's statistic of one rate: the median of the dev scores, a failed run counting as
    -inf (below every finished run). -inf when failures make up the median."""
    return statistics.median([r["score"] if r["status"] == "ok" else -math.inf for r in runs])


def group_stats(runs: list[dict]) -> dict:
    """by_lr's entry of one rate: n (all runs), the failed ones by kind, and the statistics of
    the finished (ok) runs."""
    ok = [r for r in runs if r["status"] == "ok"]
    median = selection_median(runs) if runs else -math.inf
    return {"n": len(runs), "failed": {"diverged": sum(r["status"] == "diverged" for r in runs),
                                       "chance": sum(r["status"] == "chance" for r in runs)},
            "score": summarize([r["score"] for r in ok]), "dev": _metric_stats(ok, "dev"),
            "test": _metric_stats(ok, "test"),
            "selection_median": median if math.isfinite(median) else None}


def choose_rate(groups: dict[str, tuple[float | None, list[dict]]]) -> str | None:
    """The key of the chosen rate (None when every rate's median is a failed run): the highest
    selection median; ties go to the smaller rate."""
    eligible = [(selection_median(runs), lr, key) for key, (lr, runs) in groups.items()
                if runs and math.isfinite(selection_median(runs))]
    if not eligible:
        return None
    best = max(m for m, _, _ in eligible)
    return min((lr if lr is not None else math.inf, key) for m, lr, key in eligible if m == best)[1]


def kept_run(runs: list[dict]) -> dict | None:
    """The best dev run of a rate (the first one in sweep order on a tie): its weights are kept."""
    ok = [r for r in runs if r["status"] == "ok"]
    if not ok:
        return None
    best = max(r["score"] for r in ok)
    return next(r for r in ok if r["score"] == best)


def task_entry(runs: list[dict], grid: list[float] | None, score: str) -> dict:
    """The summary of one task's sweep. `grid`: the --lr rates in order (None: the recipe's
    one rate; its runs are grouped together whatever they resolved to); `score`: what the
    task's score is (score_name)."""
    groups: dict[str, tuple[float | None, list[dict]]] = {}
    if grid is None:
        lr = next((r["lr"] for r in runs if r["lr"] is not None), None)
        groups[rate_key(lr)] = (lr, runs)
    else:
        for rate in grid:
            groups[rate_key(rate)] = (rate, [r for r in runs if r["lr"] == rate])
    chosen = choose_rate(groups)
    kept = kept_run(groups[chosen][1]) if chosen is not None else None
    return {"score": score, "runs": runs, "by_lr": {key: group_stats(rs) for key, (_, rs) in groups.items()},
            "learning_rates": [lr for lr, _ in groups.values()],
            "chosen_lr": None if chosen is None else groups[chosen][0], "chosen_key": chosen, "rule": RULE,
            "kept": None if kept is None else {"lr": kept["lr"], "seed": kept["seed"], "dir": kept["dir"],
                                               "score": kept["score"]},
            "from_mnli": False}


# ------------------------------------------------------------------------------------ printing
def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def stats_cell(s: dict) -> str:
    """`81.2 ± 1.3, median 81.0, 79.9-82.5, n 3` (x100); sd `-` for n < 2."""
    if not s["n"]:
        return "no finished run"
    return (f"{_pct(s['mean'])} ± {_pct(s['sd'])}, median {_pct(s['median'])}, "
            f"{_pct(s['min'])}-{_pct(s['max'])}, n {s['n']}")


def rows(name: str, entry: dict) -> list[tuple[str, str]]:
    """The table of one task: per rate the score and each dev metric (selected on dev), the
    failed runs, the chosen rate and its test figures, the run kept."""
    out: list[tuple[str, str]] = []
    for key, g in entry["by_lr"].items():
        k = g["failed"]["diverged"] + g["failed"]["chance"]
        what = f"{k}/{g['n']} failed" + (f" ({g['failed']['diverged']} diverged, {g['failed']['chance']} at chance)"
                                          if k else "")
        star = "  <- chosen" if key == entry["chosen_key"] else ""
        out.append((f"lr {key}: {entry['score']} (dev)", f"{stats_cell(g['score'])}; {what}{star}"))
        for split, metrics in g["dev"].items():
            for metric, s in metrics.items():
                out.append((f"  dev {split} {metric}", stats_cell(s)))
    chosen = entry["chosen_key"]
    out.append(("chosen lr", "none: every rate's median is a failed run" if chosen is None
                else f"{chosen} ({STATISTIC} over seeds of the dev score; dev figures are selected on dev: "
                     "best epoch x best rate)"))
    if chosen is not None:
        for split, metrics in entry["by_lr"][chosen]["test"].items():
            for metric, s in metrics.items():
                out.append((f"test {split} {metric} (lr {chosen})", stats_cell(s)))
    if entry["kept"] is not None:
        out.append(("model kept", f"{entry['kept']['dir']} (the best dev run of lr {chosen}: {entry['score']} "
                                  f"{_pct(entry['kept']['score'])})"))
    return [(f"{name} {k}" if not k.startswith(" ") else k, v) for k, v in out]
