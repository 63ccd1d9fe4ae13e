"""Fine-tuning summaries as `bertcli compare` reads them, written without any training: a
sweep's top-level results.json (its "sweep" object, the contract the sweep writes) and one plain
run's results.json (bertcli.finetune.engine.run_task's fields)."""

from __future__ import annotations

import json
from pathlib import Path

from bertcli.core.stats import summarize


def write_sweep(out: Path, checkpoint: str, tasks: dict[str, dict[float, list]], metric: str = "accuracy",
                command: str = "classify", chosen: dict[str, float] | None = None, glue: float | None = None,
                from_mnli: tuple[str, ...] = (), splits: tuple[str, ...] = ("dev",), first_seed: int = 42) -> Path:
    """A sweep's top-level results.json as the sweep contract writes it. `tasks`: task -> lr ->
    one entry per seed: a score, ("chance", score) or None (diverged). Each ok run's dev block
    holds the score as `metric` and a second metric (`f1`, or `precision` when `metric` is f1) =
    score - 0.02, on every split."""
    n = max(len(v) for lrs in tasks.values() for v in lrs.values())
    second = "f1" if metric != "f1" else "precision"
    seeds = list(range(first_seed, first_seed + n))
    block = {}
    for task, lrs in tasks.items():
        runs, by_lr = [], {}
        for lr, entries in lrs.items():
            for seed, entry in zip(seeds, entries):
                status, score = ("diverged", None) if entry is None else \
                    entry if isinstance(entry, tuple) else ("ok", entry)
                dev = {} if score is None else {s: {metric: score, second: round(score - 0.02, 6)} for s in splits}
                runs.append({"lr": lr, "seed": seed, "dir": f"lr-{lr:g}/seed-{seed}", "status": status,
                             "score": score, "dev": dev, "test": {}})
            ok = [r for r in runs if r["lr"] == lr and r["status"] == "ok"]
            by_lr[f"{lr:g}"] = {"n": len(entries), "failed": {"diverged": sum(e is None for e in entries),
                                                             "chance": sum(isinstance(e, tuple) for e in entries)},
                                "score": summarize([r["score"] for r in ok]),
                                "dev": {s: {m: summarize([r["dev"][s][m] for r in ok]) for m in (metric, second)}
                                        for s in splits}, "test": {}}
        lr = (chosen or {}).get(task, next(iter(lrs)))
        if not any(r["status"] == "ok" for r in runs):
            lr = None                                      # every run failed: no rate can be chosen
        kept = next((r for r in runs if r["lr"] == lr and r["status"] == "ok"), None)
        block[task] = {"score": metric, "runs": runs, "by_lr": by_lr, "chosen_lr": lr,
                       "kept": kept and {k: kept[k] for k in ("lr", "seed", "dir")}, "from_mnli": task in from_mnli}
    sweep = {"version": 1, "command": command, "checkpoint": checkpoint, "seeds": seeds,
             "learning_rates": list(next(iter(tasks.values()))), "threads": 1, "statistic": "median", "tasks": block}
    if glue is not None:
        sweep["glue"] = {"dev_average": glue, "all_task_average": glue, "rule": "the mean over the 8 tasks without "
                         "WNLI; a two-metric task counts the mean of both"}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"sweep": sweep}, indent=2), encoding="utf-8")
    return out


def write_single(out: Path, checkpoint: str, task: str, score: float, seed: int = 42) -> Path:
    """One plain run's results.json (bertcli.finetune.engine.run_task's fields)."""
    out.mkdir(parents=True, exist_ok=True)
    results = {"task": task, "head": "sequence", "dev": {"dev": {"accuracy": score, "f1": score - 0.02}},
               "score": score, "best_epoch": 2, "history": [], "hyperparameters": {"learning_rate": 5e-05},
               "seed": seed, "checkpoint": checkpoint, "init": "pretrained", "fresh_parameters": [],
               "data": {"train": 100}, "steps": 30, "train_seconds": 1.0, "test_predictions": [],
               "learning_rate": {"value": 5e-05, "source": "set", "reason": ""}, "select": "best"}
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    return out
