"""Hostile state and bundle files (issue 20, part 3): every one is a message with exit 2, or the
documented set-aside, never a traceback, and nothing the user had is changed.

- trainer state: every TrainState field checked by type and range on load; a bad one sets the
  checkpoint aside as damaged-step-N and --resume auto continues, bitwise, from the one before;
- the checkpoint manifest: sha256 and size of every file, written last, verified before a resume,
  export, fine-tuning or predict; without a manifest (transformers) the safetensors lengths;
- the Hugging Face cache layout (snapshot symlinks into ../../blobs/) loads; other links do not;
- predict on foreign or damaged bundles: the graph's outputs and export_info.json by type;
- (lock files holding junk: tests/test_locks.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ONE_THREAD, assert_user_error, run_cli
from helpers.pretrain import finished_run, model_records, pretrain_cli, recipe_for
from safetensors.torch import load_file, save_file, save_model
from train_standins import RowDataset, TinyModel, collate

from bertcli.core.errors import UserError
from bertcli.model.manifest import MANIFEST, verify_checkpoint, write_manifest
from bertcli.train import checkpoint as ck
from bertcli.train.loop import Trainer, TrainInputs
from bertcli.train.resume import prepare_run

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (links followed), by relative path: to check nothing changed."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


def intact(before: dict[str, bytes], root: Path) -> bool:
    """Every file of `before` still under `root` with the same bytes (new files, such as a lock
    file next to an output, are not the user's and are not compared)."""
    after = snapshot(root)
    return all(after.get(name) == data for name, data in before.items())


def hf_save(model, directory):
    """A Hugging Face part with real weights (the stand-in model's), so that the top-level
    model.safetensors can be damaged as in the issue."""
    (directory / "config.json").write_text(json.dumps({"model_type": "tiny"}))
    save_model(model, str(directory / "model.safetensors"))


def train(run_dir: Path, resume=None):
    torch.manual_seed(0)
    inputs = TrainInputs(recipe=recipe_for(run_dir), model=TinyModel(dropout=0.0), train_dataset=RowDataset(37),
                         val_dataset=RowDataset(10, offset=1000), n_train=37, n_val=10, collate=collate,
                         hf_save=hf_save, run_dir=run_dir, resume=resume,
                         inputs_sha256={"tokenizer_sha256": "t" * 64, "data_sha256": "d" * 64})
    return Trainer(inputs).fit()


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("safety-full")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    train(root / "run")
    torch.set_num_threads(before)
    return root / "run"


def killed_after_step_6(full_run: Path, tmp_path: Path) -> Path:
    """The run as a kill after its step-6 checkpoint left it (checkpoints 2, 4, 6)."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    for s in (2, 4, 6):
        shutil.copytree(full_run / "checkpoints" / f"step-{s:07d}", run_dir / "checkpoints" / f"step-{s:07d}")
    lines = (full_run / "metrics.jsonl").read_text().splitlines()[:7]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    recipe_for(run_dir).save(run_dir)
    return run_dir


def edit_state(path: Path, key: str, value) -> None:
    f = path / "trainer_state" / "state.json"
    s = json.loads(f.read_text())
    s[key] = value
    f.write_text(json.dumps(s))


def falls_back_and_sets_aside(run_dir: Path, full_run: Path, needle: str, capfd) -> None:
    """--resume auto skips the damaged step-6 (the reason names `needle`), renames it intact to
    damaged-step-0000006, resumes from step-4 and ends bitwise as the run that was never damaged."""
    newest = run_dir / "checkpoints" / "step-0000006"
    before = snapshot(newest)
    chosen = prepare_run(recipe_for(run_dir), "auto", False)
    assert chosen.path == run_dir / "checkpoints" / "step-0000004"
    assert [p for p, _ in chosen.set_aside] == [newest]
    assert needle in chosen.set_aside[0][1], chosen.set_aside
    ck.set_aside_damaged(chosen)
    err = "".join(capfd.readouterr().err.split())
    assert "step-0000006isdamaged" in err and "notdeleted" in err and "".join(needle.split()) in err
    aside = run_dir / "checkpoints" / "damaged-step-0000006"
    assert not newest.exists() and snapshot(aside) == before        # kept byte for byte, out of the way
    train(run_dir, resume=chosen)
    assert model_records(run_dir) == model_records(full_run)        # bitwise the uninterrupted run
    assert snapshot(aside) == before


# ---------------------------------------------------------------------------- TrainState fields
STATE_EDITS = {                       # key, value: each must set step-6 aside naming the key
    "step_text": ("step", "thirty"), "step_negative": ("step", -7), "step_huge": ("step", 10 ** 15),
    "step_float": ("step", 6.5), "step_bool": ("step", True), "step_null": ("step", None),
    "step_of_another_dir": ("step", 4), "consumed_negative": ("consumed_samples", -1),
    "tokens_text": ("tokens", "many"), "world_size_zero": ("world_size", 0),
    "elapsed_nan": ("elapsed_s", float("nan")), "elapsed_negative": ("elapsed_s", -3.0),
    "scheduler_list": ("scheduler", [1, 2]), "scheduler_epoch": ("scheduler", {"last_epoch": "x"}),
    "sums_text": ("interval_sums", {"mlm_loss": "x"}), "majority_two": ("majority_acc", 2.0),
    "train_rows_negative": ("train_rows", -5), "phase_after_step": ("phase_start", 99),
    "files_list": ("files", ["model.safetensors"]), "files_escape": ("files", {"../../../etc/passwd": 1}),
    "version_text": ("version", "1"), "sha_number": ("tokenizer_sha256", 12),
    "threads_zero": ("threads", 0), "threads_text": ("threads", "two"),
}


@pytest.mark.parametrize("edit", list(STATE_EDITS))
def test_a_bad_trainer_state_field_sets_the_checkpoint_aside(tmp_path, full_run, edit, capfd, one_thread):
    run_dir = killed_after_step_6(full_run, tmp_path)
    key, value = STATE_EDITS[edit]
    edit_state(run_dir / "checkpoints" / "step-0000006", key, value)
    falls_back_and_sets_aside(run_dir, full_run, key, capfd)


@pytest.mark.parametrize("edit", ["step_text", "step_negative", "step_huge"])
def test_an_explicit_checkpoint_with_a_bad_field_is_one_message(tmp_path, full_run, edit):
    run_dir = killed_after_step_6(full_run, tmp_path)
    key, value = STATE_EDITS[edit]
    bad = run_dir / "checkpoints" / "step-0000006"
    edit_state(bad, key, value)
    before = snapshot(run_dir)
    with pytest.raises(UserError, match=f"damaged.*state.json: {key} ") as info:
        prepare_run(recipe_for(run_dir), str(bad), False)
    assert info.value.where == str(bad) and "--resume" in info.value.fix
    assert snapshot(run_dir) == before


def test_train_state_problems_accepts_every_saved_state(full_run):
    for p in ck.list_checkpoints(full_run):
        c = ck.read(p, require=ck.TrainState.required_keys())
        assert c.state.problems(int(p.name.split("-")[1])) == []


# ------------------------------------------------------------------------------- the manifest
def test_a_checkpoint_lists_every_file_with_its_sha256_and_writes_the_manifest_last(full_run):
    for p in [*ck.list_checkpoints(full_run), full_run / "final"]:
        listed = json.loads((p / MANIFEST).read_text())["files"]
        # every file but the manifest and bertcli's hidden markers (.bertcli-output.json, written after it)
        files = {f.relative_to(p).as_posix(): f for f in p.rglob("*")
                 if f.is_file() and f.name != MANIFEST and not f.name.startswith(".")}
        assert set(listed) == set(files) and {"recipe.yaml", "config.json", "model.safetensors"} <= set(listed)
        for name, f in files.items():
            assert listed[name] == {"size": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
            if name != "recipe.yaml":   # building() writes recipe.yaml again on rename: the same bytes (hash above)
                assert f.stat().st_mtime_ns <= (p / MANIFEST).stat().st_mtime_ns   # written after every file


def _cut(f: Path, n: int = 1000):
    f.write_bytes(f.read_bytes()[:n])


def _flip_last_byte(f: Path):
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x01                                   # same size, valid header: only a hash sees it
    f.write_bytes(bytes(data))


MANIFEST_DAMAGES = {   # what is done to step-6, the file the reason must name
    "cut_weights": (lambda p: _cut(p / "model.safetensors"), "model.safetensors"),
    "flipped_weights": (lambda p: _flip_last_byte(p / "model.safetensors"), "model.safetensors"),
    "edited_config": (lambda p: (p / "config.json").write_text('{"model_type": "tiny", "x": 1}'), "config.json"),
    "removed_config": (lambda p: (p / "config.json").unlink(), "config.json"),
    "edited_optimizer_json": (lambda p: (p / "trainer_state" / "optimizer.json").write_text(
        (p / "trainer_state" / "optimizer.json").read_text().replace('"lr": ', '"lr": 1')), "optimizer.json"),
    "flipped_rng": (lambda p: _flip_last_byte(p / "trainer_state" / "rng.safetensors"), "rng.safetensors"),
    "edited_recipe": (lambda p: (p / "recipe.yaml").write_text((p / "recipe.yaml").read_text() + "\n# x\n"),
                      "recipe.yaml"),
    "garbled_manifest": (lambda p: (p / MANIFEST).write_text("{not json"), MANIFEST),
    "foreign_manifest": (lambda p: (p / MANIFEST).write_text('{"files": []}'), MANIFEST),
    "escaping_manifest": (lambda p: (p / MANIFEST).write_text(json.dumps(
        {"format": "bertcli-checkpoint-manifest", "version": 1, "files": {"../x": {"size": 1, "sha256": "0" * 64}}})),
        MANIFEST),
    "no_manifest_cut_weights": (lambda p: ((p / MANIFEST).unlink(), _cut(p / "model.safetensors")),
                                "model.safetensors"),
    "no_manifest_padded_weights": (lambda p: ((p / MANIFEST).unlink(), (p / "model.safetensors").write_bytes(
        (p / "model.safetensors").read_bytes() + b"\0" * 64)), "padded"),
}


@pytest.mark.parametrize("damage", list(MANIFEST_DAMAGES))
def test_a_damaged_file_of_the_newest_checkpoint_sets_it_aside(tmp_path, full_run, damage, capfd, one_thread):
    run_dir = killed_after_step_6(full_run, tmp_path)
    breaker, needle = MANIFEST_DAMAGES[damage]
    breaker(run_dir / "checkpoints" / "step-0000006")
    falls_back_and_sets_aside(run_dir, full_run, needle, capfd)


def test_a_checkpoint_without_a_manifest_still_resumes(tmp_path, full_run, one_thread):
    run_dir = killed_after_step_6(full_run, tmp_path)
    (run_dir / "checkpoints" / "step-0000006" / MANIFEST).unlink()        # written by an older bertcli
    chosen = prepare_run(recipe_for(run_dir), "auto", False)
    assert chosen.path.name == "step-0000006" and chosen.set_aside == []
    train(run_dir, resume=chosen)
    assert model_records(run_dir) == model_records(full_run)


# --------------------------------------------------------------- the same through the real CLI
@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """A real 4-step pretrain: checkpoints/step-0000002, step-0000004 and final/."""
    return finished_run(tmp_path_factory.mktemp("safety-cli"))


@pytest.mark.parametrize("value", ["thirty", -7, 10 ** 15])
def test_pretrain_resume_sets_a_bad_step_aside_and_trains_on(cli_run, tmp_path, value):
    """The issue's three: ValueError, a traceback and a 200 s hang, 'done' with nothing trained."""
    run = tmp_path / "run"
    shutil.copytree(cli_run / "run", run)
    bad = run / "checkpoints" / "step-0000004"
    edit_state(bad, "step", value)
    before = snapshot(bad)
    r = pretrain_cli(cli_run / "corpus.txt", run, "--resume", "auto", steps=6)
    assert r.rc == 0 and "Traceback" not in r.output, r.output
    flat = "".join(r.output.split())
    assert "step-0000004isdamaged" in flat and "state.json:step" in flat and "resumingfrom" in flat
    aside = run / "checkpoints" / "damaged-step-0000004"
    assert snapshot(aside) == before
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 7))                                  # 3..6 trained again from step 2
    assert json.loads((run / "checkpoints" / "step-0000006" / "trainer_state" / "state.json").read_text())["step"] == 6


