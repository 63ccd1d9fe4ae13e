"""The docs name what exists: every repository path, test, script, module and link (with its
heading) that README.md and docs/*.md name is checked against the tree, and every `bertcli`
example in their bash blocks against the command's real options, so a moved file or a renamed
flag breaks this test, not the reader. design.md's layout block names every package and module;
the README stays a guide (at most 300 lines) that shows every command of `bertcli --help` and
keeps the quickstart's two lines exactly as CI runs them."""

from __future__ import annotations

import ast
import re
import shlex
from functools import cache
from pathlib import Path

import pytest
import typer.main

from bertcli.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# A path is a token that starts with one of these folders (in prose, in backticks or in code).
TOP = ("bertcli", "tests", "scripts", "recipes", "docs", ".ci")
_TOP = "|".join(re.escape(t) for t in TOP)
PATH = re.compile(rf"(?<![\w./~-])((?:{_TOP})/[^\s`'\")(,;|\]]*)")
# Bare names that can only mean one folder: `test_x.py[::test_y]` and `bench_x.py`.
TEST = re.compile(r"(?<![\w/])(test_\w+\.py)(?:::(\w+))?")
BENCH = re.compile(r"(?<![\w/])(bench_\w+\.py)")
# A relative source path such as `export/fuse.py` or `serve/embed.py` (inside bertcli/).
RELATIVE = re.compile(r"`((?:\w+/)+\w+\.py)\b")
# A dotted module name such as `bertcli.core.errors.UserError`.
DOTTED = re.compile(r"(?<![\w.])bertcli(?:\.\w+)+")
LINK = re.compile(r"\]\(([^)\s]+)\)")

# Paths under the folders above that a user creates, so the tree never holds them. Each is named
# with where the docs use it; add one only for such a path.
USER_PATHS: frozenset[str] = frozenset()


def _lines(doc: Path) -> list[tuple[int, str]]:
    return list(enumerate(doc.read_text(encoding="utf-8").splitlines(), 1))


def _exists(path: str) -> bool:
    """`path` (repository-relative) exists; `*` and `<placeholder>` match any name."""
    pattern = re.sub(r"<[^>]+>", "*", path).rstrip("/")
    if "*" in pattern:
        return any(ROOT.glob(pattern))
    return (ROOT / pattern).exists()


def _defines(module: Path, name: str) -> bool:
    """`name` is bound at the top level of `module`, or handed out by its lazy __getattr__."""
    source = module.read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return "def __getattr__" in source and re.search(rf"[\"']{name}[\"']", source) is not None


def _module_exists(dotted: str) -> bool:
    """`bertcli.a.b[.name]`: a module or package, or one name defined in one."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:n])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            rest = parts[n:]
            return not rest or (len(rest) == 1 and _defines(module, rest[0]))
    return False


@cache
def _anchors(doc: Path) -> frozenset[str]:
    """GitHub's anchors for the headings of `doc`: lower case, punctuation dropped, spaces to -."""
    found: list[str] = []
    fence = False
    for _, line in _lines(doc):
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            n = found.count(slug)
            found.append(slug)
            if n:
                found.append(f"{slug}-{n}")
    return frozenset(found)


