"""Command-line options that mirror recipe keys, shared by the CLI and the task commands that
declare their own flags (bertcli/finetune/*/command.py).

Every numeric flag is made by `num_option`, with the bounds of the recipe key it sets (`of=`) or
its own, in `num`'s terms, an upper bound included, and is checked as the recipe's keys are
(finite, within the bounds: one message naming the flag and the largest value accepted, exit 2).
NUM_FLAGS records them, so a test can find any numeric flag that escaped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import typer

from bertcli.config.bounds import MAX_SEED
from bertcli.config.schema import check_value, range_words
from bertcli.config.sections import FinetuneConfig
from bertcli.core import jsonout
from bertcli.core.errors import UserError

NUM_FLAGS: set[str] = set()
MAX_RUNS = 10_000          # --seeds N: runs of one sweep (each a whole fine-tuning run)

SetOpt = typer.Option(None, "--set", "-s", help="Override a recipe field: section.key=value (YAML value); repeatable.")
EncodingOpt = typer.Option(None, "--encoding", help="Text encoding of the input files (default: UTF-8; a UTF-8 or UTF-16 "
                           "byte-order mark is honoured), e.g. latin1, cp1252, gb18030.")
OutForceOpt = typer.Option(False, "--force", help="Replace an earlier bertcli result in --out: only the files its "
                           "marker (.bertcli-output.json) lists are removed; anything else there stays.")
CHECKPOINT_HELP = "A bertcli or transformers BERT/RoBERTa/ALBERT/ModernBERT checkpoint directory."


def num_option(default, *names: str, of: tuple | None = None, help: str = "", **bounds):
    """A typer option for a number, range-checked like recipe keys (`schema.check_value`). `of`:
    (section dataclass, field name) whose declared `num(...)` bounds the flag shares; else
    `bounds` (ge=, gt=, le=) declare them here."""
    if of is not None:
        fld = {f.name: f for f in dataclasses.fields(of[0])}[of[1]]
    else:
        fld = dataclasses.field(metadata={"ge": None, "gt": None, "le": None, **bounds})
    if fld.metadata.get("le") is None:  # a declaration bug, caught when the CLI module loads
        raise TypeError(f"numeric flag {names[0]} declares no upper bound (le=)")
    NUM_FLAGS.update(names)

    shown = range_words(fld.metadata)

    def check(value: float | None) -> float | None:
        try:
            check_value(value, fld, names[0], where=f"the command line: {names[0]} {value}")
        except UserError as e:
            raise UserError(e.what, where=e.where, fix=f"give {names[0]} a number ({shown or 'finite'})") from None
        return value

    check.bounds = {k: fld.metadata.get(k) for k in ("ge", "gt", "le")}  # type: ignore[attr-defined]  # read by tests
    return typer.Option(default, *names, help=f"{help} [{shown}]" if shown else help, callback=check)


# ------------------------------------------------------------------ the shared fine-tuning flags
# The hyperparameters every fine-tuning command (`finetune TASK`, `distill`) takes as flags
# (run_glue / run_ner's names), each the recipe key it sets: (parameter, flag, recipe key, type,
# FinetuneConfig field or None for bounds of its own, help). `--lr` takes a comma list too (a
# learning-rate grid, bertcli/finetune/sweep.py): one value is the recipe key as before.
FINETUNE_FLAGS = (
    ("lr", "--lr", "finetune.learning_rate", str, "learning_rate",
     "Peak learning rate (default: auto, from the model's size); a comma list (5e-5,3e-5,2e-5) sweeps the rates "
     "and keeps the one whose median dev score over the seeds is highest."),
    ("epochs", "--epochs", "finetune.epochs", float, "epochs", "Passes over the training set."),
    ("batch_size", "--batch-size", "finetune.batch_size", int, "batch_size", "Training sequences per optimizer step."),
    ("max_seq_length", "--max-seq-length", "finetune.max_seq_length", int, "max_seq_length",
     "Tokens per example (special tokens included); longer ones are truncated or windowed."),
    ("seed", "--seed", "seed", int, None, "Seed of the head's initialization, dropout and example order."),
)
SWEEP_FLAGS = (
    ("seeds", typer.Option(None, "--seeds", help="Run several seeds: N (the recipe's seed, seed+1, ...) or a comma list "
                                                 "(1,7,42); each run in its own folder under --out, the summary gives "
                                                 "mean, sd, median, min and max over them.")),
    ("resume", typer.Option(False, "--resume", help="Continue the seed / learning-rate sweep already in --out: "
                                                    "finished runs are kept, an interrupted one starts again.")),
)


@dataclasses.dataclass(frozen=True)
class SweepArgs:
    """What the sweep flags asked for: seeds (the text of --seeds, or a list), the rates of an
    --lr grid (None: the one rate of the recipe / --lr), and --resume."""

    seeds: str | list[int] | None = None
    rates: list[float] | None = None
    resume: bool = False

    @property
    def wanted(self) -> bool:
        """Whether this is a sweep at all: without --seeds, one rate and no --resume the run is
        today's single run, its folder and results.json unchanged."""
        return self.seeds is not None or self.rates is not None or self.resume


