"""Seeds and learning-rate grids: every fine-tuning command run over (rate, seed) pairs.

    bertcli finetune classify ... --seeds 3 --lr 5e-5,3e-5 --out runs/x
        runs/x/sweep.json                     the plan (seeds, rates, threads), written first
        runs/x/lr-5e-05/seed-42/ ...          one ordinary fine-tuning run each: results.json and
                                              predictions always; weights only while the run is
                                              the best of its rate so far
        runs/x/results.json                   {"sweep": ...} (sweep_summary), written last
        runs/x/model.safetensors, ...         the best dev run of the chosen rate (hard links)

One rate: no lr-* level (runs/x/seed-42/). The runs go in turn, each through the command's own
`run` (so a sweep's run is exactly the single run of that seed and rate), with the thread count
chosen once and recorded, so that `--resume` (which keeps every run whose results.json has no
`interrupted` entry and starts the others again) gives the figures of an uninterrupted sweep. A
run that diverges (errors.Diverged) or ends at chance is counted, and the sweep goes on.

The layer above the runner: it knows nothing of any task; `one_run(recipe, folder)` trains.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bertcli.config.options import SweepArgs, parse_seeds
from bertcli.config.recipe import Recipe
from bertcli.core import console
from bertcli.core.errors import Diverged, UserError
from bertcli.core.fs import building, write_text_atomic
from bertcli.core.locks import run_lock
from bertcli.core.machine import choose_threads
from bertcli.core.outputs import TEMP_TAG, claim, drop_files, listed_files
from bertcli.core.testhooks import pause_point
from bertcli.finetune import ddp, sweep_summary, tracking
from bertcli.finetune.classification.submission import write_json
from bertcli.model.card import CARD, card_wanted, finetune_card
from bertcli.train.trackers import TRACKER_FILES

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe

STATE = "sweep.json"
VERSION = 1
RECORDS = ("results.json", "recipe.yaml")        # what every run folder keeps besides its predictions


@dataclass(frozen=True)
class Plan:
    """What a sweep runs: each rate (None: the recipe's) with each seed, at `threads` threads."""

    command: str
    checkpoint: str
    seeds: list[int]
    rates: list[float] | None
    threads: int

    def runs(self) -> list[tuple[float | None, int, str]]:
        """(rate, seed, folder relative to the sweep's --out), rates outer, seeds inner."""
        rates: list[float | None] = list(self.rates) if self.rates else [None]
        level = len(rates) > 1
        return [(lr, s, (f"lr-{sweep_summary.rate_key(lr)}/" if level else "") + f"seed-{s}")
                for lr in rates for s in self.seeds]

    def record(self) -> dict:
        return {"version": VERSION, **dataclasses.asdict(self)}


def is_sweep(out: Path) -> bool:
    return (Path(out) / STATE).is_file()


def read_plan(out: Path) -> Plan:
    path = Path(out) / STATE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        plan = Plan(**{f.name: data[f.name] for f in dataclasses.fields(Plan)})
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"the sweep's plan {path} cannot be read ({e})", where=str(path),
                        fix="run the sweep again without --resume (with --force to replace it)") from None
    if data.get("version") != VERSION or not plan.seeds:
        raise UserError(f"{path} is not a sweep plan of this bertcli (version {data.get('version')!r})", where=str(path),
                        fix="run the sweep again without --resume (with --force to replace it)")
    return plan


