"""Command-line options that mirror recipe keys, shared by the CLI and the task commands that
declare their own flags (bertcli/finetune/*/command.py).

Every flag concept is declared once, in FLAGS (its spelling, short form, meaning and values),
and every option of every command is made from its declaration (`option`, `num_option`,
`pooling_option`), so one concept has one spelling and one spelling one meaning
(tests/test_flags.py). A renamed flag's old spelling (RENAMED) keeps working for one release,
hidden from --help, with a note naming the new one (`keep_old_spellings`). docs/cli.md lists
them.

Every numeric flag is made by `num_option`, with the bounds of the recipe key it sets (`of=`) or
its own, in `num`'s terms, an upper bound included, and is checked as the recipe's keys are
(finite, within the bounds: one message naming the flag and the largest value accepted, exit 2).
NUM_FLAGS records them, so a test can find any numeric flag that escaped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import typer

from bertcli.config.bounds import MAX_SEED
from bertcli.config.finetune_sections import FinetuneConfig
from bertcli.config.schema import check_value, range_words
from bertcli.core import console, jsonout
from bertcli.core.errors import UserError

NUM_FLAGS: set[str] = set()
MAX_RUNS = 10_000          # --seeds N: runs of one sweep (each a whole fine-tuning run)


# ------------------------------------------------------------------ one declaration per concept
@dataclasses.dataclass(frozen=True)
class Flag:
    """One flag concept: its one spelling (`name`, with `short` and a `--no-` form `off` where it
    has them), its meaning (the help, unless a command states its own detail of the same
    meaning), the value names it takes (`values`, for the docs and the pooling check), and the
    commands it belongs to (`only`: command-specific; empty: any command may use it)."""

    name: str
    help: str
    short: str | None = None
    off: str | None = None
    values: tuple[str, ...] = ()
    only: tuple[str, ...] = ()

    @property
    def decls(self) -> list[str]:
        """What typer is given: ["--verify/--no-verify"] or ["--checkpoint", "-c"]."""
        return [f"{self.name}/{self.off}" if self.off else self.name, *([self.short] if self.short else [])]


# The pooling vocabulary: one value name per way of making one vector of a text's token states
# (bertcli/model/pooling.py, bertcli/finetune/encoder_heads.py); each command takes a subset.
POOLINGS = ("cls", "mean", "max", "pooler", "none")

_FLAGS = (
    # -- shared: the same meaning on every command that has them
    Flag("--recipe", "Recipe: a YAML path or a shipped name (bert-tiny, albert-base, ...).", short="-r"),
    Flag("--set", "Override a recipe field: section.key=value (YAML value); repeatable.", short="-s"),
    Flag("--checkpoint", "A bertcli or transformers BERT/RoBERTa/ALBERT/ModernBERT checkpoint directory.", short="-c"),
    Flag("--out", "Where the command writes its result.", short="-o"),
    Flag("--force", "Replace the earlier output: only what bertcli wrote there (its marker, .bertcli-output.json, "
         "lists it) is removed; anything else stays."),
    Flag("--resume", "Continue what is already in the output."),
    Flag("--json", "Print the figures as one JSON document on stdout instead of tables."),
    Flag("--input", "The texts or records to run the model on: .txt (one per line), .csv, .tsv, .jsonl, .parquet.",
         short="-i"),
    Flag("--train", "Training file."),
    Flag("--dev", "Dev (validation) data."),
    Flag("--test", "Test file."),
    Flag("--data-dir", "A dataset directory holding its splits.", short="-d"),
    Flag("--hub", "A `datasets` name to load with datasets.load_dataset (needs the network)."),
    Flag("--text-column", "Column of the text."),
    Flag("--text-pair-column", "Column of the second text of a pair."),
    Flag("--label-column", "Column of the label."),
    Flag("--id-column", "Column of the text ids (default: the row number)."),
    Flag("--encoding", "Text encoding of the input files (default: UTF-8; a UTF-8 or UTF-16 byte-order mark is "
         "honoured), e.g. latin1, cp1252, gb18030."),
    Flag("--max-seq-length", "Tokens per sequence (special tokens included); longer ones are truncated."),
    Flag("--batch-size", "Sequences per batch."),
    Flag("--seed", "Seed of the command's randomness."),
    Flag("--threads", "Intra-op CPU threads (default: the cores other jobs leave free; docs/threads.md)."),
    Flag("--device", "auto, cpu, cuda, cuda:N, mps.", values=("auto", "cpu", "cuda", "cuda:N", "mps")),
    Flag("--pooling", "How a text's token states become one vector.", values=POOLINGS),
    Flag("--normalize", "L2-normalize the embeddings.", off="--no-normalize"),
    Flag("--top-k", "Candidates per mask."),
    Flag("--task", "The head kind: fill-mask, classification, token-classification, question-answering, features "
         "or embed.", short="-t",
         values=("fill-mask", "classification", "token-classification", "question-answering", "features", "embed"),
         only=("export", "predict")),
    Flag("--squad-version", "1: SQuAD v1.1; 2: SQuAD v2.0 (unanswerable questions, null threshold).",
         values=("1", "2"), only=("finetune squad", "distill")),
    Flag("--lr", "Peak learning rate."),
    Flag("--epochs", "Passes over the training set."),
    Flag("--seeds", "Run several seeds."),
    Flag("--shared", "Let other bertcli processes write this sweep's --out at the same time."),
    # -- the program, not a command
    Flag("--version", "Print the program's version and exit.", only=("",)),
    Flag("--debug", "Show the traceback of an error instead of the one-line message.", only=("",)),
    # -- command-specific
    Flag("--yaml", "Print only the resolved recipe.", only=("info",)),
    Flag("--rebuild", "Rebuild the cached stage even when a complete, up-to-date copy exists.",
         only=("tokenize", "build-data")),
    Flag("--all-phases", "Build every phase's data.", only=("build-data",)),
    Flag("--init-from", "Continued pretraining: start from this checkpoint.", only=("pretrain",)),
    Flag("--corpus", "Held-out text (a file or directory, as corpus.sources reads it); repeatable.", only=("evaluate",)),
    Flag("--objective", "Row layout: nsp, sop or none.", values=("nsp", "sop", "none"), only=("evaluate",)),
    Flag("--pppl-rows", "Rows scored for the pseudo-perplexity.", only=("evaluate",)),
    Flag("--cache", "Where the corpus, tokenizer and masked-data stages are cached.", only=("evaluate",)),
    Flag("--opset", "ONNX opset.", only=("export",)),
    Flag("--fp16", "Half-precision weights.", only=("export",)),
    Flag("--quantize", "int8: ONNX Runtime dynamic quantization.", values=("int8",), only=("export",)),
    Flag("--verify", "Compare ONNX Runtime with PyTorch on real inputs.", off="--no-verify", only=("export",)),
    Flag("--optimize", "ONNX Runtime's transformer fusions.", off="--no-optimize", only=("export",)),
    Flag("--allow-impossible", "An empty answer wins when the null span scores higher (SQuAD 2.0).", only=("predict",)),
    Flag("--teacher-task", "The teacher's fine-tuning task, and so the data flags read.",
         values=("classify", "ner", "squad"), only=("distill",)),
    Flag("--student-layers", "Student of K of the teacher's layers.", only=("distill",)),
    Flag("--student", "Student: a checkpoint directory or recipe.", only=("distill",)),
    Flag("--unlabelled", "Examples only the teacher labels.", only=("distill",)),
    Flag("--layers", "Hidden-state layers, e.g. -1,-2,-3,-4 (0 = embeddings).", only=("features",)),
    Flag("--combine", "concat, sum or mean over the layers.", values=("concat", "sum", "mean"), only=("features",)),
    Flag("--beir", "BEIR directory: corpus.jsonl, queries.jsonl, qrels/{dev,test}.tsv.", only=("evaluate-embed",)),
    Flag("--sts", "STS pairs: STS-B's tsv, or a table with text, text_pair, score.", only=("evaluate-embed",)),
    Flag("--split", "The qrels split of --beir: dev or test.", values=("dev", "test"), only=("evaluate-embed",)),
    Flag("--markdown", "Print GitHub markdown tables.", only=("compare",)),
    Flag("--no-correction", "Leave the p-values uncorrected.", only=("compare",)),
    Flag("--tasks", "GLUE tasks: names separated by commas, or all.", only=("finetune glue",)),
    Flag("--from-mnli", "Start RTE, MRPC and STS-B from the MNLI-fine-tuned encoder.", only=("finetune glue",)),
    Flag("--regression", "Predict a number (labels must be numeric).", only=("finetune classify",)),
    Flag("--unsupervised", "SimCSE: each sentence is its own positive.", only=("finetune embed",)),
    Flag("--anchor-column", "Column of the anchor (query).", only=("finetune embed",)),
    Flag("--positive-column", "Column of the positive.", only=("finetune embed",)),
    Flag("--negative-column", "Hard-negative column(s).", only=("finetune embed",)),
    Flag("--score-column", "Column of the similarity score.", only=("finetune embed",)),
    Flag("--dims", "Matryoshka dimensions.", only=("finetune embed",)),
    Flag("--symmetric", "In-batch negatives both ways.", off="--one-way", only=("finetune embed",)),
    Flag("--mini-batch-size", "GradCache: texts per forward pass.", only=("finetune embed",)),
)
FLAGS: dict[str, Flag] = {f.name: f for f in _FLAGS}
assert len(FLAGS) == len(_FLAGS), "a flag is declared twice"


@dataclasses.dataclass(frozen=True)
class Renamed:
    """A renamed flag: its old spellings still work on `commands` for one release (hidden from
    --help; a one-line note on stderr names the new one)."""

    old: tuple[str, ...]
    new: str
    commands: tuple[str, ...]


RENAMED = (
    Renamed(("--max-length",), "--max-seq-length", ("predict",)),
    Renamed(("--pool",), "--pooling", ("features",)),
    Renamed(("--version",), "--squad-version", ("finetune squad", "distill")),
    Renamed(("--layers",), "--student-layers", ("distill",)),
    Renamed(("--force",), "--rebuild", ("tokenize", "build-data")),
    Renamed(("--task", "-t"), "--tasks", ("finetune glue",)),
    Renamed(("--task", "-t"), "--teacher-task", ("distill",)),
)

# Every OptionInfo made from the declarations above (`option`, `num_option`) carries the name of
# its declaration (`declared`), so a test can check that each option of each command is one.
DECLARED = "_bertcli_declared"


def _made(info: typer.models.OptionInfo, name: str) -> typer.models.OptionInfo:
    setattr(info, DECLARED, name)
    return info


def option(default: Any, name: str, *, help: str | None = None, **kwargs: Any) -> Any:
    """The typer option of the declared flag `name` (FLAGS): its spellings, and its help unless
    the command states its own detail (`help`)."""
    try:
        flag = FLAGS[name]
    except KeyError:
        raise TypeError(f"{name} is not declared in bertcli/config/options.py FLAGS") from None
    return _made(typer.Option(default, *flag.decls, help=flag.help if help is None else help, **kwargs), name)


def pooling_option(command: str, supported: tuple[str, ...], default: str | None, help: str) -> Any:
    """--pooling for `command`, which takes the `supported` subset of POOLINGS; any other value
    is one message naming the subset (exit 2), before any work."""
    assert set(supported) <= set(POOLINGS), supported

    def check(value: str | None) -> str | None:
        if value is None or value in supported or (value == "last-layer-mean" and "mean" in supported):
            return value
        other = "" if value not in POOLINGS else f" ({value} is a pooling of other commands)"
        raise UserError(f"--pooling {value!r}: {command} takes {', '.join(supported)}{other}",
                        where="the command line", fix=f"give --pooling one of {', '.join(supported)}")

    return option(default, "--pooling", help=f"{help} One of: {', '.join(supported)}.", callback=check)


SetOpt = option(None, "--set")
EncodingOpt = option(None, "--encoding")
OutForceOpt = option(False, "--force", help="Replace an earlier bertcli result in --out: only the files its marker "
                     "(.bertcli-output.json) lists are removed; anything else there stays.")
CHECKPOINT_HELP = FLAGS["--checkpoint"].help


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
    flag = FLAGS.get(names[0])
    names = (*names, *(flag.decls[1:] if flag is not None and len(names) == 1 else ()))

    shown = range_words(fld.metadata)

    def check(value: float | None) -> float | None:
        try:
            check_value(value, fld, names[0], where=f"the command line: {names[0]} {value}")
        except UserError as e:
            raise UserError(e.what, where=e.where, fix=f"give {names[0]} a number ({shown or 'finite'})") from None
        return value

    check.bounds = {k: fld.metadata.get(k) for k in ("ge", "gt", "le")}  # type: ignore[attr-defined]  # read by tests
    return _made(typer.Option(default, *names, help=f"{help} [{shown}]" if shown else help, callback=check), names[0])


# ------------------------------------------------------------------ the shared fine-tuning flags
# The hyperparameters every fine-tuning command (`finetune TASK`, `distill`) takes as flags
# (run_glue / run_ner's names), each the recipe key it sets: (parameter, flag, recipe key, type,
# FinetuneConfig field or None for bounds of its own, help). `--lr` takes a comma list too (a
# learning-rate grid, bertcli/finetune/sweep.py): one value is the recipe key as before.
FINETUNE_FLAGS = (
    ("lr", "--lr", "finetune.learning_rate", str, "learning_rate",
     "Peak learning rate (default: auto, from the model's size); a comma list (5e-5,3e-5,2e-5) sweeps the rates "
     "and keeps the one whose median dev score over the seeds is highest."),
    ("epochs", "--epochs", "finetune.epochs", float, "epochs", "Passes over the training set."),
    ("batch_size", "--batch-size", "finetune.batch_size", int, "batch_size", "Training sequences per optimizer step."),
    ("max_seq_length", "--max-seq-length", "finetune.max_seq_length", int, "max_seq_length",
     "Tokens per example (special tokens included); longer ones are truncated or windowed."),
    ("seed", "--seed", "seed", int, None, "Seed of the head's initialization, dropout and example order."),
)
SWEEP_FLAGS = (
    ("seeds", option(None, "--seeds", help="Run several seeds: N (the recipe's seed, seed+1, ...) or a comma list "
                                                 "(1,7,42); each run in its own folder under --out, the summary gives "
                                                 "mean, sd, median, min and max over them.")),
    ("resume", option(False, "--resume", help="Continue the seed / learning-rate sweep already in --out: "
                                                    "finished runs are kept, an interrupted one starts again.")),
    ("shared", option(False, "--shared", help="Let other bertcli processes (one per GPU) write this sweep's --out at "
                                                    "the same time, e.g. --seeds 0,1 on one and --seeds 2,3 on another: "
                                                    "each run is trained once, the last to finish writes the summary.")),
)


@dataclasses.dataclass(frozen=True)
class SweepArgs:
    """What the sweep flags asked for: seeds (the text of --seeds, or a list), the rates of an
    --lr grid (None: the one rate of the recipe / --lr), --resume and --shared."""

    seeds: str | list[int] | None = None
    rates: list[float] | None = None
    resume: bool = False
    shared: bool = False            # other processes write --out too (finetune/sweep_shared.py)

    @property
    def wanted(self) -> bool:
        """Whether this is a sweep at all: without --seeds, one rate and no --resume the run is
        today's single run, its folder and results.json unchanged."""
        return self.seeds is not None or self.rates is not None or self.resume or self.shared


