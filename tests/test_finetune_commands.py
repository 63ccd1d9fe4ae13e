"""A fine-tuning task is its folder: a `command.py` there makes `bertcli finetune NAME` and
`bertcli.finetune(NAME, ...)`, with the shared options, output checks and lock, and no edit to
the CLI or the API (bertcli.finetune.command)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import bertcli.finetune
from bertcli import api

# bertcli.cli finds the task folders when it is first imported: here, before a test puts a toy or
# broken folder on the search path, so the CLI the other test files of this worker use has only
# the shipped tasks.
from bertcli.cli import task_command
from bertcli.finetune import command as task_commands

TOY = '''
from pathlib import Path

import typer

from bertcli.config.options import num_option
from bertcli.finetune.command import TaskCommand


def toy_options(
    words: Path = typer.Option(..., "--words", help="A file of words."),
    repeat: int = num_option(2, "--repeat", ge=1, le=100, help="Times."),
) -> None:
    """Count the words of a file, a toy task."""


def run_toy(recipe, checkpoint, out, words, repeat=2):
    n = len(Path(words).read_text().split()) * repeat
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(f'{{"count": {n}, "epochs": {recipe.finetune.epochs}}}')
    return {"count": n}


COMMANDS = [TaskCommand("toy", toy_options, run_toy, recipe="classify", inputs=("words",))]
'''


@pytest.fixture
def toy_task(tmp_path, monkeypatch):
    """A task folder `toy/` outside the package, on bertcli.finetune's search path."""
    root = tmp_path / "tasks"
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "__init__.py").write_text("")
    (root / "toy" / "command.py").write_text(textwrap.dedent(TOY))
    monkeypatch.setattr(bertcli.finetune, "__path__", [*bertcli.finetune.__path__, str(root)])
    ck = tmp_path / "ck"                       # a checkpoint directory, as far as the checks before a run read it
    ck.mkdir()
    (ck / "config.json").write_text("{}")
    yield
    for name in [m for m in sys.modules if m.startswith("bertcli.finetune.toy")]:
        del sys.modules[name]


def test_the_shipped_tasks_are_found_in_their_folders():
    found = task_commands.discover()
    assert list(found) == ["glue", "classify", "embed", "squad", "ner"]
    assert {c.name: c.recipe for c in found.values()} == {"glue": "glue", "classify": "classify", "embed": "embed",
                                                           "squad": "squad", "ner": "ner"}
    assert found["squad"].default_kind({"version": 2}) == "squad_v2" and found["ner"].default_kind({}) == "ner"


def test_a_new_task_folder_is_a_command_with_the_shared_options(toy_task, tmp_path):
    cmd = task_commands.get("toy")
    app = typer.Typer()
    app.command("toy")(task_command(cmd))
    app.command("other")(lambda: None)        # two commands: typer then keeps the name on the line
    words = tmp_path / "words.txt"
    words.write_text("a b c\n")
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["toy", "-c", str(tmp_path / "ck"), "--words", str(words), "--repeat", "3", "-o", str(out),
                                 "--set", "finetune.epochs=7"])
    assert r.exit_code == 0, (r.output, r.exception)
    assert json.loads((out / "results.json").read_text()) == {"count": 9, "epochs": 7}
    assert (out / ".bertcli-output.json").is_file()          # marked as every fine-tuning output is
    help_text = CliRunner().invoke(app, ["toy", "--help"], env={"COLUMNS": "200"}).output
    for flag in ("--checkpoint", "--recipe", "--set", "--out", "--force", "--words", "--repeat"):
        assert flag in help_text, flag
    assert "Count the words of a file" in help_text