def make_plan(command: str, checkpoint: Path, recipe: Recipe, sweep: SweepArgs, out: Path) -> Plan:
    """The plan: a new one from the flags, or with --resume the one recorded in `out`, which the
    flags given must not contradict (a resumed sweep is the same sweep)."""
    if sweep.resume and not sweep.shared and is_sweep(out):    # --shared merges its seeds in (sweep_shared)
        plan = read_plan(out)
        given: dict[str, object] = {"command": command, "checkpoint": str(checkpoint)}
        if sweep.seeds is not None:
            given["seeds"] = parse_seeds(sweep.seeds, recipe.seed)
        if sweep.rates is not None:
            given["rates"] = sweep.rates
        for key, value in given.items():
            if getattr(plan, key) != value:
                raise UserError(f"--resume: the sweep in {out} has {key} {getattr(plan, key)}, this command line "
                                f"{value}", where=str(Path(out) / STATE),
                                fix="resume with the sweep's own command line, or start another sweep in a new --out")
        return plan
    if sweep.resume and Path(out).is_dir() and any(Path(out).iterdir()):
        raise UserError(f"--resume: {out} holds no sweep ({STATE} is missing)", where=str(out),
                        fix="give the --out of the interrupted sweep, or drop --resume")
    threads = choose_threads(recipe.finetune.threads, "finetune.threads").count
    seeds = parse_seeds(sweep.seeds if sweep.seeds is not None else 1, recipe.seed)
    return Plan(command, str(checkpoint), seeds, sweep.rates, threads)


def run_recipe(recipe: Recipe, lr: float | None, seed: int, threads: int) -> Recipe:
    """The recipe of one run: its seed, its rate (when the sweep has a grid) in place of the
    recipe's everywhere (task blocks too), so it is the rate used, and the sweep's thread count
    as `Recipe.sweep_threads` (internal, not a recipe key: results.json and recipe.yaml stay those
    of a single run; the engine uses it where finetune.threads is auto)."""
    ft = recipe.finetune
    if lr is not None:
        blocks = {f.name: dataclasses.replace(getattr(ft, f.name), learning_rate=None) for f in dataclasses.fields(ft)
                  if dataclasses.is_dataclass(getattr(ft, f.name)) and hasattr(getattr(ft, f.name), "learning_rate")}
        tasks = {k: dataclasses.replace(v, learning_rate=None) for k, v in ft.tasks.items()}
        ft = dataclasses.replace(ft, learning_rate=lr, tasks=tasks, **blocks)
    return dataclasses.replace(recipe, seed=seed, finetune=ft, sweep_threads=threads)


