"""`bertcli finetune embed` (bertcli.finetune.command)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertcli.config.finetune_sections import EmbedConfig  # pure data: the flag shares its declared range
from bertcli.config.options import EncodingOpt, num_option, option, pooling_option
from bertcli.core.errors import UserError
from bertcli.finetune.command import TaskCommand

if TYPE_CHECKING:
    from bertcli.config.options import SweepArgs
    from bertcli.config.recipe import Recipe


def embed_options(
    train: Path = option(..., "--train", help="Training file: .csv, .tsv, .jsonl, .parquet, a save_to_disk "
                                              "directory, or (--unsupervised) .txt, one sentence per line."),
    dev: Path | None = option(None, "--dev", help="Scored after every epoch (best epoch kept): a BEIR directory "
                                                  "(nDCG@10) or a file of scored pairs (Spearman)."),
    unsupervised: bool = option(False, "--unsupervised", help="SimCSE: each sentence of --text-column is its "
                                                              "own positive under another dropout mask."),
    anchor_column: str | None = option(None, "--anchor-column", help="Column of the anchor (query) (default `anchor`)."),
    positive_column: str | None = option(None, "--positive-column", help="Column of the positive (default `positive`)."),
    negative_column: list[str] | None = option(None, "--negative-column",
                                               help="Hard-negative column(s): repeatable, or a comma list."),
    text_column: str | None = option(None, "--text-column", help="Scored pairs: first text (default `text`); "
                                                                 "--unsupervised: the sentence."),
    text_pair_column: str | None = option(None, "--text-pair-column",
                                          help="Scored pairs: second text (default `text_pair`)."),
    score_column: str | None = option(None, "--score-column",
                                      help="Scored pairs: the similarity score; selects the CoSENT loss."),
    dims: str | None = option(None, "--dims", help="Matryoshka dimensions, e.g. 128,64,32 (at most the hidden size)."),
    pooling: str | None = pooling_option("finetune embed", ("mean", "cls", "max"), None,
                                         help="How each text becomes one vector (default mean)."),
    normalize: bool | None = option(None, "--normalize", help="L2-normalize the embeddings."),
    symmetric: bool | None = option(None, "--symmetric",
                                    help="In-batch negatives both ways (anchor->positive and back)."),
    mini_batch_size: int | None = num_option(None, "--mini-batch-size", of=(EmbedConfig, "mini_batch_size"),
                                             help="GradCache: texts per forward pass (the loss still sees the whole batch)."),
    encoding: str | None = EncodingOpt,
) -> None:
    """Fine-tune a sentence-embedding model (in-batch negatives, CoSENT, SimCSE); writes a sentence-transformers directory."""


def int_list(text: str | list[int] | None, flag: str) -> list[int] | None:
    """`128,64,32` -> [128, 64, 32] (a list passes through); a UserError naming the flag for anything else."""
    if text is None or isinstance(text, list):
        return text
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"{flag} {text!r} is not a comma list of integers", where="the command line",
                        fix=f"e.g. {flag} 128,64,32") from None
    if not values or min(values) < 1:
        raise UserError(f"{flag} {text!r}: give positive integers", where="the command line", fix=f"e.g. {flag} 128,64,32")
    return values


def embed_from_flags(recipe: Recipe, checkpoint: Path, out: Path, train: Path, dev: Path | None = None,
                     unsupervised: bool | None = None, anchor_column: str | None = None, positive_column: str | None = None,
              negative_column: list[str] | None = None, text_column: str | None = None,
              text_pair_column: str | None = None, score_column: str | None = None,
              dims: str | list[int] | None = None, pooling: str | None = None, normalize: bool | None = None,
              symmetric: bool | None = None, mini_batch_size: int | None = None, encoding: str | None = None) -> dict:
    from bertcli.finetune.embed.task import run_embed as run

    # the flags override finetune.embed's keys where given (--unsupervised only turns it on)
    flags = {"unsupervised": True if unsupervised else None, "anchor_column": anchor_column,
             "positive_column": positive_column, "negative_columns": negative_column, "text_column": text_column,
             "text_pair_column": text_pair_column, "score_column": score_column, "dims": int_list(dims, "--dims"),
             "pooling": pooling, "normalize": normalize, "symmetric": symmetric, "mini_batch_size": mini_batch_size}
    return run(recipe, checkpoint=checkpoint, train=Path(train), dev=None if dev is None else Path(dev), out=out,
               encoding=encoding, **{k: v for k, v in flags.items() if v is not None})


def check_sweep(sweep: SweepArgs, options: Mapping[str, Any]) -> None:
    """A sweep compares its runs' dev scores (a grid chooses its rate on them, the seeds' summary
    gives their spread): without --dev no run is scored, so there is nothing to sweep."""
    if options.get("dev") is not None:
        return
    if sweep.rates:
        raise UserError(f"--lr {','.join(f'{r:g}' for r in sweep.rates)} is a grid of rates, and finetune embed "
                        "has no --dev to choose one on", where="--lr",
                        fix="give --dev (a BEIR directory or scored pairs), or one --lr")
    flag = "--seeds" if sweep.seeds is not None else "--shared" if sweep.shared else "--resume"
    raise UserError(f"{flag} sweeps seeds and summarizes their dev scores, and finetune embed has no --dev to "
                    "score them on", where=flag,
                    fix="give --dev (a BEIR directory or scored pairs), or train one run (--seed N, no sweep flags)")


COMMANDS = [TaskCommand("embed", embed_options, embed_from_flags, recipe="embed", inputs=("train", "dev"),
                        sweep_check=check_sweep)]