def parse_rates(text: str | None) -> list[float] | None:
    """--lr's text: None or `auto` -> None; `3e-5` -> [3e-05]; `5e-5,3e-5` -> [5e-05, 3e-05]. Each
    rate is checked as finetune.learning_rate is (finite, > 0); a repeated one is a mistake."""
    if text is None or text.strip().lower() == "auto":
        return None
    fld = {f.name: f for f in dataclasses.fields(FinetuneConfig)}["learning_rate"]
    rates = []
    for part in text.split(","):
        try:
            rate = float(part)
        except ValueError:
            raise UserError(f"--lr {text!r}: {part.strip()!r} is not a number", where="the command line",
                            fix="give --lr one rate (3e-5), a comma list (5e-5,3e-5,2e-5) or auto") from None
        try:
            check_value(rate, fld, "--lr", where=f"the command line: --lr {text}")
        except UserError as e:
            raise UserError(e.what, where=e.where, fix="give --lr rates above 0, e.g. 5e-5,3e-5,2e-5") from None
        rates.append(rate)
    if len(set(rates)) != len(rates):
        raise UserError(f"--lr {text!r} names a rate twice", where="the command line",
                        fix="give each rate of the grid once")
    return rates


def parse_seeds(spec: str | int | list[int], first: int) -> list[int]:
    """--seeds: N -> [first, first+1, ..., first+N-1] (`first`: the recipe's seed); `1,7,42` -> that
    list. A UserError (exit 2, one message) for anything else: not integers, negative, repeated,
    N < 1."""
    fix = "give --seeds a count (--seeds 5: the recipe's seed and the next four) or a comma list (--seeds 1,7,42)"
    if isinstance(spec, list):
        values = list(spec)
    else:
        text = str(spec).strip()
        try:
            values = [int(p) for p in text.split(",")]
        except ValueError:
            raise UserError(f"--seeds {text!r} is neither a count nor a comma list of integers",
                            where="the command line", fix=fix) from None
        if "," not in text:
            if not 1 <= values[0] <= MAX_RUNS:
                raise UserError(f"--seeds {text}: a count of seeds must be from 1 to {MAX_RUNS:,}", where="the command line",
                                fix=fix)
            values = list(range(first, first + values[0]))
    if any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SEED for v in values) or not values:
        raise UserError(f"--seeds {spec!r}: seeds are integers from 0 to {MAX_SEED}", where="the command line", fix=fix)
    if len(set(values)) != len(values):
        raise UserError(f"--seeds {spec!r} names a seed twice", where="the command line",
                        fix="give each seed once (a repeated seed repeats the same run)")
    return values


def finetune_flags(command: Callable[..., None]) -> Callable[..., None]:
    """Add FINETUNE_FLAGS and SWEEP_FLAGS to a fine-tuning command: each given hyperparameter
    flag becomes a `--set` item after the command's own (so a flag wins over --set and the
    recipe, and over a task block's value of the recipe file: config.recipe.general_keys_win);
    the sweep's flags reach the command as one `sweep` argument (SweepArgs). Written once for
    every fine-tuning command."""
    import functools
    import inspect

    params = []
    for name, flag, _key, tp, field_name, help_text in FINETUNE_FLAGS:
        if tp is str:       # --lr: one rate or a grid, checked by parse_rates
            opt = typer.Option(None, flag, help=help_text)
        else:
            opt = (num_option(None, flag, of=(FinetuneConfig, field_name), help=help_text) if field_name
                   else num_option(None, flag, ge=0, le=MAX_SEED, help=help_text))
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=tp | None))
    for name, opt in SWEEP_FLAGS:
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt,
                                        annotation=bool if name == "resume" else str | None))

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:   # the command's own flags and the shared ones
        given = {key: kwargs.pop(name) for name, _, key, *_ in FINETUNE_FLAGS}
        rates = parse_rates(given["finetune.learning_rate"])
        if given["finetune.learning_rate"] is not None:
            # one rate: the recipe key, as before; a grid: its first rate, so that a task block's
            # rate of the recipe file gives way to the command line's (general_keys_win)
            given["finetune.learning_rate"] = rates[0] if rates else "auto"
        sweep = SweepArgs(kwargs.pop("seeds"), rates if rates and len(rates) > 1 else None, kwargs.pop("resume"))
        kwargs["set_"] = [*(kwargs.get("set_") or []),
                          *(f"{key}={jsonout.dumps(value)}" for key, value in given.items() if value is not None)]
        if sweep.wanted:
            kwargs["sweep"] = sweep
        return command(*args, **kwargs)

    sig = inspect.signature(command)
    own = [p for p in sig.parameters.values() if p.name != "sweep"]
    wrapper.__signature__ = sig.replace(parameters=[*own, *params])  # type: ignore[attr-defined]  # what typer reads
    wrapper.__annotations__ = {**{k: v for k, v in command.__annotations__.items() if k != "sweep"},
                               **{p.name: p.annotation for p in params}}
    return wrapper
