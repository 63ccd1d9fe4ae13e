"""Multi-phase runs (`train.phases`) and time budgets (`train.max_time`): planning and checks.

Torch-free, so that loading a recipe can check them. A run is a list of phases covering the
steps 1..max_steps in order; phase i runs the updates start+1..end. Each phase sees the run's
recipe with its own settings applied (`Phase.recipe`):
  - data: the data section with the phase's `data` keys over it. Its built data is a stage of
    its own, keyed by those settings like any data stage, built when the phase starts;
  - train: batch_size / micro_batch_size of the phase; when the phase sets learning_rate,
    warmup_steps or schedule, a schedule of its own over its steps (`own_schedule`; its
    recipe's train.max_steps is then the phase's length). Otherwise the run's schedule over
    train.max_steps continues through it (BERT's 512-token phase continues the 1M-step decay).
A recipe without phases is one unnamed phase: the recipe itself.

Time budgets: `progress(update) = max(elapsed / budget, update / max_steps)`; the schedule's
multiplier at that progress is the step schedule's with warmup taking the same share of the run
(warmup_steps / max_steps), so a budget that never binds gives the step schedule.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass

from bertcli.errors import UserError

if typing.TYPE_CHECKING:
    from bertcli.recipe import Recipe

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
    from bertcli.train.schedule import lr_multiplier

    scale = 1e9
    warmup = train.warmup_steps / train.max_steps * scale
    return lr_multiplier(p * scale, warmup, scale, train.schedule, train.power, train.min_lr_ratio,
                         train.decay_fraction)


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


def plan(r) -> list[Phase]:
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


def phase_recipe(r, i: int, steps: int, own: bool):
    """Recipe `r` as phase i sees it: its data keys over r.data, its batch and schedule."""
    from bertcli.recipe import DataConfig, _Ctx, build

    tr, pc = r.train, r.train.phases[i]
    data = build(DataConfig, {**dataclasses.asdict(r.data), **pc.data}, f"train.phases[{i}].data.",
                 _Ctx(r.source, {}))
    pick = lambda key: getattr(pc, key) if getattr(pc, key) is not None else getattr(tr, key)  # noqa: E731
    micro = pc.micro_batch_size if pc.micro_batch_size is not None else (
        tr.micro_batch_size if pc.batch_size is None else None)
    train = dataclasses.replace(tr, phases=[], batch_size=pick("batch_size"), micro_batch_size=micro,
                                learning_rate=pick("learning_rate"), warmup_steps=pick("warmup_steps"),
                                schedule=pick("schedule"), max_steps=steps if own else tr.max_steps)
    return dataclasses.replace(r, data=data, train=train)


def _lengths(r) -> list[int]:
    tr = r.train
    lengths, flexible = [], None
    for i, pc in enumerate(tr.phases):
        if (pc.steps is None) == (pc.fraction is None):
            raise UserError(f"train.phases[{i}]: give its length as steps or as a fraction of train.max_steps "
                            "(one of them)", where=r.source, fix="e.g. {steps: 900000} or {fraction: 0.9}")
        if pc.steps is not None:
            lengths.append(pc.steps)
        else:
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


# -------------------------------------------------------------------------------- checks
def check_plan(r) -> None:
    """Recipe-load checks of train.max_time and train.phases: every phase's recipe must be a
    valid recipe on its own (the cross-field rules of recipe.validate, e.g. max_seq_length
    against the model's positions)."""
    from bertcli.recipe import TrainConfig, _Ctx, coerce, validate

    tr = r.train
    if tr.max_time is not None:
        try:
            parse_duration(tr.max_time)
        except ValueError:
            raise UserError(f"train.max_time: {tr.max_time!r} is not a duration", where=r.source,
                            fix="a number with a unit: 90s, 30m, 24h, 1h30m, 2d")
    if not tr.phases:
        return
    if tr.max_time is not None:
        raise UserError("train.phases with train.max_time: a budgeted run has no step count to cut into phases",
                        where=r.source, fix="drop train.max_time, or train.phases")
    hint = typing.get_type_hints(TrainConfig)["schedule"]   # the phases' kinds are train.schedule's
    names = set()
    for ph in plan(r):
        pc = tr.phases[ph.index]
        if pc.schedule is not None:
            coerce(pc.schedule, hint, f"train.phases[{ph.index}].schedule", _Ctx(r.source, {}))
        if ph.name in names:
            raise UserError(f"train.phases[{ph.index}]: the name {ph.name!r} is taken by an earlier phase",
                            where=r.source, fix="give each phase its own name")
        names.add(ph.name)
        t = ph.recipe.train
        if ph.own_schedule and t.warmup_steps > ph.steps:
            raise UserError(f"train.phases[{ph.index}] ({ph.name}): warmup of {t.warmup_steps:,} steps in a phase "
                            f"of {ph.steps:,}", where=r.source,
                            fix=f"set train.phases[{ph.index}].warmup_steps to at most its steps")
        try:
            validate(ph.recipe)
        except UserError as e:
            raise UserError(f"train.phases[{ph.index}] ({ph.name}): {e.what}", where=e.where, fix=e.fix)


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
def build_phase_data(r, force: bool = False, all_phases: bool = False) -> list:
    """`bertcli build-data`: the first phase's data (what pretraining needs first), or every
    phase's with `all_phases`. Phases with the same data settings share one stage."""
    from bertcli.data.build import data_dir, run_build_data

    phases = plan(r)
    results, seen = [], set()
    for ph in phases if all_phases else phases[:1]:
        path = data_dir(ph.recipe)
        if path in seen:
            continue
        seen.add(path)
        results.append(stage_name(run_build_data(ph.recipe, force=force), ph))
    return results


def stage_name(result, ph: Phase):
    """A phase's data StageResult named after the phase ("data phase2")."""
    return dataclasses.replace(result, name=f"data {ph.name}") if ph.name else result
