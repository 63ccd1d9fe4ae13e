"""Command-line options that mirror recipe keys, shared by the CLI and the task commands that
declare their own flags (bertcli/finetune/*/command.py).

Every numeric flag is made by `num_option`, with the bounds of the recipe key it sets (`of=`) or
its own, in `num`'s terms, an upper bound included, and is checked as the recipe's keys are
(finite, within the bounds: one message naming the flag and the largest value accepted, exit 2).
NUM_FLAGS records them, so a test can find any numeric flag that escaped.
"""

from __future__ import annotations

import dataclasses

import typer

from bertcli.config.schema import check_value, range_words
from bertcli.core.errors import UserError

NUM_FLAGS: set[str] = set()

SetOpt = typer.Option(None, "--set", "-s", help="Override a recipe field: section.key=value (YAML value); repeatable.")
EncodingOpt = typer.Option(None, "--encoding", help="Text encoding of the input files (default: UTF-8; a UTF-8 or UTF-16 "
                           "byte-order mark is honoured), e.g. latin1, cp1252, gb18030.")
OutForceOpt = typer.Option(False, "--force", help="Replace an earlier bertcli result in --out: only the files its "
                           "marker (.bertcli-output.json) lists are removed; anything else there stays.")
CHECKPOINT_HELP = "A bertcli or transformers BERT/RoBERTa/ALBERT/ModernBERT checkpoint directory."


def num_option(default, *names: str, of: tuple | None = None, help: str = "", **bounds):
    """A typer option for a number, range-checked like recipe keys (`schema.check_value`). `of`:
    (section dataclass, field name) whose declared `num(...)` bounds the flag shares; else
    `bounds` (ge=, gt=, le=) declare them here."""
    if of is not None:
        fld = {f.name: f for f in dataclasses.fields(of[0])}[of[1]]
    else:
        fld = dataclasses.field(metadata={"ge": None, "gt": None, "le": None, **bounds})
    if fld.metadata.get("le") is None:  # a declaration bug, caught when the CLI module loads
        raise TypeError(f"numeric flag {names[0]} declares no upper bound (le=)")
    NUM_FLAGS.update(names)

    shown = range_words(fld.metadata)

    def check(value):
        try:
            check_value(value, fld, names[0], where=f"the command line: {names[0]} {value}")
        except UserError as e:
            raise UserError(e.what, where=e.where, fix=f"give {names[0]} a number ({shown or 'finite'})") from None
        return value

    check.bounds = {k: fld.metadata.get(k) for k in ("ge", "gt", "le")}  # type: ignore[attr-defined]  # read by tests
    return typer.Option(default, *names, help=f"{help} [{shown}]" if shown else help, callback=check)
