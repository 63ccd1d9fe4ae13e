"""The `bertcli` command line: parse, load the recipe, call one stage, render its result.

Every command is a thin layer over a plain function in the package; heavy modules (torch,
datasets) are imported inside the commands so `bertcli --help` stays fast.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import typer

from bertcli.cli_help import plain_help
from bertcli.cli_report import pretrain_figures, reporting, show_stage
from bertcli.config.bounds import MAX_BATCH, MAX_INT32, MAX_LAYERS, MAX_LENGTH, MAX_SEED, MAX_THREADS, MAX_VOCAB
from bertcli.config.finetune_sections import FinetuneConfig  # pure data: numeric flags share its declared ranges
from bertcli.config.options import (  # noqa: F401 (NUM_FLAGS, FINETUNE_FLAGS: read by the tests)
    CHECKPOINT_HELP,
    FINETUNE_FLAGS,
    FLAGS,
    NUM_FLAGS,
    EncodingOpt,
    OutForceOpt,
    SetOpt,
    SweepArgs,
    finetune_flags,
    keep_old_spellings,
    num_option,
    option,
    pooling_option,
)
from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.finetune import command as task_commands

if TYPE_CHECKING:  # bertcli.api is imported inside the commands (a fast --help)
    from bertcli.api import Command

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Pretrain BERT, RoBERTa, ALBERT and ModernBERT encoders from raw text; fine-tune them (GLUE, your own "
         "files, SQuAD, NER), extract features, export and serve them.\n\nA mistake in a recipe or an input is "
         "one message and exit code 2; add --debug (anywhere on the line, or BERTCLI_DEBUG=1) to see the "
         "traceback instead.",
)


def _version(value: bool) -> None:
    if value:
        from bertcli.core.version import __version__

        console.out.print(f"bertcli {__version__}", markup=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = option(False, "--version", callback=_version, is_eager=True),
    debug: bool = option(False, "--debug"),
) -> None:
    """(--debug is read by `main` before typer parses the line; declared here so --help lists it.)"""


finetune_app = typer.Typer(no_args_is_help=True,
                           help="Fine-tune a checkpoint: GLUE, your own classification files, NER, SQuAD, sentence embeddings.")
app.add_typer(finetune_app, name="finetune")

RecipeOpt = option(..., "--recipe")
RebuildOpt = option(False, "--rebuild")
JsonOpt = option(False, "--json")
ThreadsOpt = num_option(None, "--threads", ge=1, le=MAX_THREADS,
                        help="Intra-op CPU threads (default: the cores other jobs leave free; docs/threads.md).")
DeviceOpt = option("auto", "--device")


def _recipe(spec: str | None, overrides: list[str] | None, command: Command | None = "pretrain",
            writes: bool = False):
    """Load the recipe; check it was made for `command` (pretrain / tokenize / build-data use the
    pretraining sections, finetune the finetune section); `writes`: the command writes its
    output_dir / cache_dir, checked now, before any work (bertcli.core.paths)."""
    from bertcli.api import load

    return load(spec, overrides or [], command, writes=writes)


@app.command()
def recipes() -> None:
    """List the shipped recipes."""
    from importlib import resources

    from bertcli.config.recipe import shipped_recipes

    rows = []
    for name in shipped_recipes():
        text = (resources.files("bertcli.recipes") / f"{name}.yaml").read_text(encoding="utf-8")
        rows.append((name, recipe_description(text)))
    console.table([("recipe", "bold"), ("description", "")], rows)


def recipe_description(text: str) -> str:
    """A recipe's one-line description: the first sentence of its opening comment, whole even
    when it runs over several comment lines."""
    words: list[str] = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        words += line.lstrip("#").split()
    sentence = " ".join(words)
    for i, ch in enumerate(sentence):
        # a sentence ends at ". " outside brackets (so "et al. 2020" inside parentheses stays)
        if ch == "." and sentence[i + 1:i + 2] in (" ", "") and sentence[:i].count("(") == sentence[:i].count(")"):
            if not sentence[max(0, i - 3):i].endswith(("al", "e.g", "i.e", "cf", "vs")):
                return sentence[:i + 1]
    return sentence


@app.command()
def explain(section: str | None = typer.Argument(None,
                                                 help="corpus, tokenizer, data, model, train, finetune, corpus.sources, "
                                                      "finetune.tasks, finetune.ner, finetune.classify; or one key, "
                                                      "e.g. train.max_steps")) -> None:
    """Show a recipe section's keys (or one key) with type, default and help.

    With no section: the top-level keys and the sections."""
    from bertcli.config.recipe import explain as rows_of

    # One entry per key: `key  type, default X`, the help wrapped beneath (printed as written,
    # so `bertcli[chinese]` is not taken for rich markup).
    console.entries([(key, f"section: {default}" if kind == "section" else f"{kind}, default {default}", text)
                     for key, kind, default, text in rows_of(section)])


@app.command()
def info(recipe: str = RecipeOpt, set_: list[str] | None = SetOpt,
         yaml_only: bool = option(False, "--yaml", help="Print only the resolved recipe, a valid --recipe file "
                                                        "(`bertcli info -r bert-tiny --yaml > my.yaml`).")) -> None:
    """Print the resolved recipe, what would be built where, and the model's size."""
    from bertcli.info import describe

    r = _recipe(recipe, set_, None)
    console.out.print(r.to_yaml(), markup=False)
    if yaml_only:
        return
    # The tables follow as YAML comments, so that even the full output stays a valid recipe.
    for title, rows in describe(r):
        console.out.print(f"\n# {title}", markup=False)
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            console.out.print(f"#   {key:<{width}}  {console.fmt(value)}".rstrip(), markup=False)


