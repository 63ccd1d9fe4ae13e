"""Checked values from records: what the user wrote, or one message saying why not.

A missing field, a null, or a value of the wrong JSON type is a UserError naming the field and
where the record is (`file:line`, or `source row i`). Nothing is converted by guessing: a list
is not a text (its repr would be trained on), an object is not a label, a string is not a list
of tokens (it would be split into characters), "false" is not a boolean.
"""

from __future__ import annotations

import math
from typing import Any

from bertcli.core.errors import UserError

_TYPES = ((type(None), "null"), (bool, "a boolean"), (int, "an integer"), (float, "a number"),
          (str, "a string"), (list, "an array"), (tuple, "an array"), (dict, "an object"))


def json_type(value: Any) -> str:
    """`value`'s JSON type in words (bool before int: True is an int in Python)."""
    for kind, name in _TYPES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def get(rec: dict, name: str, where: str, flag: str | None = None) -> Any:
    """The value of field `name`: present and not null."""
    if name not in rec:
        found = ", ".join(map(str, rec)) or "none"
        raise UserError(f"no column {name!r} in this record", where=where,
                        fix=f"its fields are: {found}" + (f"; name the column with {flag}" if flag else ""))
    value = rec[name]
    if value is None:
        raise UserError(f"field {name!r} is null", where=where,
                        fix=f"give every record a value for {name!r}, or remove the records without one")
    return value


def _wrong(name: str, value: Any, want: str, where: str, fix: str | None = None) -> UserError:
    return UserError(f"field {name!r} is {json_type(value)} ({_show(value)}), not {want}", where=where,
                     fix=fix or f"write {name!r} as {want}")


def text(rec: dict, name: str, where: str, flag: str | None = None) -> str:
    """A text field: a string."""
    value = get(rec, name, where, flag)
    if not isinstance(value, str):
        raise _wrong(name, value, "a string", where,
                     f'write the text as one JSON string ("{name}": "..."); a list or number is not a text')
    return value


def optional_text(rec: dict, name: str | None, where: str, default: str) -> str:
    """An id-like field: a string or an integer, spelled as text; `default` when `name` is None."""
    if name is None:
        return default
    value = get(rec, name, where)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _wrong(name, value, "a string or an integer", where)
    return str(value)


def number(rec: dict, name: str, where: str, flag: str | None, what: str, fix: str) -> float:
    """A finite number: a JSON number, or a string holding one (as in .csv and .tsv); `what`
    names it in the message (a score, a regression label), `fix` says what to do."""
    value = get(rec, name, where, flag)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        x = float(value)
    elif isinstance(value, str):
        try:
            x = float(value)
        except ValueError:
            raise UserError(f"{what} {value!r} is not a number", where=where, fix=fix) from None
    else:
        raise _wrong(name, value, "a number", where, fix)
    if not math.isfinite(x):
        raise UserError(f"{what} {value!r} is {x}, not a finite number", where=where, fix=fix)
    return x


def label(rec: dict, name: str, where: str, regression: bool = False, flag: str | None = None) -> str | int | float:
    """A label: a string or an integer (an integral float counts as that integer, so 1 and 1.0
    from a parquet file are one class); for regression a finite number (or a string holding
    one, as in .csv and .tsv)."""
    if regression:
        return number(rec, name, where, flag, "regression label",
                      "regression needs numeric, finite labels: fix or remove that record, or drop --regression "
                      "to classify")
    value = get(rec, name, where, flag)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _wrong(name, value, "a string or an integer", where,
                     'a class label is a string ("positive") or an integer (1); lists and objects are not labels')
    if isinstance(value, float):
        if not value.is_integer():
            raise UserError(f"label {value!r} is a fractional number: a class label is a string or an integer",
                            where=where, fix="give classes as strings or integers, or pass --regression")
        return int(value)
    return value


def string_list(rec: dict, name: str, where: str) -> list[str]:
    """A list of strings (NER tokens, string tags)."""
    value = get(rec, name, where)
    if not isinstance(value, list):
        raise _wrong(name, value, "an array of strings", where,
                     f'write {name!r} as a JSON array, e.g. "{name}": ["John", "lives"] (a string is not split)')
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise UserError(f"item {i} of field {name!r} is {json_type(v)} ({_show(v)}), not a string", where=where,
                            fix=f"every item of {name!r} is a JSON string")
    return value


def boolean(rec: dict, name: str, where: str, default: bool) -> bool:
    """A JSON boolean; `default` when the field is absent ("false" the string is refused)."""
    if name not in rec:
        return default
    value = rec[name]
    if not isinstance(value, bool):
        raise _wrong(name, value, "a boolean (true or false)", where,
                     f'write "{name}": true or false, without quotes')
    return value


def integer(rec: dict, name: str, where: str) -> int:
    value = get(rec, name, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong(name, value, "an integer", where)
    return value


def check_classes(names, source: str, what: str = "training labels") -> None:
    """A label set that can train: at least two classes."""
    names = list(names)
    if len(names) < 2:
        only = f" ({names[0]!r})" if names else ""
        raise UserError(f"the {what} hold {len(names)} class{'es' if len(names) != 1 else ''}{only}: nothing to "
                        "learn", where=source,
                        fix="a classifier needs at least two classes in its training data (or --regression for "
                            "numbers)")


def text_column(values: list, name: str, source: str) -> list[str]:
    """A whole column of texts (parquet, datasets): every value a string."""
    for i, v in enumerate(values):
        if not isinstance(v, str):
            if v is None:
                raise UserError(f"field {name!r} is null", where=f"{source} row {i}",
                                fix=f"give every row a value for {name!r}, or remove the rows without one")
            raise _wrong(name, v, "a string", f"{source} row {i}")
    return values