def test_pretrain_resume_when_every_checkpoint_is_damaged_is_one_message(cli_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(cli_run / "run", run)
    edit_state(run / "checkpoints" / "step-0000004", "step", -7)
    _cut(run / "checkpoints" / "step-0000002" / "model.safetensors")
    before = snapshot(run)
    r = pretrain_cli(cli_run / "corpus.txt", run, "--resume", "auto", steps=6)
    assert_user_error(r, "every checkpoint of the run is damaged", "--force")
    assert intact(before, run) and sorted(snapshot(run)) == sorted(before)


@pytest.fixture
def pretrained_copy(pretrained_tiny, tmp_path) -> Path:
    """The shared pretrained checkpoint copied (never damage the original), with a manifest as
    this bertcli writes it."""
    copy = tmp_path / "ckpt"
    shutil.copytree(pretrained_tiny, copy)
    (copy / MANIFEST).unlink(missing_ok=True)
    write_manifest(copy)
    return copy


def _flip_weight_byte(f: Path):
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x40
    f.write_bytes(bytes(data))


CKPT_DAMAGES = {   # damage, message
    "flipped_with_manifest": (lambda p: _flip_weight_byte(p / "model.safetensors"), "does not match its sha256"),
    "cut_without_manifest": (lambda p: ((p / MANIFEST).unlink(), _cut(p / "model.safetensors")), "model.safetensors"),
    "padded_without_manifest": (lambda p: ((p / MANIFEST).unlink(), (p / "model.safetensors").write_bytes(
        (p / "model.safetensors").read_bytes() + b"\0" * 8)), "model.safetensors"),
    "tokenizer_edited": (lambda p: (p / "vocab.txt").write_text((p / "vocab.txt").read_text() + "extra\n"), "vocab.txt"),
}


def _commands(ckpt: Path, tmp_path: Path) -> dict[str, list]:
    (tmp_path / "in.txt").write_text("the [MASK] sat on the mat\n")
    rows = "text,label\n" + "".join(f"{w} good,pos\n{w} bad,neg\n" for w in ("a", "b", "c", "d"))
    (tmp_path / "train.csv").write_text(rows)
    (tmp_path / "dev.csv").write_text(rows)
    return {"export": ["export", "-c", ckpt, "--out", tmp_path / "bundle"],
            "predict": ["predict", "-c", ckpt, "--input", tmp_path / "in.txt", "--out", tmp_path / "out.jsonl"],
            "finetune": ["finetune", "classify", "-c", ckpt, "--train", tmp_path / "train.csv", "--dev",
                         tmp_path / "dev.csv", "--out", tmp_path / "ft", "--set", "finetune.epochs=1"]}


@pytest.mark.parametrize("command,damage", [("export", "flipped_with_manifest"), ("predict", "flipped_with_manifest"),
                                            ("finetune", "flipped_with_manifest"), ("export", "cut_without_manifest"),
                                            ("predict", "padded_without_manifest"), ("export", "tokenizer_edited")])
def test_a_damaged_checkpoint_is_refused_by_export_predict_and_finetune(pretrained_copy, tmp_path, command, damage):
    breaker, needle = CKPT_DAMAGES[damage]
    breaker(pretrained_copy)
    args = _commands(pretrained_copy, tmp_path)[command]
    before = snapshot(tmp_path)
    r = run_cli(*args, cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, needle, "fix:")
    assert "".join(str(pretrained_copy).split()) in "".join(r.output.split())
    assert intact(before, tmp_path)                     # nothing the user had changed
    assert not (tmp_path / "bundle").exists() and not (tmp_path / "ft").exists()


def test_an_intact_checkpoint_with_a_manifest_predicts(pretrained_copy, tmp_path):
    r = run_cli(*_commands(pretrained_copy, tmp_path)["predict"], cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 1


# ------------------------------------------------------------------- the Hugging Face cache
def hf_cache(root: Path, ckpt: Path, name: str = "models--org--tiny") -> Path:
    """`ckpt` laid out as huggingface_hub caches it: every file of the snapshot a relative
    symlink into ../../blobs/<sha256>, the weights as two shards and an index."""
    state = load_file(str(ckpt / "model.safetensors"))
    names = sorted(state)
    staged = root / "staged"
    staged.mkdir(parents=True)
    for f in ckpt.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", MANIFEST):
            shutil.copyfile(f, staged / f.name)
    parts = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
             "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for part, keys in parts.items():
        save_file({k: state[k] for k in keys}, str(staged / part), metadata={"format": "pt"})
    (staged / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: part for part, keys in parts.items() for k in keys}}))
    repo = root / "hub" / name
    snap = repo / "snapshots" / "0123abcd"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    for f in staged.iterdir():
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, repo / "blobs" / digest)
        (snap / f.name).symlink_to(Path("..") / ".." / "blobs" / digest)
    shutil.rmtree(staged)
    return snap


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    from helpers.export import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("tiny"), "bert", "classification")


