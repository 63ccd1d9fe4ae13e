"""One sweep folder written by several independent processes at once (`--shared`): the
efficient way to sweep small tasks, one process per GPU.

    CUDA_VISIBLE_DEVICES=0 bertcli finetune classify ... --seeds 0,1 --out S --shared &
    CUDA_VISIBLE_DEVICES=1 bertcli finetune classify ... --seeds 2,3 --out S --shared

Each process adds its seeds to the plan in S/sweep.json (the sweep is their union, in seed
order; the command, checkpoint, rates, recipe and inputs must be the same) and trains the runs
of its own seeds. Given the same seeds, processes share the runs out instead (each takes the
next run nobody holds). What makes it safe:

- S's lock (core/locks.py, `.S.lock` beside it) is held only for moments: to merge the plan, to
  list a finished run in S's marker, to prune weights, to write the summary. A process waits up
  to LOCK_WAIT_S for it (a one-process sweep holding S for its whole run makes it give up then,
  naming the holder).
- Each run is held by a lock of its own (`S/.seed-N.lock`) while it trains: no run is trained by
  two processes; one held by another process, or finished, is skipped.
- A run folder appears complete or not at all (the engine builds it under a temporary and
  renames it). A killed process leaves its run unfinished and its temporary, which the next
  process next to it removes (its PID no longer runs; bertcli never removes a live one's).
- S/results.json (the summary) exists only when every run of the plan has finished: the process
  that finishes the last one writes it (prune, kept model, summary), the others say which runs
  are left. A process that adds seeds to a finished sweep removes its summary first. Running a
  killed process's command again (or `--resume`, one process) trains what it left.
- Nothing another process wrote is removed, except the weights of finished runs that are not
  their rate's best so far: the sweep's own rule (sweep.prune), as in one process.

Not under torchrun (each process here is one GPU's), not GLUE's protocol (one task per sweep).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from bertcli.core import console, jsonout
from bertcli.core.errors import Diverged, UserError
from bertcli.core.locks import run_lock
from bertcli.core.outputs import check_output_dir, claim, drop_files
from bertcli.finetune import sweep as sweeps
from bertcli.finetune import sweep_summary, tracking
from bertcli.finetune.classification.submission import write_json

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe

LOCK_WAIT_S = 120.0      # how long a process waits for the folder lock held by another one


@contextlib.contextmanager
def folder_lock(out: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """S's run lock, held for a moment: retried while another process holds it, up to `wait_s`
    seconds, then its UserError (naming the holder)."""
    deadline = time.monotonic() + wait_s
    while True:
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(run_lock(out))
            except UserError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            yield
            return


def fingerprint(recipe: Recipe, options: dict) -> str:
    """What every process of one shared sweep must agree on besides the plan: the recipe's
    hyperparameters (hashed keys of finetune and model) and the task's options (its inputs)."""
    given = {k: str(Path(v).resolve()) if isinstance(v, os.PathLike) else v for k, v in sorted(options.items())}
    return recipe.section_hash("finetune", "model", extra=jsonout.dumps(given, sort_keys=True, default=str))


def merge(plan: sweeps.Plan, out: Path, mark: str, inputs: Iterable) -> sweeps.Plan:
    """Under S's lock: a new sweep.json, or this process's seeds added to the one there (which
    must be the same sweep). Returns the sweep's plan (the union)."""
    path = out / sweeps.STATE
    if not sweeps.is_sweep(out):
        check_output_dir(out, False, inputs)          # new or empty (--force is refused: others' runs)
        sweeps.start(plan, out, False)
        union, record = plan, {}
    else:
        check_output_dir(out, True, inputs)           # a sweep folder: bertcli's (its marker)
        union, record = sweeps.read_plan(out), json.loads(path.read_text(encoding="utf-8"))
        for key in ("command", "checkpoint", "rates"):
            if getattr(union, key) != getattr(plan, key):
                raise UserError(f"--shared: the sweep in {out} has {key} {getattr(union, key)}, this command line "
                                f"{getattr(plan, key)}", where=str(path),
                                fix="give every process of a shared sweep the same command line but --seeds")
        if record.get("fingerprint") not in (None, mark):
            raise UserError(f"--shared: the sweep in {out} was started with other settings (recipe, --set, "
                            "flags or input files) than this command line's", where=str(path),
                            fix="give every process of a shared sweep the same command line but --seeds, or "
                                "choose another --out")
    seeds = sorted(set(union.seeds) | set(plan.seeds))
    if seeds != union.seeds and (out / "results.json").is_file():
        drop_files(out, ["results.json"])             # the summary of fewer seeds would look complete
    union = sweeps.Plan(union.command, union.checkpoint, seeds, union.rates, union.threads)
    workers = [*record.get("workers", []), {"pid": os.getpid(), "host": socket.gethostname(), "seeds": plan.seeds}]
    write_json(path, {**union.record(), "fingerprint": mark, "workers": workers})
    claim(out, [path])
    return union


