"""The `bertcli finetune TASK` commands, declared by the task folders themselves.

A task folder (classification/, tagging/, qa/, ...) that has a `command.py` with a `COMMANDS`
list is a fine-tuning command: the CLI (`bertcli finetune NAME`) and the Python API
(`bertcli.finetune(NAME, checkpoint, ...)`) find it here. A command module stays light (typer and
the option factories; the task's torch code is imported inside `run`), so `bertcli --help` stays
fast. Adding a task: docs/design.md, "Adding a fine-tuning task".

What every command shares is added by the CLI around the task's own flags: --checkpoint,
--recipe (default: the task's shipped recipe), --set, --out (default runs/<out_kind>/<checkpoint
name>), --force, and the common hyperparameter flags. The API checks, locks and marks the output
directory (bertcli.core.outputs.writing) before `run` is called.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bertcli.finetune
from bertcli.core.errors import UserError, did_you_mean


@dataclass(frozen=True)
class TaskCommand:
    """One `bertcli finetune NAME` command."""

    name: str
    # A function whose parameters are the task's own typer options (defaults option(...), each
    # flag declared once in bertcli/config/options.py FLAGS),
    # whose docstring is the command's help; never called, only read.
    options: Callable[..., None]
    # (recipe, checkpoint, out, **options) -> results.json's content; imports the task inside.
    run: Callable[..., dict]
    recipe: str                          # the shipped recipe the command uses by default
    inputs: tuple[str, ...] = ()         # options that name input files / directories (never written)
    # The data set read from --data-dir or --hub (exactly one of the two is given), for the
    # message when neither or both are; None: no --hub.
    data_name: str | None = None
    out_kind: Callable[[Mapping[str, Any]], str] | None = None   # default: name
    # Seeds and learning-rate grids (bertcli/finetune/sweep.py): a command whose runs are not one
    # `run` per (rate, seed) gives its own (plan, recipe, checkpoint, out, force, **options) ->
    # results.json's content (GLUE: its tasks, --from-mnli); `sweep_check(sweep, options)` refuses
    # what the command cannot sweep, before any work; `sweep_options`: options that ask for a sweep.
    sweep: Callable[..., dict] | None = None
    sweep_check: Callable[[Any, Mapping[str, Any]], None] | None = None
    sweep_options: tuple[str, ...] = ()

    def default_kind(self, options: Mapping[str, Any]) -> str:
        """The folder under runs/ of the default output directory."""
        return self.out_kind(options) if self.out_kind is not None else self.name


def discover() -> dict[str, TaskCommand]:
    """Every task folder's commands, by name, in folder order."""
    package = bertcli.finetune
    found: dict[str, TaskCommand] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        try:
            module = importlib.import_module(f"{package.__name__}.{info.name}.command")
        except ModuleNotFoundError as e:
            if e.name != f"{package.__name__}.{info.name}.command":
                raise
            continue
        for cmd in module.COMMANDS:
            assert cmd.name not in found, f"two fine-tuning commands are named {cmd.name}"
            found[cmd.name] = cmd
    return found


def get(name: str) -> TaskCommand:
    """The command `name`, or a UserError naming the closest."""
    commands = discover()
    if name not in commands:
        raise UserError(f"unknown fine-tuning task {name!r}" + did_you_mean(name, list(commands)),
                        fix=f"one of: {', '.join(commands)}")
    return commands[name]


def input_paths(cmd: TaskCommand, options: Mapping[str, Any]) -> list[Path]:
    """The input paths among `options` (for the output checks: --out may not be or hold one)."""
    return [Path(options[k]) for k in cmd.inputs if options.get(k) is not None]
