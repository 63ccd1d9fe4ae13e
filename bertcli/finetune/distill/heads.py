"""What a teacher must be, read from its config.json before any data or weights (no torch: a
wrong teacher is one message at once)."""

from __future__ import annotations

from pathlib import Path

from bertcli.core.errors import UserError
from bertcli.tasks.heads import saved_head

HEAD_COMMANDS = {"classification": "finetune classify", "token": "finetune ner", "qa": "finetune squad"}


def check_teacher_head(directory: Path, head: str) -> None:
    """A teacher must have the task's trained head (config.json's architectures), before any data
    is read."""
    have = saved_head(directory)
    if have != head:
        what = "no task head (a pretraining checkpoint)" if have == "pretraining" else f"a {have} head"
        raise UserError(f"the teacher {directory} has {what}, and this task needs a trained {head} head",
                        where=str(directory / "config.json"),
                        fix=f"fine-tune it first (bertcli {HEAD_COMMANDS[head]} -c {directory}), then distill the "
                            "fine-tuned model directory")


__all__ = ["HEAD_COMMANDS", "check_teacher_head"]
