"""The built-in corpus: English prose every Python installation carries, so the quickstart needs
no download.

Two parts, in a fixed order: the language reference topics of `pydoc_data.topics` (one document
per topic), then the docstrings of the standard library (one document per module: the module
docstring followed by its classes' and functions' docstrings), read with `ast` from the source
files, in sorted path order, never importing a module. About 2 MB of text.

Docstrings and topics are reStructuredText-ish: code samples, doctests, grammar rules, tables
and parameter lists sit between the prose. `clean_text` keeps paragraphs that read as sentences
(reflowed onto one line, inline markup removed) and drops the rest, so the tokenizer and the
sentence-pair builder see language, not code.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

# Bump when the cleaning changes, so cached corpora built by an older version are rebuilt.
BUILTIN_VERSION = 2  # 2: bullets' wrapped lines joined, more code dropped

# Standard-library folders that hold tests, generated tables or demo code rather than prose.
_SKIP_PARTS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__",
               "encodings", "turtledemo", "ensurepip", "pydoc_data"}

_ROLE = re.compile(r":[\w.+-]+(?::[\w.+-]+)?:`(~?)([^`<]*?)\s*(?:<[^>`]*>)?`")
_LITERAL = re.compile(r"``([^`]+)``")
_LINK = re.compile(r"`([^`<]+?)\s*(?:<[^>`]*>)?`_{1,2}")
_DEFAULT_ROLE = re.compile(r"`([^`]+)`")
_EMPHASIS = re.compile(r"(?<![\w*])\*{1,2}([^*\s][^*]*?)\*{1,2}(?![\w*])")
_BULLET = re.compile(r"^(?:[-*+•]|\d{1,2}[.)]|\([a-z0-9]\)|\[\d+\])\s+")
_RULE = re.compile(r"^[\W_]{3,}$")  # ====, ----, ****, -[ Footnotes ]- style lines
_WORD_EDGE = "\"'“”‘’()[]*,.;:!?"
_PROSE_WORD = re.compile(r"^[A-Za-z][a-z'’-]*$")
# Code that slips past the word count: a statement keyword opening the paragraph, annotations,
# triple quotes, comparison operators, a trailing comment.
_CODE = re.compile(r"""^(?:def|class|import|from|return|raise|lambda|async|await|yield)\s|->|'''|\"\"\"|[=!<>]=|\s#\s""")


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def fingerprint() -> dict:
    """What the built-in corpus depends on: the Python version and this module's cleaning."""
    return {"builtin": BUILTIN_VERSION, "python": sys.version, "stdlib": str(stdlib_dir())}


def stdlib_files() -> list[Path]:
    root = stdlib_dir()
    files = []
    for folder, dirs, names in os.walk(root):
        # prune while walking: site-packages alone can hold hundreds of thousands of files
        dirs[:] = [d for d in dirs if d not in _SKIP_PARTS and not d.startswith(("config-", "."))]
        files += [Path(folder, n) for n in names if n.endswith(".py") and not n.startswith("_sysconfigdata")]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def iter_documents() -> Iterator[tuple[str, str]]:
    """(name, text) of each built-in document; paragraphs one per line, blank line between."""
    from pydoc_data.topics import topics

    for name in sorted(topics):
        text = clean_text(topics[name])
        if text:
            yield f"pydoc:{name}", text
    root = stdlib_dir()
    for path in stdlib_files():
        text = clean_text("\n\n".join(module_docstrings(path)))
        if text:
            yield f"stdlib:{path.relative_to(root).as_posix()}", text


def module_docstrings(path: Path) -> list[str]:
    """Docstrings of a module and its classes and functions, in source order (never imported)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return []
    docs = []

    def visit(node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        doc = ast.get_docstring(node, clean=True)
        if doc:
            docs.append(doc)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child)

    visit(tree)
    return docs


def clean_text(text: str) -> str:
    """Keep the prose paragraphs of a docstring or topic, reflowed one per line."""
    return "\n\n".join(p for p in (_inline(p) for p in paragraphs(text)) if is_prose(p))


def paragraphs(text: str) -> Iterator[str]:
    """Split reST-like text into paragraphs (lists of lines joined by spaces), dropping doctests,
    literal blocks after `::`, section rules and table borders."""
    block: list[str] = []
    literal_indent: int | None = None  # inside a `::` literal block: lines indented deeper than this
    in_doctest = False
    indent_of_block = 0
    continuation = -1  # indent of a bullet's wrapped lines ("- Return a ... is a\n  syntax error")

    def flush() -> Iterator[str]:
        nonlocal block
        if block:
            yield " ".join(block)
        block = []

    for raw in text.expandtabs(8).splitlines():
        line = raw.strip()
        indent = len(raw) - len(raw.lstrip())
        if not line:
            in_doctest = False
            yield from flush()
            continue
        if literal_indent is not None:
            if indent > literal_indent:
                continue
            literal_indent = None
        if in_doctest or line.startswith((">>>", "... ", "$ ", "% ")) or line == "...":
            in_doctest = True  # a doctest and its output run to the next blank line
            yield from flush()
            continue
        if _RULE.match(line) or line.startswith(("+--", "|", "..", "-[")):
            yield from flush()  # section underline, table border, reST directive or comment
            continue
        if block and indent != indent_of_block and indent != continuation:
            yield from flush()  # definition-list bodies and nested blocks become their own paragraph
        bullet = _BULLET.match(line)
        if bullet:
            yield from flush()
            line = line[bullet.end():]
            continuation = indent + bullet.end()
        elif not block:
            continuation = -1
        if not block:
            indent_of_block = indent
        if line.endswith("::"):
            literal_indent = indent
            line = line[:-2].rstrip()
            line = line + ":" if line and line[-1].isalnum() else line
        if line:
            block.append(line)
    yield from flush()


def _inline(text: str) -> str:
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    text = _LITERAL.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _EMPHASIS.sub(r"\1", text)
    text = _DEFAULT_ROLE.sub(r"\1", text)
    text = text.replace("\\", "")
    text = " ".join(text.split())
    if text and text[-1] not in ".!?\"')":
        text = text.rstrip(":;,") + "."
    return text


def is_prose(text: str) -> bool:
    """A paragraph reads as language: at least four plain words, and most of its words plain
    (identifiers with dots, underscores, brackets and operators are what code looks like)."""
    words = text.split()
    if len(words) < 4 or _CODE.search(text):
        return False
    plain = sum(1 for w in words if _PROSE_WORD.match(w.strip(_WORD_EDGE)))
    return plain >= 4 and plain >= 0.7 * len(words)
