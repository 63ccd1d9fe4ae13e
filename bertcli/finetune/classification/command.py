"""`bertcli finetune glue` and `bertcli finetune classify` (bertcli.finetune.command)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bertcli.config.options import EncodingOpt, option
from bertcli.finetune.command import TaskCommand

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe
    from bertcli.finetune.sweep import Plan


def glue_options(
    tasks: str = option(..., "--tasks",
                        help="cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli (GLUE spellings such as SST-2 work), "
                             "several separated by commas, or all (every task found in --data-dir)."),
    data_dir: Path | None = option(None, "--data-dir",
                                   help="GLUE data: the download script's layout or a `datasets` save_to_disk / parquet "
                                        "directory."),
    hub: str | None = option(None, "--hub",
                             help="Load GLUE with `datasets.load_dataset` (e.g. nyu-mll/glue); needs the network."),
    from_mnli: bool = option(False, "--from-mnli",
                             help="Start RTE, MRPC and STS-B from the MNLI-fine-tuned encoder (RoBERTa's, "
                                  "MosaicBERT's, ModernBERT's protocol): MNLI runs first (the chosen rate's best "
                                  "run); their cells are marked."),
) -> None:
    """Fine-tune on GLUE tasks; write dev results and test-set submission files."""


def glue_from_flags(recipe: Recipe, checkpoint: Path, out: Path, tasks: str, data_dir: Path | None = None,
             hub: str | None = None, from_mnli: bool = False) -> dict:
    from bertcli.finetune.classification.glue_run import run_glue as run

    assert not from_mnli, "--from-mnli is a sweep (sweep_options): sweep_glue_from_flags runs it"
    return run(recipe, checkpoint=checkpoint, task=tasks, data_dir=data_dir, hub=hub, out=out)


def sweep_glue_from_flags(plan: Plan, recipe: Recipe, checkpoint: Path, out: Path, force: bool, tasks: str,
                          data_dir: Path | None = None, hub: str | None = None, from_mnli: bool = False) -> dict:
    from bertcli.finetune.classification.glue_sweep import sweep_glue as run

    return run(plan, recipe, checkpoint, out, force, tasks, data_dir=data_dir, hub=hub, from_mnli=from_mnli)


def classify_options(
    train: Path = option(..., "--train", help="Training file: .csv, .tsv, .jsonl, .parquet, or a save_to_disk directory."),
    dev: Path = option(..., "--dev", help="Dev file (same kinds), scored after every epoch."),
    test: Path | None = option(None, "--test", help="Test file: predictions are written for it; "
                                                    "with the label column it is scored too."),
    text_column: str | None = option(None, "--text-column",
                                     help="Column of the text (default: finetune.classify.text_column, `text`)."),
    text_pair_column: str | None = option(None, "--text-pair-column", help="Column of the second text of a pair task."),
    label_column: str | None = option(None, "--label-column",
                                      help="Column of the label (default `label`): strings or ints."),
    regression: bool = option(False, "--regression", help="Predict a number (labels must be numeric): Pearson/Spearman."),
    encoding: str | None = EncodingOpt,
) -> None:
    """Fine-tune a text (pair) classifier or regressor on your own files; accuracy, macro-F1, MCC (or Pearson, Spearman)."""


def classify_from_flags(recipe: Recipe, checkpoint: Path, out: Path, train: Path, dev: Path, test: Path | None = None,
                 text_column: str | None = None, text_pair_column: str | None = None, label_column: str | None = None,
                 regression: bool | None = None, encoding: str | None = None) -> dict:
    from bertcli.finetune.classification.classify import run_classify as run

    # the column flags override finetune.classify's keys where given (--regression only turns it on)
    flags = {"text_column": text_column, "text_pair_column": text_pair_column, "label_column": label_column,
             "regression": True if regression else None}
    return run(recipe, checkpoint=checkpoint, train=Path(train), dev=Path(dev), test=None if test is None else Path(test),
               out=out, encoding=encoding, **{k: v for k, v in flags.items() if v is not None})


COMMANDS = [
    TaskCommand("glue", glue_options, glue_from_flags, recipe="glue", inputs=("data_dir",), data_name="GLUE",
                sweep=sweep_glue_from_flags, sweep_options=("from_mnli",)),
    TaskCommand("classify", classify_options, classify_from_flags, recipe="classify", inputs=("train", "dev", "test")),
]
