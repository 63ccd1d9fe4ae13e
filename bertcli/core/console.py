"""Shared terminal output: rich on a TTY, plain lines otherwise (CI logs, pipes, files).

Stages report through these helpers only, so every command looks alike and nothing prints
from worker processes or non-zero distributed ranks.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from typing import Protocol

from rich.console import Console
from rich.markup import escape as escape_markup
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table


def _console(stderr: bool) -> Console:
    """A console that wraps only on a terminal. In a pipe, a file, `tee`, a SLURM or CI log every
    record stays one line, never wrapped or padded to rich's default 80 columns, so grep and log
    tools see whole lines."""
    c = Console(stderr=stderr, highlight=False)
    if not c.is_terminal:
        c.soft_wrap = True
    return c


# Results go to stdout; progress, logs and errors to stderr, so `--json` output stays clean.
out = _console(stderr=False)
err = _console(stderr=True)


def quiet() -> bool:
    """True on distributed ranks other than 0, which must not print."""
    return int(os.environ.get("RANK", "0")) != 0


def interactive() -> bool:
    return err.is_terminal and not quiet()


def log(message: str) -> None:
    """A plain log line on stderr (rank 0 only)."""
    if not quiet():
        err.print(message, markup=False)


# A stage in a log prints one line when it ends; one that runs longer than this also prints a
# progress line every PLAIN_EVERY_S (on a busy machine a 10-second interval printed most stages
# twice: once running, once done).
PLAIN_EVERY_S = 30.0


class Advancing(Protocol):
    """What `progress` yields: a count that moves on by `n`."""

    def advance(self, n: float = 1) -> None: ...


class _PlainTask:
    """Progress for non-TTY output: one line at the end, and a line every `every_s` seconds
    before it for a stage that runs that long."""

    def __init__(self, description: str, total: float | None, every_s: float = PLAIN_EVERY_S):
        self.description, self.total, self.every_s = description, total, every_s
        self.done = 0.0
        self.start = self.last = time.monotonic()

    def advance(self, n: float = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self._print()

    def _print(self, final: bool = False) -> None:
        if quiet():
            return
        total = f"/{self.total:,.0f}" if self.total else ""
        word = "done" if final else "..."
        err.print(f"{self.description}: {self.done:,.0f}{total} {word} ({time.monotonic() - self.start:.1f}s)",
                  markup=False)


class _RichTask:
    def __init__(self, progress: Progress, task_id):
        self.progress, self.task_id = progress, task_id

    def advance(self, n: float = 1) -> None:
        self.progress.advance(self.task_id, n)


def _bar_columns(description: str, total: float | None, width: int) -> tuple[str, list]:
    """The live bar's columns, and the description cut (with an ellipsis) so that the line fits
    `width`: counts and times are never the part that is cut. Without a total (documents of a
    corpus being read) there is no bar, no `N/?` and no time left, only the count so far."""
    if total is None:
        columns = [SpinnerColumn(), TextColumn("[bold]{task.description}"), TextColumn("{task.completed:,.0f}"),
                   TextColumn("elapsed"), TimeElapsedColumn()]
        fixed = 1 + 12 + 7 + 7                                   # spinner, count, "elapsed", 0:00:00
    else:
        columns = [SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(bar_width=20),
                   MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("<"), TimeRemainingColumn()]
        fixed = 1 + 20 + 2 * len(f"{total:.0f}") + 1 + 7 + 1 + 7   # elapsed < left

    room = max(8, width - fixed - len(columns))                  # one space between columns
    if len(description) > room:
        description = description[:room - 1].rstrip() + "…"
    return description, columns


@contextlib.contextmanager
def progress(description: str, total: float | None = None,
             rich_console: Console | None = None) -> Iterator[_PlainTask | _RichTask]:
    """A progress bar on a TTY, plain lines otherwise; yields an object with advance(n).
    `rich_console`: where the bar goes (default: stderr), for tests."""
    target = rich_console or err
    if target.is_terminal and not quiet():
        shown, columns = _bar_columns(description, total, target.width)
        with Progress(*columns, console=target, transient=False) as p:
            yield _RichTask(p, p.add_task(escape_markup(shown), total=total))
    else:
        task = _PlainTask(description, total)
        yield task
        task._print(final=True)


def summary(title: str, rows: Sequence[tuple[str, object]]) -> None:
    """A two-column summary table (stdout)."""
    if quiet():
        return
    table([("", "bold"), ("", "")], [(key, fmt(value)) for key, value in rows], title=title)


# Where tables go: stdout, or stderr while a command prints its figures as JSON on stdout (--json).
_tables: list[Console] = []


@contextlib.contextmanager
def tables_to_stderr() -> Iterator[None]:
    """Print tables and summaries on stderr inside the block, so stdout holds only JSON."""
    _tables.append(err)
    try:
        yield
    finally:
        _tables.pop()


def table(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]], title: str | None = None) -> None:
    """Rows under (header, style) columns (stdout, or stderr under tables_to_stderr; headers all
    empty: none shown). A rich table on a terminal; elsewhere plain lines, the columns aligned but
    the last one never padded, so no line carries trailing spaces and none is wrapped."""
    out = _tables[-1] if _tables else globals()["out"]
    headers = [h for h, _ in columns]
    if out.is_terminal:
        t = Table(title=title, show_header=any(headers), title_justify="left", box=None, pad_edge=False)
        for header, style in columns:
            t.add_column(header, style=style or None, overflow="fold")
        for row in rows:
            t.add_row(*(_escape(str(cell)) for cell in row))
        out.print(t)
        return
    lines = ([headers] if any(headers) else []) + [[str(cell) for cell in row] for row in rows]
    widths = [max((len(line[i]) for line in lines), default=0) for i in range(len(columns) - 1)]
    if title:
        out.print(title, markup=False)
    for line in lines:
        cells = [cell.ljust(w) for cell, w in zip(line, widths)] + line[len(widths):]
        out.print("  ".join(cells).rstrip(), markup=False)


def entries(rows: Sequence[tuple[str, str, str]], width: int | None = None) -> None:
    """A list of (term, detail, text) entries on stdout, the way `git help config` lists
    options: the term and its detail on one line, the text wrapped beneath it, indented. Lines
    fit `width` (the terminal's, at most 100; 80 in a pipe unless COLUMNS says otherwise);
    a term is never split, so it can be copied whole, and nothing is padded."""
    import textwrap

    width = width or min(out.width, 100)
    indent = " " * 4

    def wrap(text: str, first: str, rest: str) -> list[str]:
        return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest,
                             break_long_words=False, break_on_hyphens=False) or [first.rstrip()]

    for i, (term, detail, text) in enumerate(rows):
        head = f"{term}  {detail}".rstrip()
        lines = [head] if len(head) <= width or not detail else [term, *wrap(detail, indent, indent)]
        lines += wrap(text, indent, indent) if text else []
        if i:
            out.print("", markup=False)
        for line in lines:
            out.print(line.rstrip(), markup=False, soft_wrap=True)


def fmt(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    return str(value)


def print_error(what: str, where: str | None, fix: str | None) -> None:
    """One error message: what, where, how to fix (stderr)."""
    err.print(f"[bold red]error:[/] {_escape(what)}")
    if where:
        err.print(f"  [bold]where:[/] {_escape(where)}")
    if fix:
        err.print(f"  [bold]fix:[/] {_escape(fix)}")


def _escape(text: str) -> str:
    return escape_markup(text)


@contextlib.contextmanager
def quiet_datasets() -> Iterator[None]:
    """datasets' own tqdm bars and info logs off while we report progress ourselves."""
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    level = datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        yield
    finally:
        datasets.logging.set_verbosity(level)
        if not was_disabled:
            datasets.enable_progress_bars()