def state(plan: sweeps.Plan, out: Path) -> tuple[list[dict], list[str]]:
    """(records of the finished runs in plan order, folders of the runs not finished)."""
    records, left = [], []
    for lr, seed, rel in plan.runs():
        results = sweeps.finished(out / rel)
        if results is None:
            left.append(rel)
        else:
            records.append({**sweep_summary.run_record(lr, seed, rel, results), "group": lr})
    return records, left


def run_shared(plan: sweeps.Plan, recipe: Recipe, checkpoint: Path, out: Path, one_run: Callable[[Recipe, Path], dict],
               options: dict, inputs: Iterable, force: bool = False) -> dict:
    """This process's runs of a shared sweep into `out`; the sweep's summary (results.json's
    content) when it finished the last run, else {"sweep": {"complete": false, ...}}."""
    out, inputs = Path(out), list(inputs)
    if force:
        raise UserError("--force with --shared would remove the runs other processes are writing",
                        fix="remove the sweep folder yourself when no process writes it, or choose a new --out")
    mine = sorted(set(plan.seeds))
    plan = sweeps.Plan(plan.command, plan.checkpoint, mine, plan.rates, plan.threads)
    sweeps.check_disk(out, checkpoint, len(plan.rates or [None]) + 2 + len(mine))
    with folder_lock(out):
        union = merge(plan, out, fingerprint(recipe, options), inputs)
    # the recorded thread count is the sweep's, whoever chose it (each run's results.json says it)
    plan = sweeps.Plan(plan.command, plan.checkpoint, mine, plan.rates, union.threads)
    cost = sweeps.count_cost(plan, recipe, out, one_run)
    console.log(sweeps.describe(plan, cost=cost) + f"; shared: the sweep has seeds {', '.join(map(str, union.seeds))}")
    clock = sweeps.Clock(cost.left)
    for i, (lr, seed, rel) in enumerate(plan.runs(), 1):
        folder = out / rel
        if sweeps.finished(folder) is not None:
            console.log(f"{plan.command} run {i}/{len(plan.runs())} ({rel}): finished earlier, kept")
            continue
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(run_lock(folder))
            except UserError as e:
                console.log(f"{plan.command} run {i}/{len(plan.runs())} ({rel}): another process trains it, "
                            f"skipped ({e.what})")
                continue
            if sweeps.finished(folder) is not None:    # finished by another process just before
                continue
            console.log(f"{plan.command} run {i}/{len(plan.runs())} ({rel}): "
                        + (f"lr {lr:g}, " if lr is not None else "") + f"seed {seed}")
            start = time.monotonic()
            this = sweeps.run_recipe(recipe, lr, seed, plan.threads)
            try:
                with tracking.in_sweep(f"{out.name}-{plan.command}", folder):   # grouped as a one-process sweep's
                    results = one_run(this, folder)
            except Diverged as e:
                results = sweeps.record_diverged(folder, this, lr, seed, e)
            clock.ran(time.monotonic() - start, results)
            with folder_lock(out):
                claim(out, [folder])
                sweeps.prune(out, state(sweeps.read_plan(out), out)[0])
    with folder_lock(out):
        union = sweeps.read_plan(out)                 # other processes may have added seeds
        records, left = state(union, out)
        if left:
            console.log(f"sweep: {len(records)} of {len(union.runs())} runs finished; left: {', '.join(left)} (other "
                        f"processes', or killed ones': run their command again). The process that finishes the last "
                        f"run writes {out / 'results.json'}")
            return {"sweep": {"complete": False, "finished": len(records), "runs": len(union.runs()), "left": left}}
        sweeps.prune(out, records)
        claim(out, [out / r["dir"] for r in records])   # also a run whose process died before claiming it
        return sweeps.finish(union, out, records, recipe.language)
