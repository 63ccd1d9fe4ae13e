"""Output safety (issue 20): bertcli removes only what it can prove it wrote.

Every case runs the real CLI and asserts exit 2 with one message (what, where, fix), no
traceback, and that every file present before the command is still there byte for byte. The
refusals all come before any work, so each case takes a second or two.

Classes: unmarked directory refused; marked directory refused without --force; an output that
is an input; output paths checked before work; numeric flags range-checked; a second writer
refused by the lock; bertcli's temporaries (only its own, only of dead processes); install
(--force removes only listed files)."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest
import typer
from conftest import assert_user_error, run_cli
from safety_helpers import assert_kept, dead_pid, fake_marker, snapshot, temp_marker, write_classify, write_ner, write_texts

from bertcli.core.errors import UserError


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    import torch
    from helpers.export import make_checkpoint

    torch.set_num_threads(1)
    return make_checkpoint(tmp_path_factory.mktemp("ckpt"), "bert", "classification")


def _fake_bundle(root: Path) -> Path:
    root.mkdir()
    (root / "model.onnx").write_bytes(b"\x08\x07 not really a graph")
    (root / "config.json").write_text("{}")
    return root


# ------------------------------------------------------------------------ refused before work
def case(name, tmp, ck):
    """(argv, needles, the directory whose files must all survive) of each refusal."""
    train, dev = write_classify(tmp / "data")
    cls = ["finetune", "classify", "-c", ck, "--train", train, "--dev", dev]
    out = tmp / "out"
    texts = write_texts(tmp / "in.txt")
    # -- class: a non-empty directory bertcli did not write
    if name == "unmarked/classify user file":
        out.mkdir()
        (out / "thesis.pdf").write_bytes(b"%PDF mine")
        return cls + ["--out", out], ["did not write", "thesis.pdf", "new or empty --out"]
    if name == "unmarked/classify hidden file only":
        out.mkdir()
        (out / ".DS_Store").write_bytes(b"\0\1")
        return cls + ["--out", out], ["did not write", ".DS_Store"]
    if name == "unmarked/classify with --force":
        out.mkdir()
        (out / "results.json").write_text('{"mine": 1}')
        return cls + ["--out", out, "--force"], ["did not write", "results.json"]
    if name == "unmarked/ner":
        write_ner(tmp / "ner")
        out.mkdir()
        (out / "sub").mkdir()
        (out / "sub" / "a.txt").write_text("x")
        return ["finetune", "ner", "-c", ck, "-d", tmp / "ner", "--out", out], ["did not write", "sub"]
    if name == "unmarked/glue":
        out.mkdir()
        (out / "notes.md").write_text("x")
        return ["finetune", "glue", "-c", ck, "--tasks", "rte", "-d", tmp / "data", "--out", out], ["notes.md"]
    if name == "unmarked/squad":
        out.mkdir()
        (out / "notes.md").write_text("x")
        return ["finetune", "squad", "-c", ck, "-d", tmp / "data", "--out", out], ["notes.md"]
    if name == "unmarked/export --force":
        out.mkdir()
        (out / "my_notes.txt").write_text("x")
        return ["export", "-c", ck, "-o", out, "--force"], ["did not write", "my_notes.txt"]
    # -- class: a marked directory without --force
    if name == "marked/classify":
        out.mkdir()
        (out / "results.json").write_text("{}")
        fake_marker(out, ["results.json"])
        return cls + ["--out", out], ["already holds an earlier result", "--force"]
    if name == "marked/ner":
        write_ner(tmp / "ner")
        out.mkdir()
        (out / "results.json").write_text("{}")
        fake_marker(out, ["results.json"], "finetune ner")
        return ["finetune", "ner", "-c", ck, "-d", tmp / "ner", "--out", out], ["already holds", "finetune ner"]
    if name == "marked/export":
        out.mkdir()
        (out / "model.onnx").write_text("x")
        fake_marker(out, ["model.onnx"], "export")
        return ["export", "-c", ck, "-o", out], ["already holds an earlier result", "--force"]
    if name == "marked/export legacy bundle":
        out.mkdir()
        (out / "export_info.json").write_text('{"files": {"model.onnx": 1}}')
        return ["export", "-c", ck, "-o", out], ["already holds", "--force"]
    if name == "marked/damaged marker":
        out.mkdir()
        (out / "x").write_text("x")
        (out / ".bertcli-output.json").write_text("{not json")
        return cls + ["--out", out, "--force"], ["marker", "damaged"]
    # -- class: an output that is an input
    if name == "input/classify out holds train.csv":
        return cls + ["--out", tmp / "data"], ["holds the input", "train.csv"]
    if name == "input/classify out is cwd with data":
        return ["finetune", "classify", "-c", ck, "--train", "data/train.csv", "--dev", "data/dev.csv",
                "--out", "."], ["holds the input"]
    if name == "input/classify out holds the checkpoint":
        shutil.copytree(ck, tmp / "run" / "final")
        return ["finetune", "classify", "-c", tmp / "run" / "final", "--train", train, "--dev", dev,
                "--out", tmp / "run"], ["holds the input", str(tmp / "run" / "final")]
    if name == "input/ner out is data dir":
        write_ner(tmp / "ner")
        return ["finetune", "ner", "-c", ck, "-d", tmp / "ner", "--out", tmp / "ner"], ["is the input"]
    if name == "input/predict out is input":
        return ["predict", "-c", ck, "-i", texts, "--out", texts, "--force"], ["is the input", "in.txt"]
    if name == "input/predict out is bundle model.onnx":
        b = _fake_bundle(tmp / "bundle")
        return ["predict", "-c", b / "model.onnx", "-i", texts, "--out", b / "model.onnx", "--force"], \
            ["inside the model directory"]
    if name == "input/predict out inside checkpoint":
        return ["predict", "-c", ck, "-i", texts, "--out", ck / "preds.jsonl"], ["inside the model directory"]
    if name == "input/features out is input":
        p = tmp / "in.parquet"
        p.write_bytes(b"PAR1 mine")
        return ["features", "-c", ck, "-i", p, "--out", p, "--force"], ["is the input", "in.parquet"]
    if name == "input/features out inside checkpoint":
        return ["features", "-c", ck, "-i", texts, "--out", ck / "model.npy"], ["inside the model directory"]
    if name == "input/export out holds dev":
        (tmp / "b").mkdir()
        (tmp / "b" / "dev.jsonl").write_text('{"text": "a", "label": "positive"}\n')
        return ["export", "-c", ck, "-o", tmp / "b", "--quantize", "int8", "--dev", tmp / "b" / "dev.jsonl"], \
            ["holds the input", "dev.jsonl"]
    if name == "input/export out is checkpoint":
        return ["export", "-c", ck, "-o", ck, "--force"], ["is the input"]
    # -- class: output paths checked before any work
    if name == "path/features out is a directory":
        (tmp / "f.parquet").mkdir()
        return ["features", "-c", ck, "-i", texts, "--out", tmp / "f.parquet"], ["is a directory"]
    if name == "path/predict out is a directory":
        (tmp / "p.jsonl").mkdir()
        return ["predict", "-c", ck, "-i", texts, "--out", tmp / "p.jsonl", "--force"], ["is a directory"]
    if name == "path/features out exists":
        (tmp / "f.npy").write_bytes(b"mine")
        return ["features", "-c", ck, "-i", texts, "--out", tmp / "f.npy"], ["already exists", "--force"]
    if name == "path/features ids file exists":
        (tmp / "f.ids.tsv").write_text("mine\n")
        return ["features", "-c", ck, "-i", texts, "--out", tmp / "f.npy"], ["f.ids.tsv", "already exists"]
    if name == "path/predict out exists":
        (tmp / "p.jsonl").write_text("mine\n")
        return ["predict", "-c", ck, "-i", texts, "--out", tmp / "p.jsonl"], ["already exists", "--force"]
    if name == "path/classify out is a file":
        (tmp / "o").write_text("mine")
        return cls + ["--out", tmp / "o"], ["regular file"]
    # -- class: numeric flags, range-checked like recipe keys
    flags = {
        "num/features --batch-size 0": (["features", "-c", ck, "-i", texts, "-o", tmp / "f.npy", "--batch-size", "0"],
                                        ["--batch-size: must be >= 1, got 0"]),
        "num/features --batch-size -3": (["features", "-c", ck, "-i", texts, "-o", tmp / "f.npy", "--batch-size", "-3"],
                                         ["--batch-size: must be >= 1"]),
        "num/features --max-seq-length 0": (["features", "-c", ck, "-i", texts, "-o", tmp / "f.npy",
                                             "--max-seq-length", "0"], ["--max-seq-length: must be >= 8, got 0"]),
        "num/features --max-seq-length -4": (["features", "-c", ck, "-i", texts, "-o", tmp / "f.npy",
                                              "--max-seq-length", "-4"], ["--max-seq-length: must be >= 8, got -4"]),
        "num/predict --batch-size 0": (["predict", "-c", ck, "-i", texts, "--batch-size", "0"], ["--batch-size"]),
        "num/predict --top-k 0": (["predict", "-c", ck, "-i", texts, "--top-k", "0"], ["--top-k: must be >= 1"]),
        "num/predict --max-seq-length 4": (["predict", "-c", ck, "-i", texts, "--max-seq-length", "4"], ["--max-seq-length"]),
        "num/fill-mask --top-k 0": (["fill-mask", "a [MASK] b", "-c", ck, "--top-k", "0"], ["--top-k"]),
        "num/squad --squad-version 3": (["finetune", "squad", "-c", ck, "-d", tmp, "--squad-version", "3"],
                                  ["--squad-version: must be <= 2"]),
        "num/export --opset 0": (["export", "-c", ck, "-o", out, "--opset", "0"], ["--opset: must be >= 1"]),
    }
    if name in flags:
        return flags[name]
    raise KeyError(name)


CASES = ["unmarked/classify user file", "unmarked/classify hidden file only", "unmarked/classify with --force",
         "unmarked/ner", "unmarked/glue", "unmarked/squad", "unmarked/export --force",
         "marked/classify", "marked/ner", "marked/export", "marked/export legacy bundle", "marked/damaged marker",
         "input/classify out holds train.csv", "input/classify out is cwd with data",
         "input/classify out holds the checkpoint", "input/ner out is data dir", "input/predict out is input",
         "input/predict out is bundle model.onnx", "input/predict out inside checkpoint",
         "input/features out is input", "input/features out inside checkpoint", "input/export out holds dev",
         "input/export out is checkpoint",
         "path/features out is a directory", "path/predict out is a directory", "path/features out exists",
         "path/features ids file exists", "path/predict out exists", "path/classify out is a file",
         "num/features --batch-size 0", "num/features --batch-size -3", "num/features --max-seq-length 0",
         "num/features --max-seq-length -4", "num/predict --batch-size 0", "num/predict --top-k 0",
         "num/predict --max-seq-length 4", "num/fill-mask --top-k 0", "num/squad --squad-version 3", "num/export --opset 0"]


@pytest.mark.parametrize("name", CASES)
def test_refused_before_any_work_and_nothing_lost(name, tmp_path, ckpt):
    work = tmp_path / "w"
    work.mkdir()
    ck = ckpt
    if "checkpoint" in name or "export" in name:     # cases that point an output at the checkpoint
        ck = work / "ckpt"
        shutil.copytree(ckpt, ck)
    argv, needles = case(name, work, ck)
    before, model = snapshot(tmp_path), snapshot(ckpt)
    r = run_cli(*argv, cwd=work, env={"OMP_NUM_THREADS": "1"})
    assert_user_error(r, *needles)
    assert r.stderr.count("error:") == 1, r.stderr
    assert "fix:" in r.stderr, r.stderr
    assert_kept(before, tmp_path)
    assert_kept(model, ckpt)
    assert not any(".bertcli-tmp-" in p.name for p in tmp_path.rglob("*")), "a temporary was left"


def test_every_numeric_flag_is_range_checked():
    """No numeric option of any command escapes `num_option` (the recipe's range check)."""
    import inspect
    import typing

    from bertcli.cli import NUM_FLAGS, app

    def callbacks(t: typer.Typer):
        for c in t.registered_commands:
            yield c.callback
        for g in t.registered_groups:
            yield from callbacks(g.typer_instance)

    def numeric_flags(t: typer.Typer) -> list[tuple[str, str]]:
        found = []
        for fn in callbacks(t):
            hints = typing.get_type_hints(fn)
            for name, param in inspect.signature(fn).parameters.items():
                kinds = set(typing.get_args(hints[name])) | {hints[name]}
                if kinds & {int, float} and bool not in kinds:
                    decls = getattr(param.default, "param_decls", None) or (name,)
                    found.append((fn.__name__, decls[0]))
        return found

    # the detector sees a plain numeric option (so that the check below can fail)
    probe = typer.Typer()

    @probe.command()
    def sneaky(n: int = typer.Option(3, "--sneaky-count"), flag: bool = typer.Option(False, "--flag")) -> None: ...

    assert numeric_flags(probe) == [("sneaky", "--sneaky-count")]
    numeric = numeric_flags(app)
    assert len(numeric) >= 8, numeric
    escaped = [(c, o) for c, o in numeric if o not in NUM_FLAGS]
    assert not escaped, f"numeric flags without a range check: {escaped}"


def test_numeric_flags_share_the_recipe_declaration():
    """features --max-seq-length and finetune.max_seq_length refuse the same values."""
    import dataclasses

    from bertcli.config.finetune_sections import FinetuneConfig
    from bertcli.config.schema import check_value

    f = {x.name: x for x in dataclasses.fields(FinetuneConfig)}["max_seq_length"]
    for bad in (0, -4, 7):
        with pytest.raises(UserError):
            check_value(bad, f, "finetune.max_seq_length", "x")
        r = run_cli("features", "-c", "x", "-i", "y", "-o", "z.npy", "--max-seq-length", str(bad))
        assert_user_error(r, f"must be >= {f.metadata['ge']}, got {bad}")


# ------------------------------------------------------------------------------------ locks
LOCKED = ["finetune classify", "finetune ner", "finetune glue", "features", "predict", "tokenize", "build-data"]


@pytest.mark.parametrize("command", LOCKED)
def test_a_second_writer_fails_at_once_naming_the_holder(command, tmp_path, ckpt):
    from bertcli.core.locks import run_lock

    train, dev = write_classify(tmp_path / "data")
    texts = write_texts(tmp_path / "in.txt")
    out = tmp_path / "out"
    argv = {
        "finetune classify": ["finetune", "classify", "-c", ckpt, "--train", train, "--dev", dev, "--out", out],
        "finetune ner": ["finetune", "ner", "-c", ckpt, "-d", write_ner(tmp_path / "ner"), "--out", out],
        "finetune glue": ["finetune", "glue", "-c", ckpt, "--tasks", "sst2", "-d", tmp_path, "--out", out],
        "features": ["features", "-c", ckpt, "-i", texts, "--out", out],
        "predict": ["predict", "-c", ckpt, "-i", texts, "--out", out],
        "tokenize": ["tokenize", "-r", "bert-tiny", "--set", f"output_dir={out}"],
        "build-data": ["build-data", "-r", "bert-tiny", "--set", f"output_dir={out}"],
    }[command]
    if command == "features":
        out = out.with_suffix(".npy")
        argv[-1] = out
    before = snapshot(tmp_path)
    with run_lock(out):
        r = run_cli(*argv, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert_user_error(r, "in use by another bertcli process", f"PID {os.getpid()}", socket.gethostname())
    assert_kept(before, tmp_path)
    assert not out.exists() or not any(out.iterdir())


# ------------------------------------------------------------------------------ temporaries
def test_only_bertcli_temporaries_of_dead_processes_are_removed(tmp_path):
    from safety_helpers import foreign_neighbours

    from bertcli.core.outputs import remove_stale_temporaries

    foreign_neighbours(tmp_path)
    dead = dead_pid()
    gone = temp_marker(tmp_path / f".out.bertcli-tmp-{dead}-1", dead)
    trash = temp_marker(tmp_path / f".out.bertcli-old-{dead}-2", dead)
    live = temp_marker(tmp_path / f".out.bertcli-tmp-{os.getpid()}-3", os.getpid())
    parent = temp_marker(tmp_path / f".out.bertcli-tmp-{os.getppid()}-3", os.getppid())
    other_host = temp_marker(tmp_path / f".out.bertcli-tmp-{dead}-4", dead, host="another-host")
    unmarked = tmp_path / f".out.bertcli-tmp-{dead}-5"
    unmarked.mkdir()
    damaged = tmp_path / f".out.bertcli-tmp-{dead}-6"
    damaged.mkdir()
    (damaged / ".bertcli-temporary.json").write_text("{oops")
    huge = tmp_path / ".out.bertcli-tmp-huge"
    huge.mkdir()
    (huge / ".bertcli-temporary.json").write_text(json.dumps({"pid": 99999999999999999999999, "host": socket.gethostname()}))
    visible = temp_marker(tmp_path / f"out.bertcli-tmp-{dead}-7", dead)     # not hidden: not a temporary name
    (gone / "x").write_text("half")
    before = {p.name for p in tmp_path.iterdir()}
    snap = snapshot(tmp_path)
    removed = remove_stale_temporaries(tmp_path)
    assert sorted(removed) == sorted([gone, trash])
    assert {p.name for p in tmp_path.iterdir()} == before - {gone.name, trash.name}
    for kept in (live, parent, other_host, unmarked, damaged, huge, visible):
        assert kept.is_dir()
    assert_kept({k: v for k, v in snap.items() if not k.startswith((gone.name, trash.name))}, tmp_path)


def test_temporaries_carry_the_prefix_and_the_owner(tmp_path):
    import json

    from bertcli.core.fs import temporary_file
    from bertcli.core.outputs import TEMP_MARKER, temporary_dir

    t = temporary_dir(tmp_path / "out")
    assert t.parent == tmp_path and t.name.startswith(".out.bertcli-tmp-")
    mark = json.loads((t / TEMP_MARKER).read_text())
    assert mark["pid"] == os.getpid() and mark["host"] == socket.gethostname()
    assert temporary_file(tmp_path / "p.jsonl").name == f".p.jsonl.bertcli-tmp-{os.getpid()}"


def test_a_sigterm_between_a_temporary_and_its_writers_try_still_removes_it(tmp_path):
    """The loaded suite's one failure (2026-12-02): `features` descheduled as `open` returned, the
    signal raised before the writer's `try`, and both temporaries stayed. The named temporaries
    go on any exception inside removing_on_signal; other files, and a finished output, stay."""
    import signal

    from bertcli.core.fs import temporary_file
    from bertcli.core.outputs import removing_on_signal

    out = tmp_path / "f.npy"
    tmps = [temporary_file(out), temporary_file(out.with_suffix(".ids.tsv"))]
    beside = tmp_path / ".f.npy.bertcli-tmp-1"           # another process's name: not ours to remove
    beside.write_text("x")
    with pytest.raises(SystemExit) as stop, removing_on_signal(*tmps):
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN), "handler installed"
        for t in tmps:
            t.write_bytes(b"\0" * 128)                  # created, no writer's cleanup around them yet
        signal.raise_signal(signal.SIGTERM)              # this thread, handled before the call returns
    assert stop.value.code == 143
    assert not any(t.exists() for t in tmps) and beside.read_text() == "x"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL                   # restored

    with removing_on_signal(*tmps):                      # success: the writer renamed its temporary
        tmps[0].write_text("done")
        tmps[0].replace(out)
    assert out.read_text() == "done"


# ---------------------------------------------------------------------------------- install
def _tmp_with(tmp_path, files: dict[str, str]) -> Path:
    from bertcli.core.outputs import temporary_dir

    t = temporary_dir(tmp_path / "out")
    for rel, text in files.items():
        (t / rel).parent.mkdir(parents=True, exist_ok=True)
        (t / rel).write_text(text)
    return t


def test_install_new_directory_is_one_rename_and_marked(tmp_path):
    from bertcli.core.outputs import install, listed_files

    t = _tmp_with(tmp_path, {"a.txt": "1", "sub/b.txt": "2"})
    install(t, tmp_path / "out")
    assert not t.exists()
    assert listed_files(tmp_path / "out") == {"a.txt", "sub/b.txt"}
    assert not (tmp_path / "out" / ".bertcli-temporary.json").exists()


@pytest.mark.parametrize("user", ["notes.txt", "sub/mine.txt", ".hidden", "empty-dir/"])
def test_install_replaces_only_listed_files(tmp_path, user):
    """--force onto a marked directory: the listed files go (also those the new run does not
    write), the user's file stays byte for byte, the new files come in, the marker lists them."""
    from bertcli.core.outputs import install, listed_files

    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "old.txt").write_text("old result")
    (out / "a.txt").write_text("old a")
    fake_marker(out, ["old.txt", "a.txt"])
    if user.endswith("/"):
        (out / user).mkdir()
    else:
        (out / user).write_text("mine")
    before = {k: v for k, v in snapshot(out).items() if k == user}
    install(_tmp_with(tmp_path, {"a.txt": "new a", "sub/b.txt": "new b"}), out)
    assert_kept(before, out)
    assert (out / user).exists()
    assert not (out / "old.txt").exists()
    assert (out / "a.txt").read_text() == "new a" and (out / "sub" / "b.txt").read_text() == "new b"
    assert listed_files(out) == {"a.txt", "sub/b.txt"}
    assert not [p for p in tmp_path.iterdir() if "bertcli-" in p.name]


