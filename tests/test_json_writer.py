"""One JSON writer (bertcli/core/jsonout.py): no other `json.dump` / `json.dumps` call anywhere
in the package (read with `ast`, so an alias or `from json import dumps` is caught too), and the
writer refuses nan and inf instead of writing `NaN`, which is not JSON."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

from bertcli.core import jsonout

PACKAGE = Path(__file__).resolve().parents[1] / "bertcli"
WRITER = PACKAGE / "core" / "jsonout.py"


def json_writes(tree: ast.AST) -> list[int]:
    """Lines that call json.dump(s), however json or its functions were imported."""
    modules, functions = {"json"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "json"}
        elif isinstance(node, ast.ImportFrom) and node.module == "json":
            functions |= {a.asname or a.name for a in node.names if a.name in ("dump", "dumps")}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("dump", "dumps") and isinstance(f.value, ast.Name) \
                and f.value.id in modules:
            lines.append(node.lineno)
        elif isinstance(f, ast.Name) and f.id in functions:
            lines.append(node.lineno)
    return lines


def test_no_json_dump_outside_the_one_writer():
    found = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in sorted(PACKAGE.rglob("*.py")) if p != WRITER
             for line in json_writes(ast.parse(p.read_text(encoding="utf-8")))]
    assert found == [], f"write JSON through bertcli.core.jsonout, not json.dump(s): {found}"


def test_the_scan_would_see_each_spelling():
    src = "import json\nimport json as j\nfrom json import dumps as d, dump\njson.dumps(1)\nj.dump(1, f)\nd(1)\ndump(1, f)\n"
    assert json_writes(ast.parse(src)) == [4, 5, 6, 7]
    assert json_writes(ast.parse("import simplejson\nsimplejson.x(1)\nfoo.dumps(1)\n")) == []


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_writer_refuses_non_finite_numbers_and_says_where(bad):
    with pytest.raises(ValueError, match=r"\$\.scores\[1\]"):
        jsonout.dumps({"ok": 1.0, "scores": [0.5, bad]})
    assert json.dumps(bad) in ("NaN", "Infinity", "-Infinity")   # what json alone would have written


def test_null_with_the_reason_beside_it():
    assert jsonout.number_or_null("ppl", 3.5, "unused") == {"ppl": 3.5}
    for missing in (None, math.nan, math.inf):
        assert jsonout.number_or_null("ppl", missing, "no rows") == {"ppl": None, "ppl_reason": "no rows"}
    text = jsonout.line({"a": None, "b": "é"})
    assert text == '{"a": null, "b": "é"}\n' and json.loads(text) == {"a": None, "b": "é"}
    assert jsonout.quote(math.nan) == "nan" and jsonout.quote([1, "x"]) == '[1, "x"]'