def parse_rates(text: str | None) -> list[float] | None:
    """--lr's text: None or `auto` -> None; `3e-5` -> [3e-05]; `5e-5,3e-5` -> [5e-05, 3e-05]. Each
    rate is checked as finetune.learning_rate is (finite, > 0); a repeated one is a mistake."""
    if text is None or text.strip().lower() == "auto":
        return None
    fld = {f.name: f for f in dataclasses.fields(FinetuneConfig)}["learning_rate"]
    rates = []
    for part in text.split(","):
        try:
            rate = float(part)
        except ValueError:
            raise UserError(f"--lr {text!r}: {part.strip()!r} is not a number", where="the command line",
                            fix="give --lr one rate (3e-5), a comma list (5e-5,3e-5,2e-5) or auto") from None
        try:
            check_value(rate, fld, "--lr", where=f"the command line: --lr {text}")
        except UserError as e:
            raise UserError(e.what, where=e.where, fix="give --lr rates above 0, e.g. 5e-5,3e-5,2e-5") from None
        rates.append(rate)
    if len(set(rates)) != len(rates):
        raise UserError(f"--lr {text!r} names a rate twice", where="the command line",
                        fix="give each rate of the grid once")
    return rates


def parse_seeds(spec: str | int | list[int], first: int) -> list[int]:
    """--seeds: N -> [first, first+1, ..., first+N-1] (`first`: the recipe's seed); `1,7,42` -> that
    list, `7,` -> [7] (one seed: a --shared part). A UserError (exit 2, one message) for anything
    else: not integers, negative, repeated, N < 1."""
    fix = ("give --seeds a count (--seeds 5: the recipe's seed and the next four) or a comma list (--seeds 1,7,42; "
           "one seed: --seeds 7,)")
    if isinstance(spec, list):
        values = list(spec)
    else:
        text = str(spec).strip()
        try:
            parts = text.split(",")
            values = [int(p) for p in (parts[:-1] if len(parts) > 1 and not parts[-1].strip() else parts)]
        except ValueError:
            raise UserError(f"--seeds {text!r} is neither a count nor a comma list of integers",
                            where="the command line", fix=fix) from None
        if "," not in text:
            if not 1 <= values[0] <= MAX_RUNS:
                raise UserError(f"--seeds {text}: a count of seeds must be from 1 to {MAX_RUNS:,}", where="the command line",
                                fix=fix)
            values = list(range(first, first + values[0]))
    if any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SEED for v in values) or not values:
        raise UserError(f"--seeds {spec!r}: seeds are integers from 0 to {MAX_SEED}", where="the command line", fix=fix)
    if len(set(values)) != len(values):
        raise UserError(f"--seeds {spec!r} names a seed twice", where="the command line",
                        fix="give each seed once (a repeated seed repeats the same run)")
    return values


