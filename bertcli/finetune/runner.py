"""One fine-tuning run of any task: what every `bertcli finetune` command does around the engine.

    finetune_task(task, recipe, checkpoint, out)
        out defaults to runs/<task name>/<checkpoint name> -> the output directory and the
        checkpoint are checked (no weights loaded) -> the task reads every split -> its training
        split is cut to finetune.max_train_examples -> the engine fine-tunes, evaluates and
        writes `out/` -> the task's summary table.

`prepare` and `train` are the two halves, for runners of several tasks (GLUE reads every task
before training any, so a broken file is found in seconds, not hours).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bertcli.config.checkpoint import read_config
from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.core.paths import check_writable_dir, default_out
from bertcli.finetune.task import Task
from bertcli.tokenization.load import LOADABLE

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe


def check_checkpoint_files(checkpoint: Path) -> None:
    """The checks that need no weights, before any data is read: config.json, a tokenizer file."""
    read_config(checkpoint)
    if not any((checkpoint / name).is_file() for name in LOADABLE):
        raise UserError(f"checkpoint {checkpoint} has no tokenizer (no {' or '.join(LOADABLE)})", where=str(checkpoint),
                        fix="save the tokenizer next to the weights, e.g. "
                            "AutoTokenizer.from_pretrained(SRC).save_pretrained(DIR), or copy the run's tokenizer files")


def check_out_dir(path: Path) -> Path:
    """The output directory must be writable before any work (nothing trained is lost): the
    shared write-path check of every command."""
    return check_writable_dir(Path(path), "the output directory", "--out")


def prepare(task: Task, recipe: Recipe, checkpoint: Path, out: Path | None = None) -> Path:
    """Check `out` (default runs/<task>/<checkpoint>) and the checkpoint, read the task's splits
    into `task.data` with at most finetune.max_train_examples training examples; the output
    directory."""
    checkpoint = Path(checkpoint)
    out = check_out_dir(Path(out) if out is not None else default_out(checkpoint, task.name))
    check_checkpoint_files(checkpoint)
    task.data = task.read().limit_train(recipe.finetune.max_train_examples)
    return out


def train(task: Task, recipe: Recipe, checkpoint: Path, out: Path, init: str = "pretrained", show: bool = True) -> dict:
    """Fine-tune a prepared task into `out`; results.json's content. `show`: the task's summary
    table and where the output is."""
    from bertcli.finetune.engine import run_task  # torch: after the data are read and checked

    results = run_task(task, recipe, Path(checkpoint), Path(out), init=init)
    if show:
        console.summary(task.summary_title(results), task.summary_rows(results) + test_rows(task, results))
        console.log(f"model and predictions in {out}")
    return results


def test_rows(task: Task, results: dict) -> list[tuple[str, str]]:
    """Summary rows of the scored test splits (those with gold labels), after the dev rows."""
    return [("test" if name == "test" else f"test {name}", task.format({name: m}))
            for name, m in results.get("test", {}).items()]


def finetune_task(task: Task, recipe: Recipe, checkpoint: Path, out: Path | None = None, init: str = "pretrained",
                  show: bool = True) -> dict:
    """Fine-tune `checkpoint` on `task` into `out`; returns results.json's content. `init="random"`
    re-initializes the encoder (the baseline that shows what pretraining is worth)."""
    out = prepare(task, recipe, checkpoint, out)
    return train(task, recipe, checkpoint, out, init=init, show=show)


__all__ = ["finetune_task", "prepare", "train", "default_out", "check_checkpoint_files", "check_out_dir"]