def _broken(doc: Path) -> list[str]:
    where = doc.relative_to(ROOT)
    bad: list[str] = []
    for no, line in _lines(doc):
        for m in PATH.finditer(line):
            path = re.split(r"::|:|#", m.group(1))[0].rstrip(".")
            if path not in USER_PATHS and not _exists(path):
                bad.append(f"{where}:{no}: {path}")
            test = re.search(r"::(\w+)", m.group(1))
            if test and _exists(path) and not _defines(ROOT / path, test.group(1)):
                bad.append(f"{where}:{no}: {m.group(1)} (no such test)")
        for m in TEST.finditer(line):
            if not (ROOT / "tests" / m.group(1)).is_file():
                bad.append(f"{where}:{no}: tests/{m.group(1)}")
            elif m.group(2) and not _defines(ROOT / "tests" / m.group(1), m.group(2)):
                bad.append(f"{where}:{no}: {m.group(0)} (no such test)")
        for m in BENCH.finditer(line):
            if not (ROOT / "scripts" / m.group(1)).is_file():
                bad.append(f"{where}:{no}: scripts/{m.group(1)}")
        for m in RELATIVE.finditer(line):
            if not m.group(1).startswith(tuple(f"{t}/" for t in TOP)) and not (ROOT / "bertcli" / m.group(1)).is_file():
                bad.append(f"{where}:{no}: bertcli/{m.group(1)}")
        for m in DOTTED.finditer(line):
            if not _module_exists(m.group(0).rstrip(".")):
                bad.append(f"{where}:{no}: {m.group(0)} (no such module or name)")
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (doc.parent / file).resolve() if file else doc
            if not linked.exists():
                bad.append(f"{where}:{no}: link {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                bad.append(f"{where}:{no}: link {target} (no such heading)")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_path_a_doc_names_exists(doc):
    bad = _broken(doc)
    assert not bad, "the docs name what does not exist:\n" + "\n".join(bad)


def test_the_path_check_finds_what_is_missing(tmp_path):
    """The checker itself: each kind of reference, once true and once broken."""
    doc = ROOT / "docs" / "_probe_for_test_docs.md"
    good = ("`bertcli/finetune/task.py:51` `tests/test_docs.py::test_every_path_a_doc_names_exists` "
            "`export/fuse.py` `bench_train.py` `bertcli.core.errors.UserError` `recipes/<task>.yaml` "
            "[guide](guide.md#chinese) bertcli/core/outputs.py.")
    bad = ("`bertcli/sections.py` `tests/test_docs.py::test_nothing` `export/decode.py` `bench_nothing.py` "
           "`bertcli.errors.UserError` `recipes/<task>.toml` [guide](guide.md#no-such-heading) "
           "[x](nowhere.md) test_nothing.py")
    try:
        doc.write_text(f"# probe\n{good}\n{bad}\n", encoding="utf-8")
        found = _broken(doc)
    finally:
        doc.unlink()
    assert [f.split(":")[1] for f in found] == ["3"] * 9, found


def _layout() -> dict[str, set[str]]:
    """design.md's layout block: each `bertcli/...` folder and the words of its entry."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    entries: dict[str, set[str]] = {}
    folder = None
    for line in block.splitlines():
        head = re.match(r"(bertcli/(?:\w+/)*)\s", line + " ")
        if head:
            folder = head.group(1)
            entries[folder] = set()
        elif line.strip() and not line.startswith(" "):
            folder = None
        if folder:
            entries[folder] |= set(re.findall(r"\w+", line[len(head.group(1)):] if head else line))
    return entries


def test_the_layout_names_every_package_and_module():
    entries = _layout()
    missing = []
    for package in sorted((ROOT / "bertcli").rglob("__init__.py")):
        folder = package.parent.relative_to(ROOT).as_posix() + "/"
        if folder not in entries:
            missing.append(f"{folder} (the whole folder)")
            continue
        for module in sorted(package.parent.glob("*.py")):
            if module.stem != "__init__" and module.stem not in entries[folder]:
                missing.append(folder + module.name)
    assert not missing, "docs/design.md's layout block does not name:\n" + "\n".join(missing)


README = ROOT / "README.md"
QUICKSTART = ("pip install torch==2.13.0 -e . && bertcli pretrain --recipe bert-tiny",
              "pip install torch==2.13.0 -e '.[test]' && python -m pytest -q -n 2 --dist loadfile")


def test_the_readme_is_a_guide_of_at_most_300_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move detail into docs/ and link it"


def test_the_readme_quickstart_is_what_ci_runs():
    readme = README.read_text(encoding="utf-8").splitlines()
    for command in QUICKSTART:
        assert command in readme, command
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert QUICKSTART[1] in ci, "CI runs the README's test command as written"


def _commands() -> list[str]:
    """Every leaf command of `bertcli --help`, groups spelled out (`finetune glue`)."""
    def walk(cmd, prefix: str) -> list[str]:
        subs = getattr(cmd, "commands", None)
        if subs is None:
            return [prefix]
        return [name for sub, c in subs.items() for name in walk(c, f"{prefix} {sub}".strip())]

    return walk(_root(), "")


def test_the_readme_shows_every_command_with_an_example():
    text = README.read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```bash\n(.*?)```", text, flags=re.S))
    commands = _commands()
    assert len(commands) >= 19 and "finetune glue" in commands, commands
    missing = [c for c in commands if not re.search(rf"(^|\s)bertcli {re.escape(c)}(\s|$)", code, flags=re.M)]
    assert not missing, f"README.md has no example of: {missing}"


def _bash_lines(doc: Path) -> list[tuple[int, str]]:
    """The lines of `doc`'s bash blocks, continuation lines joined (numbered by their first line)."""
    found: list[tuple[int, str]] = []
    lang = None
    for no, line in _lines(doc):
        if line.lstrip().startswith("```"):
            lang = line.strip()[3:] if lang is None else None
        elif lang in ("bash", "sh"):
            if found and found[-1][1].endswith("\\"):
                found[-1] = (found[-1][0], found[-1][1][:-1] + " " + line.strip())
            else:
                found.append((no, line.strip()))
    return found


@cache
def _root():
    """`bertcli` as click sees it (built once: typer builds the whole tree each time)."""
    return typer.main.get_command(app)


def _unknown_option(line: str) -> str | None:
    """The first option a `bertcli ...` command line gives that its command does not have."""
    m = re.search(r"(?:^|\s)(?:-m\s+)?bertcli\s+([^#|;&>]*)", line)
    if m is None:
        return None
    args = shlex.split(m.group(1))
    cmd, path = _root(), []
    while args and hasattr(cmd, "commands") and args[0] in cmd.commands:
        cmd, path, args = cmd.commands[args[0]], [*path, args[0]], args[1:]
    if not path:
        return None
    try:
        cmd.make_context(" ".join(path), list(args))
    except Exception as e:      # click's own classes (typer may vendor click): told apart by name
        if type(e).__name__ in ("NoSuchOption", "BadOptionUsage"):
            return f"bertcli {' '.join(path)}: {e}"
    return None


def test_every_example_uses_options_its_command_has():
    """A renamed or removed flag shows up here, not in a reader's terminal."""
    assert _unknown_option("bertcli features -c DIR --input a.txt --out f.parquet --no-such-flag")
    assert _unknown_option("bertcli finetune glue -c DIR -t rte -d glue --no-such-flag")
    assert _unknown_option("bertcli features -c DIR --input a.txt --out f.parquet --layers -1,-2") is None
    bad = [f"{doc.relative_to(ROOT)}:{no}: {problem}" for doc in DOCS for no, line in _bash_lines(doc)
           if (problem := _unknown_option(line))]
    assert not bad, "examples with options their command does not have:\n" + "\n".join(bad)