# ------------------------------------------------------------------------------------ the runs
def finished(folder: Path) -> dict | None:
    """A finished run's results.json (one without an `interrupted` entry), else None."""
    try:
        results = json.loads((Path(folder) / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return results if isinstance(results, dict) and "interrupted" not in results else None


def record_diverged(folder: Path, recipe: Recipe, lr: float | None, seed: int, error: Diverged) -> dict:
    """A diverged run's results.json (nothing else was written): counted, never run again."""
    results = {"seed": seed, "learning_rate": lr, "diverged": {"message": error.what, "fix": error.fix}}
    if ddp.writes():                   # under torchrun every rank diverged alike; rank 0 writes
        with building(folder, recipe) as tmp:
            write_json(tmp / "results.json", results)
    console.log(f"warning: {folder.name}: {error.what}; counted as diverged, the sweep goes on")
    return results


def is_record(rel: str) -> bool:
    """Files a run keeps whatever its rank: results, recipe, predictions (GLUE's submission),
    metrics.jsonl and its tracker runs (one per run: never pruned, never copied to the kept model)."""
    name, top = rel.rsplit("/", 1)[-1], rel.split("/", 1)[0]
    return (rel in RECORDS or "predictions" in rel or top == "submission" or top in TRACKER_FILES
            or rel == "metrics.jsonl" or name in ("null_odds.json", "eval.json"))


def model_files(folder: Path) -> list[str]:
    """The files of a run's saved model (what its marker lists beyond its records)."""
    return sorted(f for f in (listed_files(folder) or set()) if not is_record(f))


def prune(root: Path, runs: list[dict]) -> None:
    """Keep the weights of each rate's best run so far only (bertcli.core.outputs.drop_files:
    only what the run's marker lists goes)."""
    by_rate: dict[object, list[dict]] = {}
    for r in runs:
        by_rate.setdefault(r["group"], []).append(r)
    for group in by_rate.values():
        best = sweep_summary.kept_run(group)
        for r in group:
            if r is not best and r["status"] != "diverged":
                drop_files(root / r["dir"], model_files(root / r["dir"]))


@dataclass(frozen=True)
class Cost:
    """What a sweep will do, said before any work: its runs, those finished earlier (--resume:
    read, not run again) and the optimizer steps of each run (every run of a sweep reads the
    same data with the same epochs and batch; None when no run is left to count on)."""

    runs: int
    done: int
    steps_per_run: int | None = None
    examples: int | None = None          # training examples of a run, what the steps are counted on

    @property
    def left(self) -> int:
        return self.runs - self.done

    def describe(self) -> str:
        """The cost part of the sweep's line before work."""
        resumed = f"; {self.done} finished earlier (--resume), {self.left} to run" if self.done else ""
        s = self.steps_per_run
        if s is None:
            return f"; all {self.runs} finished earlier (--resume), none to run"
        steps = (f"; about {s:,} optimizer steps each ({self.examples:,} training examples), "
                 f"about {s * self.runs:,} in all")
        return steps + (f"{resumed}: about {s * self.left:,} steps" if self.done else "")


def count_cost(plan: Plan, recipe: Recipe, root: Path, one_run: Callable[[Recipe, Path], dict]) -> Cost:
    """The sweep's Cost: its first run left goes through the command's own run up to the point
    where the engine has the data read and checked (engine.counting_steps), so the count is the
    run's, and a broken file or flag is refused here, before any work."""
    todo = [(lr, seed, rel) for lr, seed, rel in plan.runs() if finished(root / rel) is None]
    done = len(plan.runs()) - len(todo)
    if not todo:
        return Cost(len(plan.runs()), done)
    from bertcli.finetune.engine import StepsCounted, counting_steps  # torch: the runs import it next

    lr, seed, rel = todo[0]
    try:
        with counting_steps():
            one_run(run_recipe(recipe, lr, seed, plan.threads), root / rel)
    except StepsCounted as counted:
        return Cost(len(plan.runs()), done, counted.steps, counted.examples)
    raise AssertionError("a sweep's run trains through bertcli.finetune.engine.run_task, which counts its steps")


class Clock:
    """The cost measured after the first run, and the estimate for the runs left."""

    def __init__(self, total: int):
        self.total, self.done, self.seconds = total, 0, 0.0

    def ran(self, seconds: float, results: dict) -> None:
        self.done += 1
        self.seconds += seconds
        left = self.total - self.done
        if self.done == 1 and left:
            steps = results.get("steps")
            each = f" ({steps:,} steps)" if isinstance(steps, int) else ""
            console.log(f"sweep: one run took {seconds:.0f} s{each}; the {left} left take about "
                        f"{_duration(seconds * left)}")


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def sweep_runs(plan: Plan, recipe: Recipe, root: Path, one_run: Callable[[Recipe, Path], dict], label: str,
               clock: Clock, top: Path | None = None, also: tuple[Path, ...] = (),
               done: dict[str, dict] | None = None) -> list[dict]:
    """Each (rate, seed) of the plan in turn into root/<folder>; a finished run is read, not run
    again (`done`: the finished runs every rank agreed on under torchrun, else read here). After
    each run, --out's marker (`top`, default `root`) lists its files (and those under `also`),
    so that a sweep killed between runs can be resumed; under torchrun rank 0 alone writes.
    Returns the runs' records (sweep_summary.run_record + their rate group)."""
    records: list[dict] = []
    todo = plan.runs()
    for i, (lr, seed, rel) in enumerate(todo, 1):
        folder = root / rel
        pause_point(f"sweep-{label}-run-{i}")
        results = finished(folder) if done is None else done.get(rel)
        if results is not None:
            console.log(f"{label} run {i}/{len(todo)} ({rel}): finished earlier, kept")
        else:
            console.log(f"{label} run {i}/{len(todo)} ({rel}): " + (f"lr {lr:g}, " if lr is not None else "")
                        + f"seed {seed}")
            start = time.monotonic()
            this = run_recipe(recipe, lr, seed, plan.threads)
            # the run's own lock, as a --shared sweep's processes take it (sweep_shared.py): never two trainers
            with run_lock(folder) if ddp.writes() else contextlib.nullcontext():
                try:
                    with tracking.in_sweep(f"{(top or root).name}-{label}", folder):   # its tracker runs' group
                        results = one_run(this, folder)
                except Diverged as e:
                    results = record_diverged(folder, this, lr, seed, e)
            clock.ran(time.monotonic() - start, results)
        records.append({**sweep_summary.run_record(lr, seed, rel, results), "group": lr})
        if ddp.writes():
            prune(root, records)
            claim(top or root, [folder, *also])
    return records


# ------------------------------------------------------------------------------------ disk
def weights_bytes(checkpoint: Path) -> int:
    """The checkpoint's weight files: about what each fine-tuned model saves."""
    return sum(p.stat().st_size for p in Path(checkpoint).glob("*") if p.suffix in (".safetensors", ".bin"))


def check_disk(out: Path, checkpoint: Path, models: int) -> None:
    """`models` models' worth of weights must fit where --out is, before any work."""
    need = weights_bytes(checkpoint) * models + (8 << 20) * models
    where = Path(os.path.abspath(out))
    while not where.exists():
        where = where.parent
    free = shutil.disk_usage(where).free
    console.log(f"sweep disk: about {need / 1e6:,.0f} MB at most (the weights of each rate's best run, the run in "
                f"progress, the kept model; results and predictions of every run), {free / 1e6:,.0f} MB free")
    if need > free:
        raise UserError(f"the sweep needs about {need / 1e6:,.0f} MB in {where}, which has {free / 1e6:,.0f} MB free",
                        where=str(out), fix="free disk space, choose another --out, or sweep fewer rates")


# ------------------------------------------------------------------------------------ results
def place(src: Path, dst: Path) -> None:
    """`dst` becomes a copy of `src` (a hard link where the file system allows), put in place by
    a rename: never half there."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}{TEMP_TAG}{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def keep_model(run_folder: Path, dest: Path, entry: dict | None = None, language: list[str] | None = None) -> list[str]:
    """The kept run's model files into `dest` (the sweep's --out, or a GLUE task's folder), with
    the sweep's card (`entry`: the task's sweep entry) in place of the run's own."""
    files = [f for f in model_files(run_folder) if f != CARD]
    for rel in files:
        place(run_folder / rel, dest / rel)
    results = finished(run_folder)
    if entry is not None and results is not None and CARD in model_files(run_folder) and card_wanted(dest):
        write_text_atomic(dest / CARD, finetune_card(results, language, float(results.get("train_seconds") or 0.0),
                                                     None, sweep=entry))
        return [*files, CARD]
    return files


def start(plan: Plan, out: Path, force: bool) -> None:
    """Before the first run: with `force` (--force, not --resume) the earlier result in --out
    goes (only what its marker lists), and the plan is recorded."""
    out = Path(out)
    listed = listed_files(out) if out.is_dir() else None
    if listed and force:
        drop_files(out, listed)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / STATE, plan.record())
    claim(out, [out / STATE])


