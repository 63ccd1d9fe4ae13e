"""`bertcli finetune squad` (bertcli.finetune.command)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertcli.config.options import num_option, option
from bertcli.finetune.command import TaskCommand

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe


def squad_options(
    data_dir: Path | None = option(None, "--data-dir",
                                   help="train-v1.1.json + dev-v1.1.json (or v2.0, or CMRC 2018's), "
                                        "a `datasets` save_to_disk directory or parquet files."),
    version: int = num_option(1, "--squad-version", ge=1, le=2,
                              help="1: SQuAD v1.1; 2: SQuAD v2.0 (unanswerable questions, null threshold)."),
    hub: str | None = option(None, "--hub",
                             help="Load with `datasets.load_dataset` (rajpurkar/squad, rajpurkar/squad_v2); needs the "
                                  "network."),
) -> None:
    """Fine-tune on SQuAD (windows over long contexts, n-best decoding, official EM/F1); write the
    best model and predictions.json / nbest_predictions.json / null_odds.json."""


def squad_from_flags(recipe: Recipe, checkpoint: Path, out: Path, data_dir: Path | None = None, version: int = 1,
              hub: str | None = None) -> dict:
    from bertcli.finetune.qa.task import run_squad as run

    return run(recipe, checkpoint=checkpoint, data_dir=None if data_dir is None else Path(data_dir), hub=hub,
               version=version, out=out)


def _kind(options: Mapping[str, Any]) -> str:
    return "squad" if options.get("version", 1) == 1 else "squad_v2"


COMMANDS = [TaskCommand("squad", squad_options, squad_from_flags, recipe="squad", inputs=("data_dir",), data_name="SQuAD",
                        out_kind=_kind)]
