"""Typed building of recipe sections: a YAML mapping into a section dataclass, every key and
value checked against the field's type hint and bounds, each message naming the key's file and
line (or its --set). The recipe (recipe.py) and the phase plan (phases.py) build through it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union

from bertcli.config.sections import SourceConfig
from bertcli.core.errors import UserError, closest, did_you_mean


@dataclass
class Ctx:
    where: str
    lines: dict[str, int]

    def at(self, path: str) -> str:
        line = self.lines.get(path)
        if line == 0:
            return f"--set {path}"
        return f"{self.where}:{line}" if line else self.where


def build(cls: type, raw: Any, path: str, ctx: Ctx):
    """Build dataclass `cls` from `raw`, checking every key and value; `path` names it in messages."""
    shorthand = _shorthand(cls)
    if shorthand and not isinstance(raw, dict):
        raw = {shorthand: raw}
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        name = path.rstrip(".") or "recipe"
        raise UserError(f"{name}: expected a mapping, got {_describe(raw)}", where=ctx.at(name))
    flds = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    hints = typing.get_type_hints(cls)
    for key in raw:
        if key not in flds:
            full = f"{path}{key}"
            raise UserError(
                f"{full}: unknown key" + did_you_mean(str(key), flds, prefix=path),
                where=ctx.at(full),
                fix=f"see `bertcli explain {path.rstrip('.') or 'recipe'}` for the valid keys",
            )
    kwargs = {}
    for name, f in flds.items():
        full = f"{path}{name}"
        if name in raw:
            kwargs[name] = coerce(raw[name], hints[name], full, ctx)
            check_value(kwargs[name], f, full, ctx.at(full))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise UserError(f"{full}: required key is missing", where=ctx.at(path.rstrip(".")))
    return cls(**kwargs)


def _shorthand(cls: type) -> str | None:
    return "path" if cls is SourceConfig else None


def coerce(value: Any, tp: Any, path: str, ctx: Ctx) -> Any:
    """Check (and gently convert) one value against a type hint."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is object:  # free-form values checked by their own validator (train.phases[i].data)
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if value is None:
            raise UserError(f"{path}: must not be null; expected {_type_name(inner[0])}", where=ctx.at(path),
                            fix=type_fix(path, _type_name(inner[0])))
        for alternative in inner[:-1]:        # e.g. int | "auto": the first kind that takes the value
            try:
                return coerce(value, alternative, path, ctx)
            except UserError:
                pass
        try:
            return coerce(value, inner[-1], path, ctx)
        except UserError as e:
            if len(inner) == 1:
                raise
            expected = " or ".join(pretty_type(a) for a in inner)
            raise UserError(f"{path}: expected {expected}, got {_describe(value)}", where=ctx.at(path),
                            fix=type_fix(path, expected)) from e
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a class, never an instance, as a hint
        return build(tp, value, path + ".", ctx)
    if origin is Literal:
        if value in args:
            return value
        choices = [str(a) for a in args]
        raise UserError(
            f"{path}: {value!r} is not one of: {', '.join(choices)}"
            + (f"; did you mean {best}?" if (best := closest(str(value), choices)) else ""),
            where=ctx.at(path), fix=f"give {path} one of: {', '.join(choices)}",
        )
    if origin is list:
        if not isinstance(value, list):
            raise UserError(f"{path}: expected a list, got {_describe(value)}", where=ctx.at(path),
                            fix=type_fix(path, "a list", "[a, b]"))
        return [coerce(v, args[0], f"{path}[{i}]", ctx) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{path}: expected a mapping, got {_describe(value)}", where=ctx.at(path),
                            fix=type_fix(path, "a mapping", "{key: value}"))
        return {str(k): coerce(v, args[1], f"{path}.{k}", ctx) for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{path}: expected true or false, got {_describe(value)}", where=ctx.at(path),
                        fix=type_fix(path, "true or false", "true"))
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        number = _as_number(value)
        if number is not None and float(number).is_integer():
            return int(number)
        raise UserError(f"{path}: expected an integer, got {_describe(value)}", where=ctx.at(path),
                        fix=type_fix(path, "an integer", "1000"))
    if tp is float:
        number = _as_number(value)
        if number is not None:
            return float(number)
        raise UserError(f"{path}: expected a number, got {_describe(value)}", where=ctx.at(path),
                        fix=type_fix(path, "a number", "1e-4"))
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise UserError(f"{path}: expected a string, got {_describe(value)}", where=ctx.at(path),
                        fix=type_fix(path, "a string"))
    raise TypeError(f"recipe field {path} has an unsupported type {tp!r}")  # a bug, not user input