def test_install_refuses_an_unmarked_directory_and_keeps_the_result(tmp_path):
    from bertcli.core.outputs import install

    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    t = _tmp_with(tmp_path, {"model.safetensors": "weights"})
    with pytest.raises(UserError, match="did not write"):
        install(t, out)
    assert (out / "mine.txt").read_text() == "mine" and not (out / "model.safetensors").exists()
    assert (tmp_path / "out.bertcli-new" / "model.safetensors").read_text() == "weights"   # the result is not lost


def test_install_refuses_to_overwrite_an_unlisted_file(tmp_path):
    from bertcli.core.outputs import install

    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("mine")
    (out / "old.txt").write_text("old")
    fake_marker(out, ["old.txt"])
    with pytest.raises(UserError, match="not bertcli's"):
        install(_tmp_with(tmp_path, {"results.json": "new"}), out)
    assert (out / "results.json").read_text() == "mine"


def test_building_a_stage_over_a_user_directory_is_refused(tmp_path):
    """stages.building() never replaces a whole directory it did not write."""
    from bertcli.config.recipe import load_recipe
    from bertcli.core.fs import building

    final = tmp_path / "tokenizer-abc"
    final.mkdir()
    (final / "mine.txt").write_text("mine")
    with pytest.raises(UserError, match="did not write"):
        with building(final, load_recipe("bert-tiny", [])) as tmp:
            (tmp / "tokenizer.json").write_text("{}")
    assert (final / "mine.txt").read_text() == "mine"


@pytest.mark.parametrize("complete", [True, False])
def test_a_stage_folder_of_an_older_bertcli_is_rebuilt_only_when_complete(tmp_path, complete):
    """Cache folders made before markers (`tokenizer-<12 hex>/` holding recipe.yaml) are bertcli's;
    the same name without recipe.yaml is not provably so, and is refused."""
    from bertcli.config.recipe import load_recipe
    from bertcli.core.fs import building

    final = tmp_path / "tokenizer-0123456789ab"
    final.mkdir()
    (final / "tokenizer.json").write_text("old")
    if complete:
        (final / "recipe.yaml").write_text("old: 1\n")
    recipe = load_recipe("bert-tiny", [])
    if complete:
        with building(final, recipe) as tmp:
            (tmp / "tokenizer.json").write_text("new")
        assert (final / "tokenizer.json").read_text() == "new" and (final / ".bertcli-output.json").is_file()
    else:
        with pytest.raises(UserError, match="did not write"):
            with building(final, recipe) as tmp:
                (tmp / "tokenizer.json").write_text("new")
        assert (final / "tokenizer.json").read_text() == "old"
