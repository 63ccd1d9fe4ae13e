"""Multi-phase runs and time budgets on the trainer's side: the learning rate of each phase,
the progress of a budgeted run, the trainer state's phase keys and the data of each phase. The
plan itself (the phases and their recipes) is bertcli/config/phases.py.

Time budgets: `progress(update) = max(elapsed / budget, update / max_steps)`; the schedule's
multiplier at that progress is the step schedule's with warmup taking the same share of the run
(warmup_steps / max_steps), so a budget that never binds gives the step schedule.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from bertcli.config.phases import Phase, phase_of, plan
from bertcli.data.build import data_dir, run_build_data

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe
    from bertcli.config.stages import StageResult


# ------------------------------------------------------------------------------- budgets
def progress(update: int, elapsed: float, budget: float | None, max_steps: int) -> float:
    """How far through the run update number `update` (1-based) is, from 0 to 1: the step's
    share of max_steps, or the elapsed share of the budget when that is larger."""
    p = update / max_steps
    if budget:
        p = max(p, elapsed / budget)
    return min(1.0, p)


def budget_multiplier(train, p: float) -> float:
    """Learning-rate multiplier at progress `p` of a budgeted run: the step schedule drawn over
    [0, 1] instead of [0, max_steps] (lr_multiplier is scale-free; the large scale only keeps
    its one-step guard out of the way)."""
    from bertcli.train.schedule import lr_multiplier  # torch: `bertcli build-data` imports this module

    scale = 1e9
    warmup = train.warmup_steps / train.max_steps * scale
    return lr_multiplier(p * scale, warmup, scale, train.schedule, train.power, train.min_lr_ratio,
                         train.decay_fraction)


class PhaseLR:
    """The LambdaLR function of a multi-phase run: after k scheduler steps, the multiplier of
    update k + 1 under the schedule of the phase that runs it, times that phase's peak over the
    optimizer's base rate (train.learning_rate)."""

    def __init__(self, phases: list[Phase], base_lr: float):
        self.phases, self.base_lr = phases, base_lr

    def __call__(self, epoch: int) -> float:
        from bertcli.train.schedule import lr_multiplier

        update = epoch + 1
        ph = phase_of(self.phases, update)
        t = ph.recipe.train
        local = update - ph.start if ph.own_schedule else update   # own schedule: counted from its start
        m = lr_multiplier(local, t.warmup_steps, t.max_steps, t.schedule, t.power, t.min_lr_ratio, t.decay_fraction)
        return m * (t.learning_rate / self.base_lr)


# ------------------------------------------------------------------- checkpoint state
def state_value(state, key: str, default=None):
    """A key of a checkpoint's trainer state (`phase`, `phase_start`, `elapsed_s`, ...), from a
    JSON dict or an object holding them as attributes (keys it does not know in `.extra`)."""
    if isinstance(state, dict):
        return state.get(key, default)
    if hasattr(state, key):
        return getattr(state, key)
    return getattr(state, "extra", {}).get(key, default)


# ------------------------------------------------------------------------ data per phase
def build_phase_data(r: Recipe, force: bool = False, all_phases: bool = False) -> list[StageResult]:
    """`bertcli build-data`: the first phase's data (what pretraining needs first), or every
    phase's with `all_phases`. Phases with the same data settings share one stage."""
    phases = plan(r)
    results, seen = [], set()
    for ph in phases if all_phases else phases[:1]:
        path = data_dir(ph.recipe)
        if path in seen:
            continue
        seen.add(path)
        results.append(stage_name(run_build_data(ph.recipe, force=force), ph))
    return results


def stage_name(result: StageResult, ph: Phase) -> StageResult:
    """A phase's data StageResult named after the phase ("data phase2")."""
    return dataclasses.replace(result, name=f"data {ph.name}") if ph.name else result