def describe(plan: Plan, tasks: int = 1, cost: Cost | None = None) -> str:
    """The sweep's one line before work: its runs, threads and (`cost`) steps."""
    rates = "1 rate" if not plan.rates else f"{len(plan.rates)} rates ({', '.join(f'{r:g}' for r in plan.rates)})"
    n = len(plan.runs()) * tasks
    return (f"sweep: {n} runs ({rates} x {len(plan.seeds)} seeds {', '.join(map(str, plan.seeds))}"
            + (f" x {tasks} tasks" if tasks > 1 else "")
            + f"), one after another at {plan.threads} thread{'s' if plan.threads > 1 else ''}"
            + (cost.describe() if cost is not None else ""))


def run_sweep(plan: Plan, recipe: Recipe, checkpoint: Path, out: Path, one_run: Callable[[Recipe, Path], dict],
              force: bool = False) -> dict:
    """One task's sweep into `out`; results.json's content ({"sweep": ...}). Under torchrun
    every run trains on all ranks (the engine's DDP) and rank 0 alone writes the sweep folder."""
    out = Path(out)
    if ddp.writes():
        check_disk(out, checkpoint, len(plan.rates or [None]) + 2)
        start(plan, out, force)
    cost = count_cost(plan, recipe, out, one_run)      # every rank checks its inputs, before joining
    plan, done = agree(plan, recipe, out)
    console.log(describe(plan, cost=cost))
    records = sweep_runs(plan, recipe, out, one_run, plan.command, Clock(cost.left), done=done)
    return finish(plan, out, records, recipe.language)


