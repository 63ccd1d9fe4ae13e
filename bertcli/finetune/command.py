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
from typing import TYPE_CHECKING, Any, Protocol

import bertcli.finetune
from bertcli.core.errors import UserError, did_you_mean

if TYPE_CHECKING:
    from bertcli.config.options import SweepArgs
    from bertcli.config.recipe import Recipe
    from bertcli.finetune.sweep import Plan


class RunTask(Protocol):
    """A command's `run`: (recipe, checkpoint, out, **the task's own options) -> results.json's
    content; it imports the task inside. The options are the command's own flags (its `options`
    function's parameters, by name): they differ from task to task, so only the three every task
    takes are fixed here (`bertcli.api.TaskOptions` types the shipped tasks' options)."""

    def __call__(self, recipe: Recipe, checkpoint: Path, out: Path, /, *args: Any, **options: Any) -> dict: ...


class SweepTask(Protocol):
    """A command's own sweep (GLUE's tasks, --from-mnli): (plan, recipe, checkpoint, out, fresh,
    **the task's own options) -> results.json's content ({"sweep": ...}). `fresh`: replace what
    `out` holds (--force without --resume)."""

    def __call__(self, plan: Plan, recipe: Recipe, checkpoint: Path, out: Path, fresh: bool, /,
                 *args: Any, **options: Any) -> dict: ...


@dataclass(frozen=True)
class TaskCommand:
    """One `bertcli finetune NAME` command."""

    name: str
    # A function whose parameters are the task's own typer options (defaults option(...), each
    # flag declared once in bertcli/config/options.py FLAGS),
    # whose docstring is the command's help; never called, only read.
    options: Callable[..., None]
    run: RunTask
    recipe: str                          # the shipped recipe the command uses by default
    inputs: tuple[str, ...] = ()         # options that name input files / directories (never written)
    # The data set read from --data-dir or --hub (exactly one of the two is given), for the
    # message when neither or both are; None: no --hub.
    data_name: str | None = None
    out_kind: Callable[[Mapping[str, Any]], str] | None = None   # default: name
    # Seeds and learning-rate grids (bertcli/finetune/sweep.py): a command whose runs are not one
    # `run` per (rate, seed) gives its own `sweep` (GLUE: its tasks, --from-mnli);
    # `sweep_check(sweep, options)` refuses what the command cannot sweep, before any work;
    # `sweep_options`: options that ask for a sweep.
    sweep: SweepTask | None = None
    sweep_check: Callable[[SweepArgs, Mapping[str, Any]], None] | None = None
    sweep_options: tuple[str, ...] = ()

    def default_kind(self, options: Mapping[str, Any]) -> str:
        """The folder under runs/ of the default output directory."""
        return self.out_kind(options) if self.out_kind is not None else self.name


# Subpackages of bertcli.finetune that are not commands of their own (distill/: the `bertcli distill`
# command's modules). Any other subpackage is a task folder and must have a command.py.
NOT_TASKS = frozenset({"distill"})


def discover() -> dict[str, TaskCommand]:
    """Every task folder's commands, by name, in folder order. A task folder that cannot be read
    (no `__init__.py`, no command.py, an import that fails, no COMMANDS) is a UserError naming it,
    never a command that silently is not there."""
    package = bertcli.finetune
    for root in package.__path__:
        for folder in sorted(Path(root).iterdir()):
            if (folder / "command.py").is_file() and not (folder / "__init__.py").is_file():
                raise _broken(folder.name, "has a command.py but no __init__.py, so it is not a package (and no "
                                           "wheel would ship it)", fix=f"add {folder / '__init__.py'}")
    found: dict[str, TaskCommand] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if not info.ispkg or info.name in NOT_TASKS:
            continue
        for cmd in _commands(f"{package.__name__}.{info.name}", info.name):
            assert cmd.name not in found, f"two fine-tuning commands are named {cmd.name}"
            found[cmd.name] = cmd
    return found


def _commands(package: str, folder: str) -> list[TaskCommand]:
    """The COMMANDS of the task folder `package`'s command.py."""
    name = f"{package}.command"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise _broken(folder, f"cannot be imported ({type(e).__name__}: {e})") from e
        raise _broken(folder, "has no command.py",
                      fix="give it a command.py with a COMMANDS list (docs/design.md, \"Adding a fine-tuning task\"), "
                          "or, if it is not a task, name it in NOT_TASKS (bertcli/finetune/command.py)") from e
    except Exception as e:   # a syntax error, a failing import inside: the folder's command is broken, not gone
        raise _broken(folder, f"cannot be imported ({type(e).__name__}: {e})") from e
    commands = getattr(module, "COMMANDS", None)
    if not isinstance(commands, list) or not all(isinstance(c, TaskCommand) for c in commands):
        raise _broken(folder, "has a command.py without a COMMANDS list of TaskCommand")
    return commands


def _broken(folder: str, what: str, fix: str | None = None) -> UserError:
    """The one message of a task folder that cannot be read: its commands would otherwise be missing
    from `bertcli finetune` with no word why."""
    return UserError(f"the fine-tuning task folder bertcli/finetune/{folder}/ {what}",
                     fix=fix or "reinstall bertcli; in a checkout, fix that folder (--debug shows the traceback)")


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
