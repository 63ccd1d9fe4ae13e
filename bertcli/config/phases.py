"""Multi-phase runs (`train.phases`) and time budgets (`train.max_time`): the plan.

Torch-free, so that loading a recipe can check them (recipe.check_plan). A run is a list of
phases covering the steps 1..max_steps in order; phase i runs the updates start+1..end. Each
phase sees the run's recipe with its own settings applied (`Phase.recipe`):
  - data: the data section with the phase's `data` keys over it. Its built data is a stage of
    its own, keyed by those settings like any data stage, built when the phase starts;
  - train: batch_size / micro_batch_size of the phase; when the phase sets learning_rate,
    warmup_steps or schedule, a schedule of its own over its steps (`own_schedule`; its
    recipe's train.max_steps is then the phase's length). Otherwise the run's schedule over
    train.max_steps continues through it (BERT's 512-token phase continues the 1M-step decay).
A recipe without phases is one unnamed phase: the recipe itself.
The trainer's side (learning rates per phase, budgets during the run, the data of each phase)
is bertcli/train/phases.py.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bertcli.config.schema import Ctx, build
from bertcli.config.sections import DataConfig
from bertcli.core.errors import UserError

if TYPE_CHECKING:  # the recipe module imports this one
    from bertcli.config.recipe import Recipe

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
# Phase keys that give the phase a schedule of its own.
SCHEDULE_KEYS = ("learning_rate", "warmup_steps", "schedule")


# ------------------------------------------------------------------------------- budgets
def parse_duration(text: str) -> float:
    """Seconds of a duration: a number with a unit, or several (90s, 30m, 24h, 1h30m, 2d, 0.5h).
    ValueError for anything else (a bare number has no unit: seconds or minutes?)."""
    t = str(text).strip().lower().replace(" ", "")
    if not t or _PART.sub("", t):
        raise ValueError(text)
    seconds = sum(float(n) * UNITS[u] for n, u in _PART.findall(t))
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(text)
    return seconds


def budget_seconds(train) -> float | None:
    """train.max_time in seconds (None: no budget). The recipe was checked when it loaded."""
    return None if train.max_time is None else parse_duration(train.max_time)


def format_seconds(s: float) -> str:
    """1h02m03s, 2m05s, 7.5s."""
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


# -------------------------------------------------------------------------------- phases
@dataclass(frozen=True)
class Phase:
    index: int
    name: str                  # "" for a run without train.phases
    start: int                 # steps taken before this phase
    end: int                   # the step count at its end
    recipe: Recipe             # as this phase sees it (train.phases emptied)
    own_schedule: bool

    @property
    def steps(self) -> int:
        return self.end - self.start

    @property
    def label(self) -> str:
        return self.name or "the run"


def plan(r: Recipe) -> list[Phase]:
    """The phases of recipe `r`, in order (one unnamed phase when it declares none)."""
    tr = r.train
    if not tr.phases:
        return [Phase(0, "", 0, tr.max_steps, r, False)]
    phases, start = [], 0
    for i, n in enumerate(_lengths(r)):
        pc = tr.phases[i]
        own = any(getattr(pc, k) is not None for k in SCHEDULE_KEYS)
        phases.append(Phase(i, pc.name or f"phase{i + 1}", start, start + n, phase_recipe(r, i, n, own), own))
        start += n
    return phases


def phase_of(phases: list[Phase], update: int) -> Phase:
    """The phase that runs update number `update` (1-based; past the end: the last phase)."""
    for ph in phases:
        if update <= ph.end:
            return ph
    return phases[-1]


def phase_recipe(r: Recipe, i: int, steps: int, own: bool) -> Recipe:
    """Recipe `r` as phase i sees it: its data keys over r.data, its batch and schedule."""
    tr, pc = r.train, r.train.phases[i]
    data = build(DataConfig, {**dataclasses.asdict(r.data), **pc.data}, f"train.phases[{i}].data.",
                 Ctx(r.source, {}))
    pick = lambda key: getattr(pc, key) if getattr(pc, key) is not None else getattr(tr, key)  # noqa: E731
    micro = pc.micro_batch_size if pc.micro_batch_size is not None else (
        tr.micro_batch_size if pc.batch_size is None else None)
    train = dataclasses.replace(tr, phases=[], batch_size=pick("batch_size"), micro_batch_size=micro,
                                learning_rate=pick("learning_rate"), warmup_steps=pick("warmup_steps"),
                                schedule=pick("schedule"), max_steps=steps if own else tr.max_steps)
    return dataclasses.replace(r, data=data, train=train)


def _lengths(r: Recipe) -> list[int]:
    tr = r.train
    lengths, flexible = [], None
    for i, pc in enumerate(tr.phases):
        if (pc.steps is None) == (pc.fraction is None):
            raise UserError(f"train.phases[{i}]: give its length as steps or as a fraction of train.max_steps "
                            "(one of them)", where=r.source, fix="e.g. {steps: 900000} or {fraction: 0.9}")
        if pc.steps is not None:
            lengths.append(pc.steps)
        elif pc.fraction is not None:     # always, by the check above
            lengths.append(int(round(pc.fraction * tr.max_steps)))
            flexible = i
    missing = tr.max_steps - sum(lengths)
    if missing and flexible is not None and abs(missing) <= len(lengths):
        lengths[flexible] += missing      # rounding of the fractions
    if sum(lengths) != tr.max_steps or min(lengths) < 1:
        raise UserError(f"train.phases add up to {sum(lengths):,} steps ({' + '.join(map(str, lengths))}), "
                        f"train.max_steps is {tr.max_steps:,}", where=r.source,
                        fix="make the phases' steps add up to train.max_steps, or give them as fractions")
    return lengths