def _key_of(path: str) -> str:
    """The key that `bertcli explain` knows for a value's path: train.phases[0].x -> train.phases."""
    return re.split(r"\[", path, maxsplit=1)[0]


def type_fix(path: str, expected: str, example: str | None = None) -> str:
    """The fix line of a value of the wrong type: what to give, an example, where its help is."""
    example = f", e.g. --set {_key_of(path)}={example}" if example and "[" not in path else ""
    return f"give {path} {expected}{example}; `bertcli explain {_key_of(path)}` shows its type and default"


def _as_number(value: Any) -> float | int | None:
    # PyYAML reads `1e-4` (no dot) as a string; accept it as the number everyone means.
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value.replace("_", ""))
        except ValueError:
            return None
    return None


_BOUNDS = (("ge", lambda v, b: v >= b, ">="), ("gt", lambda v, b: v > b, ">"), ("le", lambda v, b: v <= b, "<="))


def check_value(value: Any, f: dataclasses.Field, path: str, where: str) -> None:
    """The one check every number of every section goes through (at load time with the line of
    the key, and again on the resolved recipe): finite, and within the field's declared bounds
    (`ge` / `gt` / `le` metadata). A nan compares false with every bound, so finiteness comes
    first: an unbounded float must not let nan or inf through either."""
    if isinstance(value, dict):
        numbers = [(f"{path}.{k}", v) for k, v in value.items()]
    else:
        numbers = [(path, v) for v in (value if isinstance(value, list) else [value])]
    for path, v in numbers:
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            raise UserError(f"{path}: must be a finite number, got {v}", where=where,
                            fix="nan and inf are not settings; give a number")
        for key, ok, word in _BOUNDS:
            bound = f.metadata.get(key)
            if bound is not None and not ok(v, bound):
                raise UserError(f"{path}: must be {word} {bound}, got {show_number(v)}", where=where,
                                fix=f"give {path} a value {word} {bound}; `bertcli explain {_key_of(path)}` says what it does")


def range_words(metadata) -> str:
    """A field's declared range in words ("at least 1, at most 2147483647"; "" when none), for
    a flag's --help and `bertcli explain`."""
    words = {"ge": "at least", "gt": "more than", "le": "at most"}
    return ", ".join(f"{words[k]} {metadata[k]}" for k in words if metadata.get(k) is not None)


def show_number(v: int | float) -> str:
    """A number as a message shows it: `1e308` read as an integer has 309 digits; past 2^53 it is
    shown as a float would be."""
    return f"{float(v):.6g}" if isinstance(v, int) and abs(v) > 2**53 else str(v)


def check_values(obj: Any, prefix: str, where: str) -> None:
    """check_value on every field of a section tree (lists and mappings of sections included):
    values filled in by `resolve` or set from Python get the checks that loading gave the rest."""
    if not dataclasses.is_dataclass(obj):
        return
    for f in dataclasses.fields(obj):
        if f.metadata.get("internal"):
            continue
        value, path = getattr(obj, f.name), f"{prefix}{f.name}"
        check_value(value, f, path, where)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for k, v in items:
            check_values(v, f"{path}.{k}." if isinstance(value, dict) else f"{path}[{k}].", where)
        check_values(value, path + ".", where)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    return f"{type(value).__name__} {value!r}"


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, str(tp))


def pretty_type(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " | ".join(pretty_type(a) for a in inner) + (" | null" if type(None) in args else "")
    if origin is Literal:
        return " | ".join(map(str, args))
    if origin is list:
        return f"list of {pretty_type(args[0])}"
    if origin is dict:
        return f"mapping to {pretty_type(args[1])}"
    if dataclasses.is_dataclass(tp):
        return "section"
    return getattr(tp, "__name__", str(tp))
