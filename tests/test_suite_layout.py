"""The suite's own shape: a test module holds tests and imports no other test module (what
several share is in helpers/ or, for fixtures, conftest.py), and each shared helper is defined once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tomllib

TESTS = Path(__file__).resolve().parent


def _imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, top-level module name) of every import, in functions too."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def _has_tests(tree: ast.Module) -> bool:
    return any((isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test"))
               or (isinstance(n, ast.ClassDef) and n.name.startswith("Test")) for n in tree.body)


def problems(tests: Path) -> list[str]:
    """Test modules that import a test module, or hold no test."""
    modules = {p.stem for p in tests.glob("test_*.py")}
    out = []
    for path in sorted(tests.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(tests).as_posix()
        out += [f"{rel}:{line} imports the test module {name}" for line, name in _imports(tree) if name in modules]
        if path.parent == tests and path.stem in modules and not _has_tests(tree):
            out.append(f"{rel} holds no test (shared pieces go in helpers/)")
    return out


def test_no_test_module_imports_another_and_every_test_module_holds_tests():
    assert problems(TESTS) == []


def test_the_check_finds_an_import_of_a_test_module_and_a_module_without_tests(tmp_path):
    (tmp_path / "helpers").mkdir()
    (tmp_path / "test_a.py").write_text("def test_a():\n    from test_b import X\n")
    (tmp_path / "test_b.py").write_text("X = 1\n")
    (tmp_path / "helpers" / "h.py").write_text("import test_a\n")
    assert problems(tmp_path) == ["helpers/h.py:1 imports the test module test_a", "test_a.py:2 imports the test module test_b",
                                  "test_b.py holds no test (shared pieces go in helpers/)"]


def test_each_shared_helper_is_defined_once_and_no_fixture_import_needs_an_f811_ignore():
    for name in ("tiny_section", "one_thread", "exported"):
        where = [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("*.py")
                 if re.search(rf"^\s*def {name}\(", p.read_text(encoding="utf-8"), re.M)]
        assert len(where) == 1, (name, where)
    ruff = tomllib.loads((TESTS.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]
    assert not [f for f, codes in ruff.get("per-file-ignores", {}).items() if "F811" in codes]
    assert not [p.name for p in TESTS.rglob("*.py") if "F811" in p.read_text(encoding="utf-8")
                and p.name != Path(__file__).name]
