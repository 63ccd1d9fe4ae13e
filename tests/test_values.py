"""Every numeric flag of every command and every numeric recipe key, at 0, -1, nan, inf and 1e308:
a value outside the declared range (or not a number of the flag's type) ends in exit code 2 with
one message naming the flag or key, never a traceback; a value inside it passes validation and
is followed only as far as the `validated` (flags) or `recipe` (--set) test stop
(bertcli/core/testhooks.py), which ends the command with STOP_EXIT: the documented success.

The flags are enumerated from the click command typer builds (every leaf command) and
cross-checked with NUM_FLAGS; the keys from the recipe's dataclasses (test_checks_recipe's
enumeration). Each case runs `bertcli.cli.main` in this process (a subprocess each would take
minutes): each call runs inside conftest's cli_state_restored (what a command changes in the
process is put back), the stop hook is set through monkeypatch, and stdout / stderr are
captured per call.
"""

from __future__ import annotations

import contextlib
import io
import math
import subprocess
import sys

import pytest
import typer
from conftest import cli_state_restored
from helpers.recipes import FIELDS, set_items

from bertcli import cli
from bertcli.config.options import NUM_FLAGS
from bertcli.core.testhooks import STOP_ENV, STOP_EXIT

VALUES = ("0", "-1", "nan", "inf", "1e308")


def run_main(*argv: str) -> tuple[int, str]:
    """`bertcli ARGV` in this process: (exit code, stdout + stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with cli_state_restored(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(list(argv))
        except SystemExit as e:
            code = e.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out.getvalue() + err.getvalue()


def leaf_commands() -> list[tuple[list[str], object]]:
    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield path, cmd
    return list(walk(typer.main.get_command(cli.app), []))


def numeric_params(cmd) -> list:
    return [p for p in cmd.params
            if getattr(getattr(p, "type_descriptor", None), "annotation", None) in (int, float)]


def required_args(cmd) -> list[str]:
    """Placeholders for the command's required parameters (never read: the stop comes first)."""
    args: list[str] = []
    for p in cmd.params:
        if p.required:
            args += ["x"] if not p.opts[0].startswith("-") else [p.opts[0], "x"]
    return args


def in_range(text: str, tp: type, bounds: dict) -> bool:
    """Whether `text` is a value of type `tp` (int: written as an integer on the command line;
    in a recipe any number equal to one) that is finite and within `bounds`."""
    v = float(text)
    if not math.isfinite(v):
        return False
    ge, gt, le = bounds.get("ge"), bounds.get("gt"), bounds.get("le")
    return (ge is None or v >= ge) and (gt is None or v > gt) and (le is None or v <= le)


def assert_one_message(code: int, output: str, name: str, case: str) -> None:
    assert code == 2, f"{case}: exit {code}\n{output}"
    assert "Traceback" not in output, f"{case}: a traceback\n{output}"
    messages = output.count("error:") + output.count("Invalid value")
    assert messages == 1, f"{case}: {messages} messages\n{output}"
    assert name in output, f"{case}: the message does not name {name}\n{output}"


FLAG_CASES = [(path, p) for path, cmd in leaf_commands() for p in numeric_params(cmd)]


def test_the_enumeration_finds_every_numeric_flag():
    commands = {" ".join(path) for path, _ in FLAG_CASES}
    assert {"finetune embed", "finetune classify", "evaluate", "embed", "predict", "export", "fill-mask",
            "distill", "features", "evaluate-embed"} <= commands, commands
    found = {p.opts[0] for _, p in FLAG_CASES}
    # NUM_FLAGS as bertcli alone fills it: in this process, other test modules (a toy task's
    # --repeat) may have declared flags through num_option too.
    own = subprocess.run([sys.executable, "-c", "import typer; from bertcli import cli; "
                          "typer.main.get_command(cli.app); from bertcli.config.options import NUM_FLAGS; "
                          "print(' '.join(sorted(NUM_FLAGS)))"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert set(own) <= NUM_FLAGS
    assert found == set(own), f"numeric flags not made by num_option: {found - NUM_FLAGS}; " \
                               f"in NUM_FLAGS but on no command: {set(own) - found}"
    for path, p in FLAG_CASES:
        bounds = p.type_descriptor.parameter_info.callback.bounds
        assert bounds["le"] is not None, f"{' '.join(path)} {p.opts[0]} has no upper bound"


@pytest.mark.parametrize("path,param", FLAG_CASES, ids=[f"{' '.join(c)} {p.opts[0]}" for c, p in FLAG_CASES])
def test_every_numeric_flag_at_the_edges(path, param, monkeypatch):
    monkeypatch.setenv(STOP_ENV, "validated")
    cmd = dict((" ".join(c), k) for c, k in leaf_commands())[" ".join(path)]
    tp = param.type_descriptor.annotation
    bounds = param.type_descriptor.parameter_info.callback.bounds
    flag = param.opts[0]
    for value in VALUES:
        case = f"bertcli {' '.join(path)} {flag} {value}"
        code, output = run_main(*path, *required_args(cmd), flag, value)
        parses = tp is float or value in ("0", "-1")
        if parses and in_range(value, tp, bounds):
            assert code == STOP_EXIT, f"{case}: an accepted value did not reach the stop (exit {code})\n{output}"
        else:
            assert_one_message(code, output, flag, case)


KEY_CASES = [(path, f, tp) for path, f, tp in FIELDS]


@pytest.fixture(scope="module")
def small_recipe(tmp_path_factory):
    """A recipe file of one key: the defaults, read without parsing a shipped recipe's YAML."""
    path = tmp_path_factory.mktemp("values") / "r.yaml"
    path.write_text("name: values\n", encoding="utf-8")
    return path


def override(path: str, value: str) -> list[str]:
    """--set items that put `value` at `path`; a phase also gets its length (a phase without
    one is refused, whatever the key under test)."""
    if path.startswith("train.phases[0].") and path.split(".")[-1] not in ("steps", "fraction"):
        return [f"train.phases=[{{name: p, fraction: 1.0, {path.split('.')[-1]}: {value}}}]"]
    return set_items(path, value)


@pytest.mark.parametrize("path,field,tp", KEY_CASES, ids=[p for p, _, _ in KEY_CASES])
def test_every_numeric_recipe_key_at_the_edges(path, field, tp, small_recipe, monkeypatch):
    monkeypatch.setenv(STOP_ENV, "recipe")
    assert field.metadata.get("le") is not None, f"{path} declares no upper bound"
    key = path.split("[0].")[-1]
    for value in VALUES:
        sets = [a for item in override(path, value) for a in ("--set", item)]
        case = f"bertcli info -r {small_recipe.name} {' '.join(sets)}"
        code, output = run_main("info", "-r", str(small_recipe), *sets)
        if in_range(value, tp, field.metadata):
            assert code == STOP_EXIT, f"{case}: an accepted value did not reach the stop (exit {code})\n{output}"
        else:
            assert_one_message(code, output, key, case)


def test_the_message_names_the_largest_value_accepted(monkeypatch):
    code, output = run_main("info", "-r", "bert-tiny", "--set", "finetune.epochs=1e308")
    assert_one_message(code, output, "finetune.epochs", "finetune.epochs=1e308")
    assert "must be <= 1000000.0, got 1e+308" in output
    code, output = run_main("finetune", "classify", "-c", "x", "--train", "x", "--dev", "x", "--epochs", "1e308")
    assert_one_message(code, output, "--epochs", "--epochs 1e308")
    assert "at most 1000000.0" in output