def test_a_hugging_face_cache_snapshot_loads_the_same_weights(tiny_bert, tmp_path):
    from bertcli.model import load_checkpoint

    snap = hf_cache(tmp_path, tiny_bert)
    assert all((snap / n).is_symlink() for n in ("config.json", "model-00001-of-00002.safetensors"))
    before = snapshot(tmp_path)
    ours, _ = load_checkpoint(tiny_bert, head="classification")
    theirs, _ = load_checkpoint(snap, head="classification")
    for (a, x), (b, y) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        assert a == b and torch.equal(x, y)
    assert snapshot(tmp_path) == before


def _relink(link: Path, target: Path):
    link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def _outside(tmp: Path, name: str) -> Path:
    (tmp / name).mkdir()
    return tmp / name / "blob"


LINKS = {   # how a shard link leaves its models--* root: (snapshot, tmp_path, original checkpoint)
    "other_tmp_dir": lambda snap, tmp, ckpt: _relink(
        snap / "model-00002-of-00002.safetensors",
        Path(shutil.copy(snap / "model-00002-of-00002.safetensors", _outside(tmp, "elsewhere")))),
    "another_models_root": lambda snap, tmp, ckpt: _relink(
        snap / "model-00002-of-00002.safetensors",
        (hf_cache(tmp / "second", ckpt, "models--other--model") / "model-00002-of-00002.safetensors").resolve()),
    "absolute_link_outside": lambda snap, tmp, ckpt: (
        shutil.copy(snap / "model-00002-of-00002.safetensors", _outside(tmp, "elsewhere2")),
        (snap / "model-00002-of-00002.safetensors").unlink(),
        (snap / "model-00002-of-00002.safetensors").symlink_to(tmp / "elsewhere2" / "blob")),
}