@app.command()
def tokenize(recipe: str = RecipeOpt, set_: list[str] | None = SetOpt, rebuild: bool = RebuildOpt,
             as_json: bool = JsonOpt) -> None:
    """Train the tokenizer on the corpus (stage 1)."""
    from bertcli import api

    with reporting(as_json) as report:
        report(show_stage(api.tokenize(recipe, set_, force=rebuild)))


@app.command("build-data")
def build_data(recipe: str = RecipeOpt, set_: list[str] | None = SetOpt, rebuild: bool = RebuildOpt,
               all_phases: bool = option(False, "--all-phases",
                                         help="A multi-phase recipe: build every phase's data, not only the first "
                                              "phase's."), as_json: bool = JsonOpt) -> None:
    """Build the pretraining pairs and masks (stage 2; trains the tokenizer first if needed).
    A multi-phase recipe (train.phases) builds its first phase's data; later phases' are built
    when the run reaches them, or now with --all-phases."""
    from bertcli import api

    with reporting(as_json) as report:
        report([show_stage(result) for result in api.build_data(recipe, set_, force=rebuild, all_phases=all_phases)])


@app.command()
def pretrain(
    recipe: str = RecipeOpt,
    set_: list[str] | None = SetOpt,
    resume: str | None = option(None, "--resume",
                                help="Continue the run in the output directory: `auto` (its newest complete checkpoint) or "
                                     "a checkpoint directory."),
    force: bool = option(False, "--force", help="Replace the run in the output directory (only what bertcli wrote "
                                                "there): the run starts over."),
    init_from: Path | None = option(None, "--init-from",
                                    help="Continued pretraining: start from this checkpoint directory (bertcli or "
                                         "transformers) instead of random weights; same as --set model.init_from=PATH."),
    as_json: bool = JsonOpt,
) -> None:
    """Run every missing stage (tokenize, build-data), then pretrain. Under torchrun
    (`torchrun --nproc_per_node N -m bertcli pretrain ...`) it trains with DDP. SIGINT / SIGTERM
    save a checkpoint and exit with 128 + the signal number."""
    from bertcli import api

    if init_from is not None:
        set_ = [*(set_ or []), f"model.init_from={jsonout.dumps(str(init_from))}"]
    with reporting(as_json) as report:
        result = api.pretrain(recipe, set_, resume=resume, force=force)
        report(pretrain_figures(result))
    if result.interrupted:
        raise typer.Exit(code=128 + int(result.interrupted))