def test_a_new_task_is_in_the_api_with_the_output_checks(toy_task, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("a b\n")
    assert api.finetune("toy", tmp_path / "ck", out=tmp_path / "o", words=words) == {"count": 4}
    from bertcli.core.errors import UserError

    with pytest.raises(UserError, match="marker|bertcli"):      # a second run without --force is refused
        api.finetune("toy", tmp_path / "ck", out=tmp_path / "o", words=words)
    with pytest.raises(UserError):                              # --out may not be an input
        api.finetune("toy", tmp_path / "ck", out=words, words=words)
    with pytest.raises(UserError, match="toy"):                 # a misspelt task names the closest
        api.finetune("tyo", tmp_path / "ck")


def test_a_task_may_not_redeclare_a_shared_option(toy_task, monkeypatch):
    def bad(out: Path = typer.Option(None, "--out")) -> None: ...

    cmd = task_commands.TaskCommand("bad", bad, lambda *a, **k: {}, recipe="classify")
    with pytest.raises(AssertionError, match="out"):
        task_command(cmd)


def _task_folder(root: Path, name: str, files: dict[str, str]) -> None:
    (root / name).mkdir(parents=True)
    for file, text in files.items():
        (root / name / file).write_text(textwrap.dedent(text))


BROKEN = {   # folder -> (its files, what the message says)
    "failing": ({"__init__.py": "", "command.py": "import bertcli.finetune.failing.nowhere\n"},
                "cannot be imported (ModuleNotFoundError: No module named 'bertcli.finetune.failing.nowhere')"),
    "typo": ({"__init__.py": "", "command.py": "COMMANDS = [\n"}, "cannot be imported (SyntaxError"),
    "nocommand": ({"__init__.py": "", "task.py": ""}, "has no command.py"),
    "nopackage": ({"command.py": "COMMANDS = []\n"}, "has a command.py but no __init__.py"),
    "nolist": ({"__init__.py": "", "command.py": "commands = []\n"}, "has a command.py without a COMMANDS list"),
}


@pytest.mark.parametrize("folder", BROKEN)
def test_a_broken_task_folder_is_one_message_naming_it_not_a_missing_command(folder, tmp_path, monkeypatch):
    files, what = BROKEN[folder]
    _task_folder(tmp_path / "tasks", folder, files)
    monkeypatch.setattr(bertcli.finetune, "__path__", [*bertcli.finetune.__path__, str(tmp_path / "tasks")])
    from bertcli.core.errors import UserError

    try:
        with pytest.raises(UserError) as e:
            task_commands.discover()
        with pytest.raises(UserError):                   # the API's look-up of any task says so too
            task_commands.get("ner")
    finally:
        for name in [m for m in sys.modules if m.startswith(f"bertcli.finetune.{folder}")]:
            del sys.modules[name]
    assert e.value.what.startswith(f"the fine-tuning task folder bertcli/finetune/{folder}/ {what}"), e.value.what
    assert e.value.fix


def test_the_cli_refuses_with_the_broken_folders_message(tmp_path):
    """Through the real entry point (`main`) in a fresh process: exit 2, the one message, no traceback."""
    import subprocess

    files, what = BROKEN["failing"]
    _task_folder(tmp_path / "tasks", "failing", files)
    code = ("import sys, bertcli.finetune; bertcli.finetune.__path__.append(sys.argv[1]); "
            "from bertcli.cli import main; main(['finetune', '--help'])")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "tasks")], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"bertcli/finetune/failing/ {what}" in proc.stderr and "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_subpackage_that_is_not_a_task_exists():
    """NOT_TASKS is the only way to have a folder without a command: it names real folders only."""
    import pkgutil

    packages = {i.name for i in pkgutil.iter_modules(bertcli.finetune.__path__) if i.ispkg}
    assert task_commands.NOT_TASKS <= packages


def test_the_apis_task_options_are_the_shipped_commands_flags():
    """api.TaskOptions (the type of `finetune(task, ..., **options)`) names exactly the shipped
    tasks' own options, and each task's `run` takes exactly its command's options after the
    recipe, the checkpoint and the output directory (what RunTask cannot say to mypy)."""
    import inspect
    import typing

    declared: set[str] = set()
    for cmd in task_commands.discover().values():
        own = list(inspect.signature(cmd.options).parameters)
        assert list(inspect.signature(cmd.run).parameters)[3:] == own, cmd.name
        declared.update(own)
    assert set(typing.get_type_hints(api.TaskOptions)) == declared
