"""How `bertcli --help` reads: no Python types beside options and arguments, a word for what to
write instead, help text shown as written (not as rich markup), each command's summary on one
line in the command lists, and every command behind the `validated` test stop. Applied once to
the typer apps by `bertcli.cli` (`plain_help(app, finetune_app)`).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from bertcli.core.testhooks import stop_point


class _Command(typer.core.TyperCommand):
    """A command whose --help lists no Python type: none for --help itself (it takes no value),
    none beside an argument (its name and help say what it is)."""

    # ctx, formatter, the option: click's classes, or (typer 0.29) typer's vendored copy of them
    # (typer._click), whichever the installed typer subclasses; naming either breaks the other
    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for p in self.params:
            if isinstance(p, typer.core.TyperArgument):
                p.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
        super().format_help(ctx, formatter)


class _Group(typer.core.TyperGroup, _Command):
    pass


# What a flag's value is, in --help: nothing for an on/off flag (typer would print <bool>), else
# a word for what to write (typer's <str>, <path>, <list[str]> say the Python type instead).
_METAVARS = {"--set": "KEY=VALUE", "--recipe": "NAME|FILE", "--encoding": "CODEC"}
_KINDS: dict[object, str] = {bool: "", Path: "PATH", str: "TEXT", int: "N", float: "X"}


def _value_kind(hint) -> object:
    """The type of one value of an option: list[str] -> str (a repeatable option), X | None -> X."""
    args = [t for t in typing.get_args(hint) if t is not type(None)]
    if typing.get_origin(hint) is list:
        return args[0]
    if args:  # X | None (a union's origin is not list)
        return _value_kind(args[0])
    return hint


def _stopping(callback: Callable[..., Any]) -> Callable[..., Any]:
    """`callback` behind the `validated` test stop (bertcli.core.testhooks): typer has parsed
    and checked every flag when it calls it. Its signature is the callback's own (functools.wraps)."""
    @functools.wraps(callback)
    def command(*args: Any, **kwargs: Any) -> Any:   # typer passes the command's own flags through
        stop_point("validated")
        return callback(*args, **kwargs)

    command._bertcli_stop = True  # type: ignore[attr-defined]  # a marker; typeshed's functions declare none
    return command


def summary(doc: str) -> str | None:
    """A command's first paragraph with its line breaks made spaces. The command lists of
    `bertcli --help` and `bertcli finetune --help` print it as written (typer's rich mode keeps
    single newlines there, though not on the command's own page), so a docstring wrapped at 100
    columns broke there mid-sentence."""
    return " ".join(doc.split("\n\n")[0].split()) or None


def plain_help(*apps: typer.Typer) -> None:
    """Give every option a metavar (_METAVARS, _KINDS), every command and group the class whose
    --help shows no type, and every command its summary on one line (summary)."""
    for a in apps:
        a.info.cls = _Group   # the group's own --help (the callback's cls would override it)
        callbacks = [a.registered_callback.callback] if a.registered_callback and a.registered_callback.callback else []
        if a.registered_callback is not None:
            a.registered_callback.cls = _Group
        for command in a.registered_commands:
            command.cls = _Command
            if command.short_help is None:
                command.short_help = summary(command.help or inspect.getdoc(command.callback) or "")
            if command.callback is not None and not hasattr(command.callback, "_bertcli_stop"):
                command.callback = _stopping(command.callback)
        for callback in [*callbacks, *(c.callback for c in a.registered_commands if c.callback)]:
            hints = typing.get_type_hints(callback)
            for name, parameter in inspect.signature(callback).parameters.items():
                info = parameter.default
                if isinstance(info, typer.models.ParameterInfo) and info.help and not getattr(info, "_escaped", False):
                    # typer reads help as rich markup: "[at least 1]" would vanish as an unknown tag
                    info.help, info._escaped = escape(info.help), True  # type: ignore[attr-defined]
                if isinstance(info, typer.models.OptionInfo) and info.metavar is None:
                    named = [_METAVARS[d] for d in info.param_decls or () if d in _METAVARS]
                    info.metavar = named[0] if named else _KINDS.get(_value_kind(hints[name]))