def agree(plan: Plan, recipe: Recipe, out: Path) -> tuple[Plan, dict[str, dict] | None]:
    """Under torchrun: rank 0's plan (its thread count) and its finished runs (--resume), for
    every rank, so that all train the same runs whatever each one's view of --out; the group is
    joined here, after count_cost ran every rank's input checks. Alone: (plan, None)."""
    if ddp.world_size() <= 1:
        return plan, None
    from bertcli.train.distributed import all_gather_json

    d = ddp.join(recipe.finetune.device)
    mine = {"plan": plan.record(), "done": {rel: r for _, _, rel in plan.runs() if (r := finished(out / rel))}}
    with ddp.peers(d):
        first = all_gather_json(d, mine if d.main else None)[0]
    agreed = Plan(**{f.name: first["plan"][f.name] for f in dataclasses.fields(Plan)})
    return agreed, first["done"]


def finish(plan: Plan, out: Path, records: list[dict], language: list[str] | None = None) -> dict:
    """The sweep's summary from its runs' records (plan order): the kept model and results.json
    in `out` (rank 0), the table; results.json's content."""
    groups = len(plan.rates or [None])
    runs = [{k: v for k, v in r.items() if k != "group"} for r in records]
    entry = sweep_summary.task_entry(runs, plan.rates, sweep_summary.score_name(runs))
    first = next((r for r in records if r["status"] != "diverged"), None)
    name = (finished(out / first["dir"]) or {}).get("task", plan.command) if first else plan.command
    summary = header(plan, {name: entry})
    if not ddp.writes():
        return summary
    kept = keep_model(out / entry["kept"]["dir"], out, entry, language) if entry["kept"] is not None else []
    write_json(out / "results.json", summary)
    claim(out, [out / "results.json", *(out / f for f in kept)])    # now: a shared sweep has no writing() around
    console.summary(f"{name}: {len(plan.seeds)} seeds x {groups} rate(s), x100", sweep_summary.rows(name, entry))
    console.log(f"runs in {out}; the model there is {entry['kept']['dir']}'s" if entry["kept"] else
                f"runs in {out}; no model kept (no rate has a finished median)")
    return summary


def header(plan: Plan, tasks: dict) -> dict:
    """results.json's {"sweep": ...} around the tasks' entries."""
    rates = plan.rates or sorted({lr for e in tasks.values() for lr in e["learning_rates"] if lr is not None})
    return {"sweep": {"version": VERSION, "command": plan.command, "checkpoint": plan.checkpoint, "seeds": plan.seeds,
                      "learning_rates": rates, "threads": plan.threads, "statistic": sweep_summary.STATISTIC,
                      "tasks": tasks}}