@app.command("fill-mask")
def fill_mask(
    text: str = typer.Argument(..., help="Text with the mask token in it, e.g. 'the [MASK] sat on the mat'."),
    checkpoint: Path = option(..., "--checkpoint", help="A bertcli or transformers checkpoint directory."),
    top_k: int = num_option(5, "--top-k", ge=1, le=MAX_VOCAB, help="Fillers to show per mask."),
    as_json: bool = JsonOpt,
) -> None:
    """Show the top-k fillers of each mask with their probabilities."""
    from bertcli import api
    from bertcli.serve.fill_mask import render_fills

    render_fills(api.fill_mask(checkpoint, text, top_k=top_k), as_json=as_json)


@app.command("evaluate")
def evaluate_cmd(
    checkpoint: Path = option(..., "--checkpoint", help="A bertcli or transformers checkpoint directory."),
    corpus: list[Path] = option(..., "--corpus",
                                help="Held-out text (a file or directory, as corpus.sources reads it); repeatable."),
    seed: int = num_option(42, "--seed", ge=0, le=MAX_SEED,
                           help="Seed of the masks: the same seed masks the same positions for every checkpoint that shares a "
                                "tokenizer."),
    max_seq_length: int = num_option(128, "--max-seq-length", ge=8, le=MAX_LENGTH,
                                     help="Tokens per row (capped by the model's positions)."),
    objective: str | None = option(None, "--objective",
                                   help="Row layout: nsp, sop or none (default: the family's pair head, scored when the "
                                        "checkpoint has it)."),
    pppl_rows: int = num_option(32, "--pppl-rows", ge=0, le=MAX_INT32,
                                help="Rows scored for the pseudo-perplexity (one forward pass per token)."),
    batch_size: int = num_option(32, "--batch-size", ge=1, le=MAX_BATCH, help="Rows per forward pass."),
    cache: Path = option(Path("runs/evaluate"), "--cache",
                         help="Where the corpus, tokenizer and masked-data stages are cached."),
    threads: int | None = ThreadsOpt,
    as_json: bool = JsonOpt,
) -> None:
    """MLM loss, MLM accuracy and pseudo-perplexity (and NSP/SOP accuracy) of a checkpoint on held-out text, with
    deterministic masks; of an RTD checkpoint, its generator's, and the discriminator's accuracy and AUC."""
    from bertcli.core.paths import resolve_checkpoint
    from bertcli.serve.evaluate import EvalSettings, render_evaluation, run_evaluate

    checkpoint = resolve_checkpoint(checkpoint)
    if objective not in (None, "nsp", "sop", "none"):
        raise UserError(f"--objective {objective!r} is not one of nsp, sop, none")
    settings = EvalSettings(seed=seed, max_seq_length=max_seq_length, objective=objective, batch_size=batch_size,
                            pppl_rows=pppl_rows, cache=cache, threads=threads)
    render_evaluation(run_evaluate(checkpoint, list(corpus), settings), as_json=as_json)


EXPORT_TASK_HELP = ("The head to export: " + ", ".join(FLAGS["--task"].values) + ". Default: embed for a "
                    "sentence-transformers directory (modules.json; pooling inside the graph), whatever its "
                    "architectures say; else the head config.json's architectures names (features for a bare "
                    "encoder or none named).")