def finetune_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add FINETUNE_FLAGS and SWEEP_FLAGS to a fine-tuning command: each given hyperparameter
    flag becomes a `--set` item after the command's own (so a flag wins over --set and the
    recipe, and over a task block's value of the recipe file: config.recipe.general_keys_win);
    the sweep's flags reach the command as one `sweep` argument (SweepArgs). Written once for
    every fine-tuning command."""
    import functools
    import inspect

    params = []
    for name, flag, _key, tp, field_name, help_text in FINETUNE_FLAGS:
        if tp is str:       # --lr: one rate or a grid, checked by parse_rates
            opt = option(None, flag, help=help_text)
        else:
            opt = (num_option(None, flag, of=(FinetuneConfig, field_name), help=help_text) if field_name
                   else num_option(None, flag, ge=0, le=MAX_SEED, help=help_text))
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=tp | None))
    for name, opt in SWEEP_FLAGS:
        sweep_type: object = bool if name in ("resume", "shared") else str | None
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=sweep_type))

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:   # the command's own flags and the shared ones
        given = {key: kwargs.pop(name) for name, _, key, *_ in FINETUNE_FLAGS}
        rates = parse_rates(given["finetune.learning_rate"])
        if given["finetune.learning_rate"] is not None:
            # one rate: the recipe key, as before; a grid: its first rate, so that a task block's
            # rate of the recipe file gives way to the command line's (general_keys_win)
            given["finetune.learning_rate"] = rates[0] if rates else "auto"
        sweep = SweepArgs(kwargs.pop("seeds"), rates if rates and len(rates) > 1 else None, kwargs.pop("resume"),
                          kwargs.pop("shared"))
        kwargs["set_"] = [*(kwargs.get("set_") or []),
                          *(f"{key}={jsonout.dumps(value)}" for key, value in given.items() if value is not None)]
        if sweep.wanted:
            kwargs["sweep"] = sweep
        return command(*args, **kwargs)

    sig = inspect.signature(command)
    own = [p for p in sig.parameters.values() if p.name != "sweep"]
    wrapper.__signature__ = sig.replace(parameters=[*own, *params])  # type: ignore[attr-defined]  # what typer reads
    wrapper.__annotations__ = {**{k: v for k, v in command.__annotations__.items() if k != "sweep"},
                               **{p.name: p.annotation for p in params}}
    return wrapper


# ------------------------------------------------------------------ renamed flags, for one release
def keep_old_spellings(*apps: typer.Typer, prefix: str = "") -> None:
    """Give each command of `apps` the old spellings RENAMED lists for it: a hidden option per
    renamed flag whose value, when given, stands for the new flag's (a note on stderr names the
    new spelling; giving both is a mistake). `prefix`: the group's words before the command
    names ("finetune ")."""
    for a in apps:
        for info in a.registered_commands:
            callback = info.callback
            if callback is None:
                continue
            path = prefix + (info.name or callback.__name__.replace("_", "-"))
            renamed = [r for r in RENAMED if path in r.commands]
            if renamed:
                info.callback = _with_old_spellings(callback, renamed)


def _with_old_spellings(command: Callable[..., Any], renamed: list[Renamed]) -> Callable[..., Any]:
    import functools
    import inspect
    import typing

    sig = inspect.signature(command)
    hints = typing.get_type_hints(command)
    new_param: dict[str, tuple[str, str, str]] = {}   # hidden parameter -> (new flag's parameter, its spelling, the old)
    required = {p.name for p in sig.parameters.values()
                if isinstance(p.default, typer.models.OptionInfo) and p.default.default is ...}
    params = []
    for i, r in enumerate(renamed):
        target = next(p for p in sig.parameters.values()
                      if isinstance(p.default, typer.models.OptionInfo) and _spelling(p.default) == r.new)
        if target.default.default is ...:   # a required flag: required of the old or the new spelling
            target.default.default = None
            target.default.help = f"{target.default.help} Required."
        hidden = f"old_spelling_{i}"
        new_param[hidden] = (target.name, r.new, "/".join(r.old))
        params.append(inspect.Parameter(hidden, inspect.Parameter.KEYWORD_ONLY,
                                        default=_old_option(r, target.default), annotation=hints[target.name] | None))

    defaults = {p.name: p.default.default for p in sig.parameters.values() if isinstance(p.default, typer.models.OptionInfo)}

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for hidden, (name, new, old) in new_param.items():
            value = kwargs.pop(hidden)
            if value is not None:
                if kwargs[name] not in (None, False, defaults[name]):
                    raise UserError(f"{new} is given under its old and its new spelling", where="the command line",
                                    fix=f"give only {new}")
                # the note only once the spellings agree: a mistake is then its one message alone
                console.log(f"note: {old} is now {new}; the old spelling goes in the next release")
                kwargs[name] = value
            if kwargs[name] is None and name in required:
                raise UserError(f"missing option {new}", where="the command line", fix=f"give {new}")
        return command(*args, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(), *params])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**hints, **{p.name: p.annotation for p in params}}
    return wrapper


def _spelling(info: typer.models.OptionInfo) -> str:
    """An option's first spelling: "--verify" of "--verify/--no-verify"."""
    return (info.param_decls or ("",))[0].split("/")[0]


def _old_option(r: Renamed, new: typer.models.OptionInfo) -> Any:
    """The hidden option of `r.old`: checks the value as the new flag's own callback does (a
    numeric flag's bounds; a value it refuses gets the note naming the new spelling first); the
    command's wrapper prints the note for a value that is used."""
    check = new.callback

    def note(value: Any) -> Any:
        if value is None or check is None:
            return value
        try:
            return check(value)
        except Exception:   # the message names the new spelling: say which one the user typed
            console.log(f"note: {'/'.join(r.old)} is now {r.new}; the old spelling goes in the next release")
            raise

    if check is not None and hasattr(check, "bounds"):
        note.bounds = check.bounds  # type: ignore[attr-defined]  # read by tests
        NUM_FLAGS.update(r.old)
    return typer.Option(None, *r.old, hidden=True, callback=note)