@pytest.mark.parametrize("how", list(LINKS))
def test_links_that_leave_the_cache_root_are_refused(tiny_bert, tmp_path, how):
    from bertcli.model import load_checkpoint

    snap = hf_cache(tmp_path / "a", tiny_bert)
    LINKS[how](snap, tmp_path, tiny_bert)
    before = snapshot(tmp_path)
    with pytest.raises(UserError, match="outside the checkpoint directory") as info:
        load_checkpoint(snap, head="classification")
    assert "model.safetensors.index.json" in info.value.where
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("layout", ["not_a_snapshot", "root_not_models"])
def test_the_blob_layout_outside_a_models_root_is_refused(tiny_bert, tmp_path, layout):
    """The links are the cache's, but the directory is not a models--*/snapshots/REV folder."""
    from bertcli.model import load_checkpoint

    snap = hf_cache(tmp_path, tiny_bert)
    repo = snap.parents[1]
    if layout == "not_a_snapshot":
        moved = repo / "plain" / "rev"                 # models--org--tiny/plain/rev/ -> ../../blobs
    else:
        moved = tmp_path / "hub" / "mine" / "snapshots" / "0123abcd"
        shutil.move(str(repo / "blobs"), str(tmp_path / "hub" / "mine" / "blobs"))
    moved.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(snap), str(moved))
    with pytest.raises(UserError, match="outside the checkpoint directory"):
        load_checkpoint(moved, head="classification")


