"""`-c` for every command that takes a checkpoint: a run directory means its final/, or the newest
complete step checkpoint when the run did not finish (said so); a missing final/ beside
checkpoints names the newest one and the resume command; a regular file is said to be a file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ONE_THREAD, assert_user_error, run_cli


def _interrupted_run(tmp_path: Path, pretrained: Path, finished: bool) -> Path:
    """A run directory as an interrupted (or finished) `pretrain` leaves it: step checkpoints
    (complete: trainer_state/state.json), one incomplete newer one, and final/ when finished."""
    run = tmp_path / "runs" / "bert-tiny"
    for step, complete in ((50, True), (113, True), (120, False)):
        d = run / "checkpoints" / f"step-{step:07d}"
        shutil.copytree(pretrained, d)
        if complete:
            (d / "trainer_state").mkdir()
            (d / "trainer_state" / "state.json").write_text(f'{{"step": {step}}}')
    (run / "recipe.yaml").write_text(f"name: bert-tiny\noutput_dir: {run}\n")
    if finished:
        shutil.copytree(pretrained, run / "final")
    return run


def test_run_directory_resolves_to_final(tmp_path, pretrained_tiny):
    run = _interrupted_run(tmp_path, pretrained_tiny, finished=True)
    r = run_cli("fill-mask", "-c", str(run), "the [MASK] sat on the mat", "--json", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert f"using its final model {run / 'final'}" in r.stderr
    assert '"candidates"' in r.stdout or '"token"' in r.stdout, r.stdout


def test_unfinished_run_directory_resolves_to_newest_complete_checkpoint(tmp_path, pretrained_tiny):
    run = _interrupted_run(tmp_path, pretrained_tiny, finished=False)
    r = run_cli("fill-mask", "-c", str(run), "the [MASK] sat on the mat", "--json", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    newest = run / "checkpoints" / "step-0000113"          # step-0000120 has no state.json: incomplete
    assert f"using its newest complete checkpoint {newest}" in r.stderr, r.stderr
    assert f"bertcli pretrain -r {run / 'recipe.yaml'} --resume auto" in r.stderr


@pytest.mark.parametrize("command", [
    ["fill-mask", "the [MASK] sat"],
    ["export", "-o", "bundle"],
    ["predict", "-i", "in.txt"],
    ["features", "-i", "in.txt", "-o", "f.npy"],
    ["finetune", "classify", "--train", "t.csv", "--dev", "t.csv"],
    ["finetune", "ner", "-d", "."],
    ["evaluate", "--corpus", "in.txt"],
])
def test_missing_final_names_newest_checkpoint_and_resume_command(tmp_path, pretrained_tiny, command):
    run = _interrupted_run(tmp_path, pretrained_tiny, finished=False)
    (tmp_path / "in.txt").write_text("the cat sat\n")
    (tmp_path / "t.csv").write_text("text,label\na,0\nb,1\n")
    r = run_cli(*command[:2 if command[0] == "finetune" else 1], "-c", str(run / "final"),
                *command[2 if command[0] == "finetune" else 1:], cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, f"{run / 'final'} does not exist: the run did not finish",
                      f"newest complete checkpoint is {run / 'checkpoints' / 'step-0000113'}",
                      f"bertcli pretrain -r {run / 'recipe.yaml'} --resume auto")


def test_a_file_is_said_to_be_a_file(tmp_path, pretrained_tiny):
    r = run_cli("fill-mask", "-c", str(pretrained_tiny / "config.json"), "the [MASK] sat", cwd=tmp_path)
    assert_user_error(r, f"-c {pretrained_tiny / 'config.json'} is a file, not a checkpoint directory",
                      f"give the directory that holds it: -c {pretrained_tiny}")
    assert "does not exist" not in r.output


def test_empty_directory_and_missing_path(tmp_path):
    (tmp_path / "empty").mkdir()
    r = run_cli("fill-mask", "-c", "empty", "the [MASK] sat", cwd=tmp_path)
    assert_user_error(r, "no config.json in empty", "final/ and checkpoints/")
    r = run_cli("export", "-c", "nowhere", "-o", "b", cwd=tmp_path)
    assert_user_error(r, "checkpoint directory nowhere does not exist")


def test_resume_command_of_a_default_output_dir(tmp_path, pretrained_tiny):
    """A run at the default output_dir (null: runs/NAME) gets the plain resume command, run from
    the directory the run was started in; elsewhere the command says where the run is."""
    run = _interrupted_run(tmp_path, pretrained_tiny, finished=False)
    (run / "recipe.yaml").write_text("name: bert-tiny\noutput_dir: null\n")
    r = run_cli("fill-mask", "-c", "runs/bert-tiny/final", "the [MASK] sat", cwd=tmp_path)
    assert_user_error(r, "`bertcli pretrain -r runs/bert-tiny/recipe.yaml --resume auto`")
    r = run_cli("fill-mask", "-c", run / "final", "the [MASK] sat", cwd=run)
    assert_user_error(r, f"--resume auto --set output_dir={run}`")
