"""The package's one JSON writer. Every JSON file, JSON-lines record and JSON text bertcli
prints or hands to a library goes through `dumps` (tests/test_json_writer.py fails on any other
`json.dump(s)` in the package), with `allow_nan=False`: Python's json writes nan and inf as
`NaN` / `Infinity`, which no strict JSON reader accepts, so a non-finite number would make a
result file unreadable, or look like a result.

A value that can be non-finite for a reason the user should see (a perplexity over no rows)
is written as `null` with the reason beside it (`number_or_null`). Anywhere else a non-finite
number is a bug: `dumps` raises, naming where in the object it sits, instead of writing it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any


def dumps(obj: Any, *, indent: int | None = None, sort_keys: bool = False, ensure_ascii: bool = True,
          default: Callable[[Any], Any] | None = None) -> str:
    """`obj` as strict JSON text (json.dumps' keywords, allow_nan fixed to False)."""
    try:
        return json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii, default=default,
                          allow_nan=False)
    except ValueError as e:
        where = _nonfinite_path(obj, "$")
        if where is None:
            raise
        raise ValueError(f"a non-finite number at {where} would be written as JSON (a bug: write null with "
                         f"the reason beside it, or refuse the setting)") from e


def line(obj: Any) -> str:
    """One JSON-lines record: compact strict JSON and a newline."""
    return dumps(obj, ensure_ascii=False) + "\n"


def number_or_null(key: str, value: float | None, reason: str) -> dict[str, Any]:
    """`{key: value}` for a finite number; `{key: null, key_reason: reason}` otherwise (why the
    number does not exist: "no rows were scored", not a NaN that reads as a result)."""
    if value is not None and math.isfinite(value):
        return {key: value}
    return {key: None, f"{key}_reason": reason}


def quote(value: Any) -> str:
    """A value as JSON text inside a message (a string in quotes, a list in brackets); a value
    JSON cannot hold (nan, an object) is shown by repr, since a message must never fail."""
    try:
        return dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _nonfinite_path(obj: Any, path: str) -> str | None:
    """The path ($.a[3].b) of the first nan or inf in `obj`, or None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return f"{path} ({obj})"
    if isinstance(obj, dict):
        items: Any = ((f"{path}.{k}", v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple)):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(obj))
    else:
        return None
    for p, v in items:
        found = _nonfinite_path(v, p)
        if found is not None:
            return found
    return None
