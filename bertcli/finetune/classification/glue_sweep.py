"""The GLUE protocol of the papers: `bertcli finetune glue --seeds N --lr a,b,c [--from-mnli]`.

Each task is its own sweep (bertcli/finetune/sweep.py) into `out/<task>/`; the table the papers
print follows: one cell per task in its metrics (MCC for CoLA, F1/accuracy for MRPC and QQP,
Pearson/Spearman for STS-B, accuracy for the rest, MNLI matched/mismatched), each cell the
median over the seeds of the chosen rate, then the GLUE-dev average:

    the mean over the 8 tasks without WNLI, a task with two metrics counting the mean of both,
    taken over the cells (the medians), not over the runs.

The mean over every task run, WNLI included (what `finetune glue` reports without seeds), stays
beside it as the all-task average. `--from-mnli` (RoBERTa, MosaicBERT, ModernBERT) starts RTE,
MRPC and STS-B from the encoder of the chosen rate's best MNLI run, fine-tuned first (and kept
from an earlier sweep in --out with --resume); their cells are marked, since BERT's protocol
starts every task from the pretrained checkpoint.

Layout: out/<task>/<lr-*/>seed-*/ the runs; out/<task>/ the kept run's model and results.json;
out/submissions/<task>/<run>/ every run's test predictions; out/submission/ the kept runs'.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertcli.core import console
from bertcli.finetune import runner, sweep_summary
from bertcli.finetune import sweep as sweeps
from bertcli.finetune.classification import metrics
from bertcli.finetune.classification.glue import GLUE_ORDER, TASKS, TaskSpec, resolve_hyper, task_overrides
from bertcli.finetune.classification.glue_data import load_task
from bertcli.finetune.classification.glue_run import GlueTask, select_tasks
from bertcli.finetune.classification.submission import write_json

if TYPE_CHECKING:
    from bertcli.config.finetune_sections import FinetuneConfig
    from bertcli.config.recipe import Recipe

FROM_MNLI = ("rte", "mrpc", "stsb")
AVERAGE_RULE = ("GLUE-dev average: the mean over the 8 tasks without WNLI of each task's cell, a task with two "
                "metrics (MRPC, QQP F1/acc; STS-B Pearson/Spearman; MNLI m/mm) counting the mean of both; each cell "
                "the median over the seeds of the chosen rate")


def task_order(specs: list[TaskSpec], from_mnli: bool) -> list[TaskSpec]:
    """With --from-mnli, MNLI first (added when not asked for: the three tasks start from it)."""
    if not from_mnli:
        return specs
    if all(s.name != "mnli" for s in specs):
        console.log("--from-mnli: MNLI is fine-tuned first (RTE, MRPC and STS-B start from its encoder)")
    return [TASKS["mnli"]] + [s for s in specs if s.name != "mnli"]


def steps_of(spec: TaskSpec, cfg: FinetuneConfig, n_train: int) -> int:
    """About how many optimizer steps one run of the task takes (the engine's schedule)."""
    hyper = resolve_hyper(cfg, spec)
    return max(1, math.ceil(hyper.epochs * math.ceil(n_train / hyper.batch_size)))


def sweep_glue(plan: sweeps.Plan, recipe: Recipe, checkpoint: Path, out: Path, force: bool, tasks: str,
               data_dir: Path | None = None, hub: str | None = None, from_mnli: bool = False) -> dict:
    """The GLUE protocol into `out`; results.json's content ({"sweep": ... with "glue"})."""
    cfg = recipe.finetune
    task_overrides(cfg)
    runner.check_checkpoint_files(checkpoint)
    specs = task_order(select_tasks(tasks, data_dir, hub), from_mnli)
    # every task read before any trains: a broken file is found in seconds, not hours
    data = {s.name: load_task(s, data_dir, hub, bad_rows=cfg.bad_rows) for s in specs}
    sweeps.check_disk(out, checkpoint, (len(plan.rates or [None]) + 2) * len(specs))
    sweeps.start(plan, out, force)
    limit = cfg.max_train_examples
    console.log(sweeps.describe(plan, len(specs)) + "; steps per run: " + ", ".join(
        f"{s.glue_name} about {steps_of(s, cfg, min(len(data[s.name].train), limit or 1 << 62)):,}" for s in specs))
    clock = sweeps.Clock(len(plan.runs()) * len(specs))
    entries: dict[str, dict] = {}
    for spec in specs:
        start = checkpoint
        mnli = entries.get("mnli")
        marked = from_mnli and spec.name in FROM_MNLI and mnli is not None and mnli["kept"] is not None
        if marked:
            assert mnli is not None and mnli["kept"] is not None
            start = out / "mnli" / mnli["kept"]["dir"]
            console.log(f"{spec.glue_name}: starts from the MNLI run {start} (--from-mnli)")
        elif from_mnli and spec.name in FROM_MNLI:
            console.log(f"warning: {spec.glue_name} starts from {checkpoint}: no MNLI run finished to start from")

        def one_run(r: Recipe, folder: Path, spec: TaskSpec = spec, start: Path = start) -> dict:
            rel = folder.relative_to(out / spec.name).as_posix()
            task = GlueTask(spec, r.finetune, out / "submissions" / spec.name / rel, data=data[spec.name])
            return runner.finetune_task(task, r, start, folder, show=False)

        records = sweeps.sweep_runs(plan, recipe, out / spec.name, one_run, spec.glue_name, clock, top=out,
                                    also=(out / "submissions",))
        entries[spec.name] = task_entry(records, plan, marked)
    figures = glue_figures(entries)
    summary = sweeps.header(plan, entries)
    summary["sweep"]["glue"] = figures
    figures["submission"] = keep(out, entries, recipe.language)
    write_json(out / "results.json", summary)
    console.summary(table_title(plan), table_rows(entries, figures))
    console.log(f"runs in {out}; each task's kept model in {out}/<task>; submission files in {out / 'submission'} "
                "(each from its task's kept run: " + ", ".join(f"{t} {d}" for t, d in figures["submission"].items()) + ")")
    return summary


def task_entry(records: list[dict], plan: sweeps.Plan, from_mnli: bool) -> dict:
    runs = [{k: v for k, v in r.items() if k != "group"} for r in records]
    entry = sweep_summary.task_entry(runs, plan.rates, sweep_summary.score_name(runs))
    entry["from_mnli"] = from_mnli
    return entry


def keep(out: Path, entries: dict[str, dict], language: list[str] | None = None) -> dict[str, str]:
    """Each task's kept run: its model and results.json into out/<task>/, its test predictions
    into out/submission/. Returns task -> the run whose predictions are there."""
    chosen: dict[str, str] = {}
    for name, entry in entries.items():
        if entry["kept"] is None:
            continue
        rel = entry["kept"]["dir"]
        run = out / name / rel
        sweeps.keep_model(run, out / name, entry, language)
        sweeps.place(run / "results.json", out / name / "results.json")
        source = out / "submissions" / name / rel
        for f in sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else []:
            sweeps.place(f, out / "submission" / f.relative_to(source))
        chosen[name] = f"{name}/{rel}"
    return chosen


# ------------------------------------------------------------------------------------ the table
def cells(entry: dict) -> list[float] | None:
    """The task's cell: the median over the seeds of the chosen rate, per dev split and metric
    in the task's order (None: no rate chosen)."""
    key = entry.get("chosen_key")
    if key is None:
        return None
    dev = entry["by_lr"][key]["dev"]
    values = [s["median"] for metrics_ in dev.values() for s in metrics_.values()]
    return values if values and all(v is not None for v in values) else None


def glue_figures(entries: dict[str, dict]) -> dict:
    """The GLUE-dev average (8 tasks, no WNLI) and the all-task average over the cells."""
    per_task = {t: float(np.mean(c)) for t in GLUE_ORDER if t in entries and (c := cells(entries[t])) is not None}
    dev8 = [v for t, v in per_task.items() if t != "wnli"]
    return {"dev_average": float(np.mean(dev8)) if dev8 else None,
            "tasks_in_dev_average": [t for t in per_task if t != "wnli"],
            "all_task_average": float(np.mean(list(per_task.values()))) if per_task else None,
            "tasks_in_all_task_average": list(per_task), "statistic": sweep_summary.STATISTIC,
            "rule": AVERAGE_RULE + "; the all-task average is the mean over every task run, WNLI included "
                    "(finetune glue's average without seeds)",
            "from_mnli": [t for t in per_task if entries[t]["from_mnli"]]}


def table_title(plan: sweeps.Plan) -> str:
    n = len(plan.seeds)
    return (f"GLUE dev (x100), selected on dev: each cell the median over {n} seed{'s' if n > 1 else ''} of the "
            "rate chosen by that median")


def table_rows(entries: dict[str, dict], figures: dict) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for t in [t for t in GLUE_ORDER if t in entries]:
        spec, entry, c = TASKS[t], entries[t], cells(entries[t])
        dev_names = list(next(iter(entry["by_lr"].values()))["dev"]) or None
        header = metrics.metric_header(spec, dev_names if dev_names and len(dev_names) > 1 else None)
        mark = " (from MNLI)" if entry["from_mnli"] else ""
        value = "no rate chosen: every rate's median is a failed run" if c is None else "/".join(f"{100 * v:.1f}" for v in c)
        failed = sum(g["failed"]["diverged"] + g["failed"]["chance"] for g in entry["by_lr"].values())
        lr = entry["chosen_lr"]
        rows.append((f"{spec.glue_name} {header}{mark}", value + (f"  (lr {lr:g})" if lr is not None else "")
                     + (f"  {failed}/{len(entry['runs'])} runs failed" if failed else "")))
    n8 = len(figures["tasks_in_dev_average"])
    if figures["dev_average"] is not None:
        label = "GLUE-dev average (8 tasks, no WNLI)" if n8 == 8 else f"GLUE-dev average over {n8} of its 8 tasks"
        rows.append((label, f"{100 * figures['dev_average']:.1f}"))
    if figures["all_task_average"] is not None and len(entries) > 1:
        rows.append((f"all-task average ({len(figures['tasks_in_all_task_average'])} tasks)",
                     f"{100 * figures['all_task_average']:.1f}"))
    return rows
