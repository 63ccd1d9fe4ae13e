"""Help that can be read and copied: `explain` lists each key with its type and default on its
line and the help wrapped beneath, at 80 columns on a terminal and in a pipe; `--help` shows no
`<bool>` / `<str>` type noise and keeps bracketed notes; a wrong value's message says how to fix it."""

from __future__ import annotations

import re

import pytest
from conftest import assert_user_error, run_cli

from bertcli.config.recipe import SECTIONS, explain

PIPE = {"COLUMNS": "80"}
TERMINAL = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "FORCE_COLOR": "1"}   # rich takes stdout for a terminal


def _entries(text: str) -> dict[str, list[str]]:
    """key -> its lines (the key line first): an entry starts at a line without indentation."""
    found: dict[str, list[str]] = {}
    key = None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            key = line.split("  ")[0]
            found[key] = [line]
        elif line and key:
            found[key].append(line)
    return found


@pytest.mark.parametrize("env", [PIPE, TERMINAL], ids=["pipe", "terminal"])
@pytest.mark.parametrize("section", ["finetune", "data", None])
def test_explain_is_a_readable_list_at_80_columns(env, section):
    r = run_cli("explain", *([section] if section else []), env=env)
    assert r.rc == 0, r.output
    assert "\x1b[" not in r.stdout
    lines = r.stdout.splitlines()
    assert all(len(ln) <= 80 and ln == ln.rstrip() for ln in lines), max(lines, key=len)
    entries = _entries(r.stdout)
    rows = explain(section)
    assert list(entries) == [key for key, *_ in rows]       # every key whole, at the start of its line
    for key, kind, default, text in rows:
        head = entries[key][0]
        detail = f"section: {default}" if kind == "section" else f"{kind}, default {default}"
        body = " ".join(ln.strip() for ln in entries[key][1:])
        if len(f"{key}  {detail}") <= 80:
            assert head == f"{key}  {detail}", head
        else:                                                 # a long default goes beneath, key alone
            assert head == key and body.startswith(detail), entries[key]
        assert body.endswith(text) and all(ln.startswith("    ") for ln in entries[key][1:]), entries[key]


def test_explain_without_section_lists_the_sections():
    out = _entries(run_cli("explain", env=PIPE).stdout)
    for name in SECTIONS:
        assert out[name][0] == f"{name}  section: bertcli explain {name}"
    assert "seed" in out and "output_dir" in out
    assert max(len(ln) for v in out.values() for ln in v) <= 80            # no 1,300-column rows


def test_explain_a_key_and_a_key_taken_for_a_section():
    r = run_cli("explain", "output_dir", env=PIPE)
    assert r.rc == 0 and r.stdout.startswith("output_dir  str | null, default null\n    Where the run"), r.output
    r = run_cli("explain", "finetune.ner.learning_rate", env=PIPE)
    assert r.rc == 0 and r.stdout.startswith("finetune.ner.learning_rate  "), r.output
    assert_user_error(run_cli("explain", "train.max_steps.x"), "train.max_steps is a key, not a section",
                      "fix: bertcli explain train.max_steps shows it")


@pytest.mark.parametrize("value,needles", [
    ("train.max_steps=abc", ("expected an integer", "fix: give train.max_steps an integer, e.g. --set train.max_steps=1000",
                             "bertcli explain train.max_steps")),
    ("train.max_steps=0", ("must be >= 1", "fix: give train.max_steps a value >= 1")),
    ("train.optimizer=adam", ("is not one of: adamw, lamb", "fix: give train.optimizer one of: adamw, lamb")),
    ("train.learning_rate=fast", ("expected a number", "fix: give train.learning_rate a number")),
])
def test_wrong_values_have_a_fix_line(tmp_path, value, needles):
    r = run_cli("pretrain", "-r", "bert-tiny", "--set", value, cwd=tmp_path)
    assert_user_error(r, *needles)


@pytest.mark.parametrize("env", [PIPE, TERMINAL], ids=["pipe", "terminal"])
@pytest.mark.parametrize("command", [[], ["pretrain"], ["predict"], ["finetune", "classify"], ["explain"], ["compare"]])
def test_help_shows_no_type_noise(env, command):
    r = run_cli(*command, "--help", env=env)
    assert r.rc == 0, r.output
    text = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout)
    assert not re.search(r"<(bool|str|path|int|float|list\[str\]|text)>", text), text
    assert all(len(ln) <= 80 for ln in text.splitlines())
    if command == ["predict"]:          # a flag's bounds are shown, not eaten as a markup tag
        assert re.search(r"--top-k +N +fill-mask: candidates per mask\. \[at", text), text
        assert re.search(r"--force {10,}Replace an existing --out file", text), text   # a flag has no type
    if command == ["pretrain"]:
        assert re.search(r"--set +-s +KEY=VALUE", text) and re.search(r"--recipe +-r +NAME\|FILE", text), text


@pytest.mark.parametrize("group", [[], ["finetune"]])
def test_command_lists_break_no_summary_mid_sentence(group):
    """Every command's summary (its docstring's first paragraph, wrapped at 100 columns in the
    source) is one line in the list at 400 columns, where each fits: no line of it ends where the
    docstring's line did ("SIGINT / SIGTERM" then "save a checkpoint"); and at 80 its rows read
    as the summary."""
    from bertcli.cli import app, finetune_app
    from bertcli.cli_help import summary as _summary

    commands = (finetune_app if group else app).registered_commands
    summaries = [_summary(c.help or c.callback.__doc__ or "") for c in commands]
    assert len(summaries) >= 5 and all(summaries)
    assert max(map(len, summaries)) < 350
    wide = run_cli(*group, "--help", env={"COLUMNS": "400"})
    assert wide.rc == 0, wide.output
    for s in summaries:
        assert s in wide.stdout, s                 # a line break inside would split it
    narrow = run_cli(*group, "--help", env=PIPE)
    rows = [ln.strip("│ ").rstrip() for ln in narrow.stdout.splitlines() if ln.startswith("│")]
    joined = " ".join(" ".join(r.split()) for r in rows)
    for s in summaries:
        assert s in joined, s                      # the rows of one command read as its summary