@app.command("export")
def export_cmd(
    checkpoint: Path = option(..., "--checkpoint", help="A bertcli or transformers checkpoint directory."),
    out: Path = option(..., "--out",
                       help="Bundle directory to write (model.onnx, tokenizer, config.json, export_info.json)."),
    task: str | None = option(None, "--task", help=EXPORT_TASK_HELP),
    opset: int = num_option(18, "--opset", ge=1, le=99, help="ONNX opset (17 or later)."),
    fp16: bool = option(False, "--fp16", help="Half-precision weights, for GPU runtimes (TensorRT, ORT CUDA)."),
    quantize: str | None = option(None, "--quantize", help="int8: ONNX Runtime dynamic quantization."),
    dev: Path | None = option(None, "--dev",
                              help="Labelled dev data (.jsonl/.csv/.parquet) for the metric before and after --quantize."),
    verify: bool = option(True, "--verify",
                          help="Compare ONNX Runtime with PyTorch on real inputs (on by default)."),
    optimize: bool = option(True, "--optimize",
                            help="ONNX Runtime's transformer fusions (kept only where they pass verification)."),
    force: bool = option(False, "--force", help="Replace an earlier bundle in --out: only the files its marker "
                                                "(or export_info.json) lists are removed; anything else there stays."),
    threads: int | None = ThreadsOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Export a checkpoint to a verified ONNX bundle (exit 1 when verification fails)."""
    from bertcli import api

    # typer reads the flag as a plain str; export refuses anything but int8 with a UserError
    with reporting(as_json) as report:
        result = api.export(checkpoint, out, task=task, opset=opset, fp16=fp16,
                            quantize=cast("Literal['int8'] | None", quantize), dev=dev,
                            verify=verify, force=force, threads=threads, optimize=optimize)
        report({"out": result.out, "passed": result.passed, **result.info})
    if not result.passed:
        raise typer.Exit(code=1)


@app.command("predict")
def predict_cmd(
    model: Path = option(..., "--checkpoint",
                         help="A checkpoint directory (PyTorch), an export bundle or its model.onnx (ONNX Runtime)."),
    input_file: Path = option(..., "--input", help=".txt (one example per line), .jsonl, .csv/.tsv or .parquet."),
    out: Path | None = option(None, "--out", help="jsonl output file (default: stdout)."),
    task: str | None = option(None, "--task", help="The head kind, when the model does not say it (export_info.json, "
                                                   "config.json): " + ", ".join(FLAGS["--task"].values) + "."),
    batch_size: int = num_option(32, "--batch-size", of=(FinetuneConfig, "eval_batch_size"), help="Sequences per forward pass."),
    top_k: int = num_option(5, "--top-k", ge=1, le=MAX_VOCAB, help="fill-mask: candidates per mask."),
    pooling: str = pooling_option("predict", ("mean", "cls", "pooler"), "mean",
                                  help="features: how each text becomes one vector (pooler: the encoder's pooler layer)."),
    max_seq_length: int | None = num_option(None, "--max-seq-length", of=(FinetuneConfig, "max_seq_length"),
                                            help="Truncate inputs to this many tokens (default: the model's maximum)."),
    allow_impossible: bool = option(False, "--allow-impossible",
                                    help="question-answering: an empty answer wins when the null span scores higher (SQuAD "
                                         "2.0)."),
    force: bool = option(False, "--force", help="Replace an existing --out file."),
    encoding: str | None = EncodingOpt,
    threads: int | None = ThreadsOpt,
) -> None:
    """Batched predictions for every record of a file, as jsonl."""
    from bertcli import api

    summary = api.predict(model, input_file, out, task=task, batch_size=batch_size, top_k=top_k, pooling=pooling,
                          max_length=max_seq_length, allow_impossible=allow_impossible, encoding=encoding, force=force,
                          threads=threads)
    console.log(f"{summary['records']:,} predictions ({summary['task']}, {summary['backend']}) -> {summary['out']}")


def distill_cmd(
    checkpoint: Path = option(..., "--checkpoint",
                              help="The teacher: a model `bertcli finetune` wrote (or a transformers checkpoint with "
                                   "a classification, token-classification or question-answering head)."),
    teacher_task: str = option(..., "--teacher-task", help="classify, ner or squad: the teacher's task and its data flags."),
    train: Path | None = option(None, "--train", help="classify: the training file (as finetune classify)."),
    dev: Path | None = option(None, "--dev", help="classify: the dev file, scored after every epoch."),
    test: Path | None = option(None, "--test", help="classify: a test file to predict."),
    text_column: str | None = option(None, "--text-column", help="classify: column of the text."),
    text_pair_column: str | None = option(None, "--text-pair-column", help="classify: column of the second text."),
    label_column: str | None = option(None, "--label-column", help="classify: column of the label."),
    data_dir: Path | None = option(None, "--data-dir", help="ner, squad: the data (as finetune ner / squad)."),
    hub: str | None = option(None, "--hub", help="squad: a `datasets` name (needs the network)."),
    squad_version: int = num_option(1, "--squad-version", ge=1, le=2, help="squad: 1 (v1.1) or 2 (v2.0)."),
    student_layers: int | None = num_option(None, "--student-layers", ge=1, le=MAX_LAYERS,
                                            help="Student of K of the teacher's layers, evenly spaced, with its embeddings "
                                                 "and head (default 4)."),
    student: str | None = option(None, "--student",
                                 help="Student: a checkpoint directory or recipe of the teacher's family and vocabulary "
                                      "(a fresh head)."),
    unlabelled: Path | None = option(None, "--unlabelled",
                                     help="Examples only the teacher labels: classify, the training file's layout "
                                          "and columns; ner, one sentence per line (or jsonl \"tokens\"); squad, "
                                          "SQuAD JSON or jsonl \"question\" + \"context\" (answers not read)."),
    recipe: str = option("distill", "--recipe",
                         help="Recipe whose `finetune` section (and its `distill` block) is used."),
    set_: list[str] | None = SetOpt,
    out: Path | None = option(None, "--out", help="Output directory (default: runs/distill/<teacher name>)."),
    force: bool = OutForceOpt,
    encoding: str | None = EncodingOpt,
    as_json: bool = JsonOpt,
    sweep: SweepArgs | None = None,
) -> None:
    """Distill a fine-tuned model into a smaller, faster student (soft targets at a temperature, the hard labels,
    optionally hidden states and attention); the student is an ordinary fine-tuned model directory."""
    from bertcli import api

    if teacher_task not in ("classify", "ner", "squad"):
        raise UserError(f"--teacher-task {teacher_task!r} is not one of classify, ner, squad", where="--teacher-task",
                        fix="e.g. --teacher-task classify --train train.csv --dev dev.csv")
    with reporting(as_json) as report:
        report(api.distill(checkpoint, cast("Literal['classify', 'ner', 'squad']", teacher_task), train=train, dev=dev,
                           test=test, data_dir=data_dir, hub=hub, version=squad_version, text_column=text_column,
                           text_pair_column=text_pair_column, label_column=label_column, layers=student_layers,
                           student=student, unlabelled=unlabelled, recipe=recipe, overrides=set_, out=out,
                           encoding=encoding, force=force, sweep=sweep))


app.command("distill")(finetune_flags(distill_cmd))


@app.command()
def features(
    checkpoint: Path = option(..., "--checkpoint"),
    input: Path = option(..., "--input", help="Texts: .txt (one per line), .csv, .tsv, .jsonl, .parquet."),
    out: Path = option(..., "--out", help="Output: .parquet, or .npy (ids beside it in <name>.ids.txt)."),
    layers: str = option("-1", "--layers"),
    combine: str = option("concat", "--combine"),
    pooling: str = pooling_option("features", ("cls", "mean", "none"), "cls",
                                  help="cls (the first token), mean (over real tokens) or none (one vector per token)."),
    text_column: str = option("text", "--text-column", help="Column of the text in table files."),
    id_column: str | None = option(None, "--id-column"),
    max_seq_length: int = num_option(128, "--max-seq-length", of=(FinetuneConfig, "max_seq_length"),
                                     help="Longer texts are truncated."),
    batch_size: int = num_option(64, "--batch-size", of=(FinetuneConfig, "eval_batch_size"),
                                 help="Texts per forward pass (bounds memory)."),
    device: str = DeviceOpt,
    force: bool = option(False, "--force", help="Replace existing --out files."),
    encoding: str | None = EncodingOpt,
    threads: int | None = ThreadsOpt,
    as_json: bool = JsonOpt,
) -> None:
    """BERT's feature-based use: chosen layers' hidden states, combined, per token or pooled per text."""
    from bertcli import api

    with reporting(as_json) as report:
        report(api.features(checkpoint, input, out, layers=layers, combine=combine, pool=pooling, text_column=text_column,
                            id_column=id_column, max_seq_length=max_seq_length, batch_size=batch_size, device=device,
                            encoding=encoding, force=force, threads=threads))


EMBED_POOLING_HELP = ("mean (over real tokens; last-layer-mean is the same), cls or max. Default: a sentence-transformers "
                      "directory's own, else mean.")
NormalizeOpt = option(None, "--normalize", help="L2-normalize the embeddings (default: a "
                                                "sentence-transformers directory's 2_Normalize, else no).")
EmbedLengthOpt = num_option(None, "--max-seq-length", ge=2, le=MAX_LENGTH,
                            help="Longer texts are truncated (default: the directory's "
                                 "max_seq_length, else 512, capped by the model's positions).")


@app.command("evaluate-embed")
def evaluate_embed(
    checkpoint: Path = option(..., "--checkpoint",
                              help="A bertcli, transformers or sentence-transformers checkpoint directory."),
    beir: Path | None = option(None, "--beir"),
    split: str = option("test", "--split"),
    sts: Path | None = option(None, "--sts"),
    pooling: str | None = pooling_option("evaluate-embed", ("mean", "cls", "max"), None, help=EMBED_POOLING_HELP),
    normalize: bool | None = NormalizeOpt,
    max_seq_length: int | None = EmbedLengthOpt,
    batch_size: int = num_option(64, "--batch-size", ge=1, le=MAX_BATCH, help="Texts per forward pass."),
    device: str = DeviceOpt,
    threads: int | None = ThreadsOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Embedding quality of any checkpoint: retrieval (nDCG@10, MRR@10, Recall@1/10/100, MAP@100) and STS correlation."""
    from bertcli import api
    from bertcli.serve.evaluate_embed import render_embed_scores

    render_embed_scores(api.evaluate_embed(checkpoint, beir=beir, split=split, sts=sts, pooling=pooling, normalize=normalize,
                              max_seq_length=max_seq_length, batch_size=batch_size, device=device, threads=threads),
           as_json=as_json)


@app.command()
def compare(
    run_dirs: list[Path] = typer.Argument(..., help="Two or more fine-tuning --out folders (sweeps: finetune ... --seeds N)."),
    markdown: bool = option(False, "--markdown", help="Print GitHub markdown tables (to paste into a paper or README)."),
    as_json: bool = JsonOpt,
    no_correction: bool = option(False, "--no-correction",
                                 help="Leave the p-values uncorrected (default: Holm over all pairs x tasks)."),
) -> None:
    """A scorecard across checkpoints: each task's median over seeds with its spread, and each pair tested (Welch)."""
    from bertcli.compare.render import render_scorecard
    from bertcli.compare.scorecard import scorecard
    from bertcli.compare.summaries import read_runs

    if markdown and as_json:
        raise UserError("--markdown and --json both given", fix="choose one output format")
    render_scorecard(scorecard(read_runs(run_dirs), correct=not no_correction),
           "json" if as_json else "markdown" if markdown else "table")


@app.command()
def embed(
    checkpoint: Path = option(..., "--checkpoint",
                              help="A bertcli, transformers or sentence-transformers checkpoint directory."),
    input: Path = option(..., "--input", help="Texts: .txt (one per line), .csv, .tsv, .jsonl, .parquet."),
    out: Path = option(..., "--out", help="Output: .parquet (id, embedding), or .npy (ids in <name>.ids.tsv)."),
    text_column: str = option("text", "--text-column", help="Column of the text in table files."),
    id_column: str | None = option(None, "--id-column"),
    pooling: str | None = pooling_option("embed", ("mean", "cls", "max"), None, help=EMBED_POOLING_HELP),
    normalize: bool | None = NormalizeOpt,
    max_seq_length: int | None = EmbedLengthOpt,
    batch_size: int = num_option(64, "--batch-size", ge=1, le=MAX_BATCH, help="Texts per forward pass (bounds memory)."),
    device: str = DeviceOpt,
    force: bool = option(False, "--force", help="Replace existing --out files."),
    encoding: str | None = EncodingOpt,
    threads: int | None = ThreadsOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Sentence embeddings of every text of a file (batched, streamed), pooled as the model says."""
    from bertcli import api

    with reporting(as_json) as report:
        report(api.embed(checkpoint, input, out, text_column=text_column, id_column=id_column, pooling=pooling,
                         normalize=normalize, max_seq_length=max_seq_length, batch_size=batch_size, device=device,
                         encoding=encoding, force=force, threads=threads))


def task_command(cmd: task_commands.TaskCommand):
    """The typer command of a fine-tuning task: the options every task shares (checkpoint,
    recipe, --set, --out, --force) around the task's own (`cmd.options`), with the task's
    docstring as help; it calls `bertcli.api.finetune(cmd.name, ...)`."""

    def shared(
        checkpoint: Path = option(..., "--checkpoint", help=CHECKPOINT_HELP),
        recipe: str = option(cmd.recipe, "--recipe", help="Recipe whose `finetune` section is used."),
        set_: list[str] | None = SetOpt,
        out: Path | None = option(None, "--out", help=f"Output directory (default: runs/{cmd.name}/<checkpoint name>)."),
        force: bool = OutForceOpt,
        as_json: bool = JsonOpt,
    ) -> None: ...

    own = inspect.signature(cmd.options).parameters
    common = inspect.signature(shared).parameters
    clash = set(own) & set(common)
    assert not clash, f"finetune {cmd.name} redeclares the shared options {clash}"
    hints = {**typing.get_type_hints(shared), **typing.get_type_hints(cmd.options)}
    params = [p.replace(annotation=hints[name]) for name, p in [*common.items(), *own.items()]]

    def command(**kwargs) -> None:
        from bertcli import api

        shared_args = {k: kwargs.pop(k) for k in common}
        if kwargs.get("sweep") is None:
            kwargs.pop("sweep", None)
        with reporting(shared_args["as_json"]) as report:
            report(api.finetune(cmd.name, shared_args["checkpoint"], recipe=shared_args["recipe"],
                                overrides=shared_args["set_"], out=shared_args["out"], force=shared_args["force"], **kwargs))

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # what typer reads
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = f"finetune_{cmd.name}"
    command.__doc__ = " ".join((cmd.options.__doc__ or "").split())  # one paragraph, wrapped by the terminal
    return command


# A task folder that cannot be read makes every command say so (main), rather than drop out of the CLI.
_broken_task: UserError | None = None
try:
    for _cmd in task_commands.discover().values():
        finetune_app.command(_cmd.name)(finetune_flags(task_command(_cmd)))
except UserError as _e:
    _broken_task = _e


keep_old_spellings(app)
keep_old_spellings(finetune_app, prefix="finetune ")
plain_help(app, finetune_app)


@functools.cache
def _click_command() -> Any:   # click's Command, or (typer 0.29) that of typer's vendored copy
    """The click command typer builds from `app` (what `app()` builds on every call): built once
    per process, so that calling `main` again in one process (the tests of values) is cheap."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: renders a UserError as one message with exit code 2 (traceback with --debug)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("BERTCLI_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    try:
        if _broken_task is not None:
            raise _broken_task
        _click_command()(args=args, prog_name="bertcli")
    except UserError as e:
        if debug:
            raise
        console.print_error(e.what, e.where, e.fix)
        sys.exit(2)


if __name__ == "__main__":
    main()
