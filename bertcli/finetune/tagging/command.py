"""`bertcli finetune ner` (bertcli.finetune.command)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bertcli.config.options import EncodingOpt, option
from bertcli.finetune.command import TaskCommand

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe


def ner_options(
    data_dir: Path = option(..., "--data-dir",
                            help="train.txt/valid.txt/test.txt (or eng.train/eng.testa/eng.testb), "
                                 "*.jsonl with tokens/ner_tags, or a datasets save_to_disk directory (conll2003)."),
    encoding: str | None = EncodingOpt,
) -> None:
    """Fine-tune a tagger (NER, CoNLL-2003 style); entity P/R/F1 as conlleval, predictions in CoNLL layout."""


def ner_from_flags(recipe: Recipe, checkpoint: Path, out: Path, data_dir: Path, encoding: str | None = None) -> dict:
    from bertcli.finetune.tagging.task import run_ner as run

    return run(recipe, checkpoint=checkpoint, data_dir=Path(data_dir), out=out, encoding=encoding)


COMMANDS = [TaskCommand("ner", ner_options, ner_from_flags, recipe="ner", inputs=("data_dir",))]