def test_a_cached_model_predicts_through_the_cli(tiny_bert, tmp_path):
    snap = hf_cache(tmp_path, tiny_bert)
    (tmp_path / "in.txt").write_text("the cat sat on the mat\n")
    r = run_cli("predict", "-c", snap, "--input", tmp_path / "in.txt", "--out", tmp_path / "p.jsonl",
                cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert json.loads((tmp_path / "p.jsonl").read_text())["label"] in ("negative", "positive")


# ---------------------------------------------------------------------- foreign or damaged bundles
@pytest.fixture(scope="module")
def bundle(tiny_bert, tmp_path_factory) -> Path:
    from bertcli.export.run import run_export

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    result = run_export(tiny_bert, tmp_path_factory.mktemp("bundle") / "b", task="classification")
    torch.set_num_threads(before)
    assert result.passed
    return result.out


def _info_edit(key, value):
    def edit(b: Path):
        info = json.loads((b / "export_info.json").read_text())
        info[key] = value
        (b / "export_info.json").write_text(json.dumps(info))
    return edit


INFO_DAMAGES = {   # damage, needle
    "task_list": (_info_edit("task", ["classification"]), "'task'"),
    "task_number": (_info_edit("task", 3), "'task'"),
    "length_text": (_info_edit("max_sequence_length", "64"), "'max_sequence_length'"),
    "length_zero": (_info_edit("max_sequence_length", 0), "'max_sequence_length'"),
    "vocab_negative": (_info_edit("vocab_size", -1), "'vocab_size'"),
    "labels_object": (_info_edit("labels", {"a": 1}), "'labels'"),
    "files_list": (_info_edit("files", ["model.onnx"]), "'files'"),
    "not_an_object": (lambda b: (b / "export_info.json").write_text("[1, 2]"), "not an object"),
    "not_json": (lambda b: (b / "export_info.json").write_text("{oops"), "cannot read export_info.json"),
    "cut_model": (lambda b: _cut(b / "model.onnx", 500), "cannot load model.onnx"),
    "edited_tokenizer_config": (lambda b: (b / "tokenizer_config.json").write_text(json.dumps(
        {**json.loads((b / "tokenizer_config.json").read_text()), "note": "x"})), "tokenizer_config.json is"),
    "missing_tokenizer": (lambda b: (b / "tokenizer.json").unlink(), "has no tokenizer"),
    "missing_tokenizer_config": (lambda b: (b / "tokenizer_config.json").unlink(), "tokenizer_config.json is missing"),
    "config_list": (lambda b: (b / "config.json").write_text("[]"), "config.json"),
}


def _copy_bundle(bundle: Path, tmp_path: Path) -> Path:
    b = tmp_path / "bundle"
    shutil.copytree(bundle, b)
    return b


@pytest.mark.parametrize("damage", list(INFO_DAMAGES))
def test_a_damaged_bundle_is_one_message(bundle, tmp_path, damage):
    from bertcli.export.predictor import open_model

    b = _copy_bundle(bundle, tmp_path)
    breaker, needle = INFO_DAMAGES[damage]
    breaker(b)
    before = snapshot(b)
    with pytest.raises(UserError) as info:
        open_model(b)
    assert needle in str(info.value) and info.value.where and str(b) in info.value.where, str(info.value)
    assert snapshot(b) == before


def foreign_graph(path: Path, how: str) -> None:
    """A graph that is not a bertcli export: input_ids [B, T] -> an output that is wrong in one way."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    five = numpy_helper.from_array(np.ones((1, 5), dtype=np.float32), "five")
    nodes = [helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT)]
    name, elem, shape = "logits", TensorProto.FLOAT, ["batch", 5]
    if how == "rank1":
        nodes.append(helper.make_node("ReduceSum", ["f", "axes"], ["logits"], keepdims=0))    # [B]
        shape = ["batch"]
    elif how in ("dynamic_wide", "no_shape"):   # [B, T]: a width only running it shows
        nodes.append(helper.make_node("Identity", ["f"], ["logits"]))
        shape = ["batch", "n"] if how == "dynamic_wide" else None
    elif how == "int_scores":
        nodes.append(helper.make_node("ReduceSum", ["input_ids", "axes"], ["logits"], keepdims=1))  # int64 [B, 1]
        elem, shape = TensorProto.INT64, ["batch", 1]
    else:
        nodes += [helper.make_node("ReduceSum", ["f", "axes"], ["s"], keepdims=1),            # [B, 1]
                  helper.make_node("Mul", ["s", "five"], ["logits" if how != "renamed" else "scores"])]  # [B, 5]
        if how == "renamed":
            name, shape = "scores", ["batch", 2]
    out = helper.make_tensor_value_info(name, elem, shape)
    model = helper.make_model(helper.make_graph(nodes, "foreign", [ids], [out], [axes, five]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    info = json.loads((path.parent / "export_info.json").read_text())
    info["files"]["model.onnx"] = path.stat().st_size                   # consistent, just foreign
    (path.parent / "export_info.json").write_text(json.dumps(info))


GRAPHS = {"renamed": "has no output 'logits'", "rank1": "has 1 axes", "wide": "has 5 on its labels axis",
          "int_scores": "not floating-point", "dynamic_wide": "came back with shape [1, 8]",
          "no_shape": "came back with shape [1, 8]"}


@pytest.mark.parametrize("how", list(GRAPHS))
def test_a_foreign_graph_is_one_message_not_an_index_error(bundle, tmp_path, how):
    from bertcli.export.predictor import open_model

    b = _copy_bundle(bundle, tmp_path)
    foreign_graph(b / "model.onnx", how)
    before = snapshot(b)
    with pytest.raises(UserError, match=GRAPHS[how].replace("[", r"\[")) as info:
        list(open_model(b).predict([("line 1", {"text": "the cat sat"})]))
    assert info.value.where == str(b / "model.onnx") and "export" in info.value.fix
    assert snapshot(b) == before


@pytest.mark.parametrize("case", ["task_list", "foreign_wide", "foreign_dynamic"])
def test_predict_on_a_foreign_bundle_through_the_cli(bundle, tmp_path, case):
    b = _copy_bundle(bundle, tmp_path)
    if case == "task_list":
        INFO_DAMAGES[case][0](b)
        needle = "'task'"
    else:
        foreign_graph(b / "model.onnx", case.split("_", 1)[1] if case == "foreign_wide" else "dynamic_wide")
        needle = "labels axis" if case == "foreign_wide" else "came back with shape"
    (tmp_path / "in.txt").write_text("the cat sat\na dog ran\n")
    before = snapshot(tmp_path)
    r = run_cli("predict", "-c", b, "--input", tmp_path / "in.txt", "--out", tmp_path / "p.jsonl",
                cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, needle, "fix:")
    assert intact(before, tmp_path) and not (tmp_path / "p.jsonl").exists()


def test_the_intact_bundle_still_predicts(bundle, tiny_bert):
    from bertcli.export.predictor import open_model

    recs = [("a", {"text": "the cat sat"}), ("b", {"text": "a dog ran in the park"})]
    onnx_preds = list(open_model(bundle).predict(recs))
    torch_preds = list(open_model(tiny_bert).predict(recs))
    assert [p["label"] for p in onnx_preds] == [p["label"] for p in torch_preds]


# ------------------------------------------------------------------------ manifest bookkeeping
def test_verify_is_remembered_only_for_the_same_files(tmp_path, tiny_bert):
    d = tmp_path / "c"
    shutil.copytree(tiny_bert, d)
    assert verify_checkpoint(d) is True
    _flip_last_byte(d / "model.safetensors")
    os.utime(d / "model.safetensors", ns=(1, 1))                   # another mtime: hashed again
    with pytest.raises(UserError, match="model.safetensors does not match its sha256"):
        verify_checkpoint(d)


def test_save_checkpoint_lists_only_the_files_it_wrote(tmp_path, tiny_bert):
    from bertcli.model import load_checkpoint, save_checkpoint

    d = tmp_path / "d"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    model, _ = load_checkpoint(tiny_bert, head="classification")
    save_checkpoint(model, d, tokenizer_dir=tiny_bert)
    listed = json.loads((d / MANIFEST).read_text())["files"]
    assert set(listed) == {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"}
    (d / "notes.txt").write_text("changed by the user")                   # not the checkpoint's business
    again, _ = load_checkpoint(d, head="classification")
    for x, y in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(x, y)
