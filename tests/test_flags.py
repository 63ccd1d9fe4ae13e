"""One flag, one meaning, over the click command typer builds (every leaf command and the
program's own options): each option comes from its one declaration in
bertcli/config/options.py (FLAGS), with that declaration's spellings; no spelling belongs to
two declarations; a command-specific flag sits only on its commands. Renamed flags keep their
old spelling for one release, hidden from --help, with a one-line note naming the new one;
--pooling takes one vocabulary, each command its subset; --json prints strict JSON on stdout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bertcli import api, cli
from bertcli.config.options import DECLARED, FINETUNE_FLAGS, FLAGS, POOLINGS, RENAMED
from bertcli.config.stages import StageResult
from bertcli.core import console

ROOT = Path(__file__).resolve().parents[1]


def commands() -> list[tuple[str, object]]:
    """(path, click command) for the program itself ("") and every leaf command."""
    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path), cmd
    root = typer.main.get_command(cli.app)
    return [("", root), *walk(root, [])]


def options(cmd) -> list:
    return [p for p in cmd.params if p.param_type_name == "option"]


def test_every_option_comes_from_its_one_declaration():
    for path, cmd in commands():
        for p in options(cmd):
            spellings = [*p.opts, *p.secondary_opts]
            if p.hidden:      # only the old spellings of a renamed flag hide
                assert any(path in r.commands and set(spellings) == set(r.old) for r in RENAMED), (path, spellings)
                continue
            flag = FLAGS.get(p.opts[0])
            assert flag is not None, f"bertcli {path}: {p.opts[0]} is not declared in config/options.py FLAGS"
            assert getattr(p.type_descriptor.parameter_info, DECLARED, None) == p.opts[0], \
                f"bertcli {path}: {p.opts[0]} is built by hand, not from its declaration (option / num_option)"
            assert sorted(spellings) == sorted([flag.name, *filter(None, (flag.short, flag.off))]), (path, spellings)
            assert not flag.only or path in flag.only, f"{flag.name} is declared for {flag.only}, found on {path!r}"


def test_no_spelling_belongs_to_two_declarations():
    seen: dict[str, str] = {}
    for flag in FLAGS.values():
        for spelling in filter(None, (flag.name, flag.short, flag.off)):
            assert spelling not in seen, f"{spelling} is declared by {seen[spelling]} and {flag.name}"
            seen[spelling] = flag.name


def test_no_command_spells_one_concept_twice_and_every_declaration_is_used():
    used: set[str] = set()
    for path, cmd in commands():
        names = [p.opts[0] for p in options(cmd) if not p.hidden]
        assert len(names) == len(set(names)), (path, names)
        used.update(names)
        for r in RENAMED:      # a renamed flag's old spelling is never a visible flag of its command
            if path in r.commands:
                assert not set(r.old) & {s for p in options(cmd) if not p.hidden for s in p.opts}, (path, r)
    assert used == set(FLAGS), f"declared but on no command: {set(FLAGS) - used}"


def test_flags_that_set_recipe_keys_are_spelled_as_the_keys():
    for _name, flag, key, *_ in FINETUNE_FLAGS:
        if flag != "--lr":      # run_glue's --lr, for finetune.learning_rate (a grid too)
            assert flag == "--" + key.split(".")[-1].replace("_", "-"), (flag, key)


def test_one_pooling_vocabulary_each_command_a_subset():
    subsets = {}
    for path, cmd in commands():
        for p in options(cmd):
            if p.opts[0] == "--pooling" and not p.hidden:
                help_text = p.help or ""
                subsets[path] = re.search(r"One of: ([a-z, ]+)\.", help_text).group(1).split(", ")
    assert set(subsets) == {"predict", "features", "embed", "evaluate-embed", "finetune embed"}, subsets
    assert all(set(s) <= set(POOLINGS) for s in subsets.values()), subsets
    assert set().union(*subsets.values()) == set(POOLINGS)


@pytest.mark.parametrize("argv, subset", [
    (["features", "-c", "x", "-i", "x", "-o", "x.npy", "--pooling", "max"], "cls, mean, none"),
    (["predict", "-c", "x", "-i", "x", "--pooling", "none"], "mean, cls, pooler"),
    (["embed", "-c", "x", "-i", "x", "-o", "x.npy", "--pooling", "pooler"], "mean, cls, max"),
])
def test_a_pooling_outside_the_commands_subset_is_one_message(argv, subset, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("error:") == 1, err
    assert f"{argv[0]} takes {subset}" in err and "is a pooling of other commands" in err, err


# Each renamed flag, under its old spelling: the api function it reaches, and the value it carries.
OLD = [
    (["predict", "-c", "ck", "-i", "x.txt", "--max-length", "16"], "predict", ("max_length", 16), "--max-seq-length"),
    (["features", "-c", "ck", "-i", "t.txt", "-o", "f.npy", "--pool", "mean"], "features", ("pool", "mean"), "--pooling"),
    (["finetune", "squad", "-c", "ck", "-d", "sq", "--version", "2"], "finetune", ("version", 2), "--squad-version"),
    (["distill", "-c", "ck", "--teacher-task", "ner", "-d", "c", "--version", "2"], "distill", ("version", 2),
     "--squad-version"),
    (["distill", "-c", "ck", "--teacher-task", "ner", "-d", "c", "--layers", "2"], "distill", ("layers", 2),
     "--student-layers"),
    (["tokenize", "-r", "bert-tiny", "--force"], "tokenize", ("force", True), "--rebuild"),
    (["build-data", "-r", "bert-tiny", "--force"], "build_data", ("force", True), "--rebuild"),
    (["finetune", "glue", "-c", "ck", "-t", "rte", "-d", "g"], "finetune", ("tasks", "rte"), "--tasks"),
    (["finetune", "glue", "-c", "ck", "--task", "rte", "-d", "g"], "finetune", ("tasks", "rte"), "--tasks"),
    (["distill", "-c", "ck", "-t", "ner", "-d", "c"], "distill", ("task", "ner"), "--teacher-task"),
]


class _Called(Exception):
    pass


@pytest.mark.parametrize("argv, name, passed, new", OLD, ids=[f"{c[0][0]} {c[3]}" for c in OLD])
def test_an_old_spelling_still_works_for_a_release_with_a_note(monkeypatch, argv, name, passed, new):
    seen = {}

    def record(*args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        raise _Called

    monkeypatch.setattr(api, name, record)
    result = CliRunner().invoke(cli.app, argv)
    assert isinstance(result.exception, _Called), (result.output, result.exception)
    key, value = passed
    got = seen["kwargs"].get(key, seen["args"][1] if key == "task" else None)
    assert got == value, seen
    notes = [ln for ln in result.output.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and f"is now {new};" in notes[0], result.output


def test_old_spellings_are_hidden_from_help():
    for r in RENAMED:
        for path in r.commands:
            out = CliRunner().invoke(cli.app, [*path.split(), "--help"], env={"COLUMNS": "200"}).output
            assert r.new in out, (path, out)
            for old in r.old:
                assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", out), (path, old, out)


def test_old_and_new_spelling_together_is_one_message(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["features", "-c", "x", "-i", "x", "-o", "x.npy", "--pool", "mean", "--pooling", "none"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("error:") == 1 and "--pooling is given under its old and its new" in err, err
    assert "note:" not in err, err          # the mistake alone: no note that the old spelling was taken


def test_renamed_flags_are_listed_in_the_cli_doc():
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for r in RENAMED:
        for old in r.old:
            for path in r.commands:
                assert re.search(rf"^\| `{path}` \| `{re.escape(old)}` \| `{re.escape(r.new)}` \|", doc, re.M), \
                    (path, old, r.new)
    shared = [f for f in FLAGS.values() if not f.only]
    for flag in shared:
        assert f"`{flag.name}" in doc, flag.name


def test_every_command_that_reports_figures_has_json():
    have = {path for path, cmd in commands() for p in options(cmd) if p.opts[0] == "--json"}
    reporting = {"tokenize", "build-data", "pretrain", "fill-mask", "evaluate", "export", "distill", "features",
                 "evaluate-embed", "compare", "embed", "finetune glue", "finetune classify", "finetune embed",
                 "finetune squad", "finetune ner"}
    assert reporting <= have, reporting - have


def test_json_prints_the_figures_on_stdout_and_the_tables_on_stderr(monkeypatch, tmp_path):
    """`tokenize --json`: stdout is one strict JSON document with the stage's figures; the summary
    table a person reads goes to stderr."""
    def fake_tokenize(recipe, overrides, force=False):
        return StageResult("tokenizer", tmp_path / "tok", reused=True, summary=[("vocab size", 512), ("seconds", 0.5)])

    monkeypatch.setattr(api, "tokenize", fake_tokenize)
    import contextlib
    import io
    import json

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
        # rich consoles write to the sys.stdout / sys.stderr of the moment
        cli.main(["tokenize", "-r", "bert-tiny", "--json"])
    assert e.value.code == 0, err.getvalue()
    figures = json.loads(out.getvalue())
    assert figures == {"stage": "tokenizer", "path": str(tmp_path / "tok"), "reused": True, "vocab size": 512,
                       "seconds": 0.5}
    assert "vocab size" in err.getvalue() and str(tmp_path / "tok") in err.getvalue()
    assert not console._tables, "the tables went back to stdout"
