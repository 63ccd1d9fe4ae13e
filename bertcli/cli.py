"""The `bertcli` command line: parse, load the recipe, call one stage, render its result.

Every command is a thin layer over a plain function in the package; heavy modules (torch,
datasets) are imported inside the commands so `bertcli --help` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import typer

from bertcli.config.sections import FinetuneConfig  # pure data: numeric flags share its declared ranges
from bertcli.core import console
from bertcli.core.errors import UserError

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
        from bertcli import __version__

        console.out.print(f"bertcli {__version__}", markup=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of an error instead of the one-line message."),
) -> None:
    """(--debug is read by `main` before typer parses the line; declared here so --help lists it.)"""


finetune_app = typer.Typer(no_args_is_help=True, help="Fine-tune a checkpoint: GLUE, your own classification files, NER, SQuAD.")
app.add_typer(finetune_app, name="finetune")

RecipeOpt = typer.Option(..., "--recipe", "-r", help="Recipe: a YAML path or a shipped name (bert-tiny, albert-base, ...).")
SetOpt = typer.Option(None, "--set", "-s", help="Override a recipe field: section.key=value (YAML value); repeatable.")
ForceOpt = typer.Option(False, "--force", help="Rebuild even when a cached result exists.")
EncodingOpt = typer.Option(None, "--encoding", help="Text encoding of the input files (default: UTF-8; a UTF-8 or UTF-16 "
                           "byte-order mark is honoured), e.g. latin1, cp1252, gb18030.")


OutForceOpt = typer.Option(False, "--force", help="Replace an earlier bertcli result in --out: only the files its "
                           "marker (.bertcli-output.json) lists are removed; anything else there stays.")

# Every numeric flag is declared through `num_option`, with the bounds of the recipe key it sets
# (`of=`) or its own, in `num`'s terms, and is checked by the recipe's own check (finite, within
# the bounds: one message, exit 2). NUM_FLAGS records them, so a test can find any numeric flag
# that escaped the check.
NUM_FLAGS: set[str] = set()


def num_option(default, *names: str, of: tuple | None = None, help: str = "", **bounds):
    """A typer option for a number, range-checked like recipe keys (`recipe.check_value`). `of`:
    (section dataclass, field name) whose declared `num(...)` bounds the flag shares; else
    `bounds` (ge=, gt=, le=) declare them here."""
    import dataclasses

    if of is not None:
        fld = {f.name: f for f in dataclasses.fields(of[0])}[of[1]]
    else:
        fld = dataclasses.field(metadata={"ge": None, "gt": None, "le": None, **bounds})
    NUM_FLAGS.update(names)

    words = {"ge": "at least", "gt": "more than", "le": "at most"}
    shown = ", ".join(f"{words[k]} {fld.metadata[k]}" for k in words if fld.metadata.get(k) is not None)

    def check(value):
        from bertcli.config.schema import check_value

        try:
            check_value(value, fld, names[0], where=f"the command line: {names[0]} {value}")
        except UserError as e:
            raise UserError(e.what, where=e.where, fix=f"give {names[0]} a number ({shown or 'finite'})") from None
        return value

    return typer.Option(default, *names, help=f"{help} [{shown}]" if shown else help, callback=check)


def _recipe(spec: str | None, overrides: list[str] | None, command: Command | None = "pretrain",
            writes: bool = False):
    """Load the recipe; check it was made for `command` (pretrain / tokenize / build-data use the
    pretraining sections, finetune the finetune section); `writes`: the command writes its
    output_dir / cache_dir, checked now, before any work (bertcli.core.paths)."""
    from bertcli.api import load

    return load(spec, overrides or [], command, writes=writes)


def _show(result) -> None:
    state = "reused" if result.reused else "built"
    console.summary(f"{result.name} ({state}): {result.path}", result.summary)


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
                                                      "finetune.tasks, finetune.ner, finetune.classify")) -> None:
    """Show the keys of a recipe section with their types, defaults and help."""
    from bertcli.config.recipe import explain as rows_of

    # Help text is shown as written: console.table escapes it, so `bertcli[chinese]` is not
    # taken for rich markup.
    console.table([("key", "bold"), ("type", ""), ("default", ""), ("help", "")], list(rows_of(section)))


@app.command()
def info(recipe: str = RecipeOpt, set_: list[str] | None = SetOpt,
         yaml_only: bool = typer.Option(False, "--yaml", help="Print only the resolved recipe, a valid --recipe file "
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
def tokenize(recipe: str = RecipeOpt, set_: list[str] | None = SetOpt, force: bool = ForceOpt) -> None:
    """Train the tokenizer on the corpus (stage 1)."""
    from bertcli import api

    _show(api.tokenize(recipe, set_, force=force))


@app.command("build-data")
def build_data(recipe: str = RecipeOpt, set_: list[str] | None = SetOpt, force: bool = ForceOpt,
               all_phases: bool = typer.Option(False, "--all-phases",
                                               help="A multi-phase recipe: build every phase's data, not only the first "
                                                    "phase's.")) -> None:
    """Build the pretraining pairs and masks (stage 2; trains the tokenizer first if needed).
    A multi-phase recipe (train.phases) builds its first phase's data; later phases' are built
    when the run reaches them, or now with --all-phases."""
    from bertcli import api

    for result in api.build_data(recipe, set_, force=force, all_phases=all_phases):
        _show(result)


@app.command()
def pretrain(
    recipe: str = RecipeOpt,
    set_: list[str] | None = SetOpt,
    resume: str | None = typer.Option(None, "--resume",
                                      help="`auto` (newest complete checkpoint of this run) or a checkpoint directory."),
    force: bool = typer.Option(False, "--force", help="Start the run over, replacing an existing run in the output directory."),
    init_from: Path | None = typer.Option(None, "--init-from",
                                          help="Continued pretraining: start from this checkpoint directory (bertcli or "
                                               "transformers) instead of random weights; same as --set model.init_from=PATH."),
) -> None:
    """Run every missing stage (tokenize, build-data), then pretrain. Under torchrun
    (`torchrun --nproc_per_node N -m bertcli pretrain ...`) it trains with DDP. SIGINT / SIGTERM
    save a checkpoint and exit with 128 + the signal number."""
    from bertcli import api

    if init_from is not None:
        set_ = [*(set_ or []), f"model.init_from={json.dumps(str(init_from))}"]
    result = api.pretrain(recipe, set_, resume=resume, force=force)
    if result.interrupted:
        raise typer.Exit(code=128 + int(result.interrupted))


@app.command("fill-mask")
def fill_mask(
    text: str = typer.Argument(..., help="Text with the mask token in it, e.g. 'the [MASK] sat on the mat'."),
    checkpoint: Path = typer.Option(..., "--checkpoint", "-c", help="A bertcli or transformers checkpoint directory."),
    top_k: int = num_option(5, "--top-k", ge=1, help="Fillers to show per mask."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Show the top-k fillers of each mask with their probabilities."""
    from bertcli import api
    from bertcli.model.fill_mask import render

    render(api.fill_mask(checkpoint, text, top_k=top_k), as_json=as_json)


@app.command("evaluate")
def evaluate_cmd(
    checkpoint: Path = typer.Option(..., "--checkpoint", "-c", help="A bertcli or transformers checkpoint directory."),
    corpus: list[Path] = typer.Option(..., "--corpus",
                                      help="Held-out text (a file or directory, as corpus.sources reads it); repeatable."),
    seed: int = num_option(42, "--seed", ge=0,
                           help="Seed of the masks: the same seed masks the same positions for every checkpoint that shares a "
                                "tokenizer."),
    max_seq_length: int = num_option(128, "--max-seq-length", ge=8, help="Tokens per row (capped by the model's positions)."),
    objective: str | None = typer.Option(None, "--objective",
                                         help="Row layout: nsp, sop or none (default: the family's pair head, scored when the "
                                              "checkpoint has it)."),
    pppl_rows: int = num_option(32, "--pppl-rows", ge=0,
                                help="Rows scored for the pseudo-perplexity (one forward pass per token)."),
    batch_size: int = num_option(32, "--batch-size", ge=1, help="Rows per forward pass."),
    cache: Path = typer.Option(Path("runs/evaluate"), "--cache",
                               help="Where the corpus, tokenizer and masked-data stages are cached."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """MLM loss, MLM accuracy and pseudo-perplexity (and NSP/SOP accuracy) of a checkpoint on held-out text, with
    deterministic masks."""
    from bertcli.train.evaluate import EvalSettings, render, run_evaluate

    if objective not in (None, "nsp", "sop", "none"):
        raise UserError(f"--objective {objective!r} is not one of nsp, sop, none")
    settings = EvalSettings(seed=seed, max_seq_length=max_seq_length, objective=objective, batch_size=batch_size,
                            pppl_rows=pppl_rows, cache=cache)
    render(run_evaluate(checkpoint, list(corpus), settings), as_json=as_json)


@finetune_app.command("glue")
def finetune_glue(
    checkpoint: Path = typer.Option(..., "--checkpoint", "-c",
                                    help="A bertcli or transformers BERT/RoBERTa/ALBERT/ModernBERT checkpoint directory."),
    task: str = typer.Option(..., "--task", "-t",
                             help="cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli (GLUE spellings such as SST-2 work), "
                                  "several separated by commas, or all (every task found in --data-dir)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", "-d",
                                         help="GLUE data: the download script's layout or a `datasets` save_to_disk / parquet "
                                              "directory."),
    hub: str | None = typer.Option(None, "--hub",
                                   help="Load GLUE with `datasets.load_dataset` (e.g. nyu-mll/glue); needs the network."),
    recipe: str = typer.Option("glue", "--recipe", "-r", help="Recipe whose `finetune` section is used."),
    set_: list[str] | None = SetOpt,
    out: Path | None = typer.Option(None, "--out", "-o", help="Output directory (default: runs/glue/<checkpoint name>)."),
    force: bool = OutForceOpt,
) -> None:
    """Fine-tune on GLUE tasks; write dev results and test-set submission files."""
    from bertcli import api

    api.finetune_glue(checkpoint, tasks=task, data_dir=data_dir, hub=hub, recipe=recipe, overrides=set_, out=out,
                      force=force)


@app.command("export")
def export_cmd(
    checkpoint: Path = typer.Option(..., "--checkpoint", "-c", help="A bertcli or transformers checkpoint directory."),
    out: Path = typer.Option(..., "--out", "-o",
                             help="Bundle directory to write (model.onnx, tokenizer, config.json, export_info.json)."),
    task: str | None = typer.Option(None, "--task", "-t",
                                    help="fill-mask, classification, features, ... (default: from config.json's architectures)."),
    opset: int = num_option(18, "--opset", ge=1, help="ONNX opset (17 or later)."),
    fp16: bool = typer.Option(False, "--fp16", help="Half-precision weights, for GPU runtimes (TensorRT, ORT CUDA)."),
    quantize: str | None = typer.Option(None, "--quantize", help="int8: ONNX Runtime dynamic quantization."),
    dev: Path | None = typer.Option(None, "--dev",
                                    help="Labelled dev data (.jsonl/.csv/.parquet) for the metric before and after --quantize."),
    verify: bool = typer.Option(True, "--verify/--no-verify",
                                help="Compare ONNX Runtime with PyTorch on real inputs (on by default)."),
    optimize: bool = typer.Option(True, "--optimize/--no-optimize",
                                  help="ONNX Runtime's transformer fusions (kept only where they pass verification)."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier bundle in --out: only the files its marker "
                               "(or export_info.json) lists are removed; anything else there stays."),
) -> None:
    """Export a checkpoint to a verified ONNX bundle (exit 1 when verification fails)."""
    from bertcli import api

    # typer reads the flag as a plain str; export refuses anything but int8 with a UserError
    result = api.export(checkpoint, out, task=task, opset=opset, fp16=fp16,
                        quantize=cast("Literal['int8'] | None", quantize), dev=dev,
                        verify=verify, force=force, optimize=optimize)
    if not result.passed:
        raise typer.Exit(code=1)


@app.command("predict")
def predict_cmd(
    model: Path = typer.Option(..., "--checkpoint", "-c",
                               help="A checkpoint directory (PyTorch), an export bundle or its model.onnx (ONNX Runtime)."),
    input_file: Path = typer.Option(..., "--input", "-i", help=".txt (one example per line), .jsonl, .csv/.tsv or .parquet."),
    out: Path | None = typer.Option(None, "--out", "-o", help="jsonl output file (default: stdout)."),
    task: str | None = typer.Option(None, "--task", "-t", help="Override the task read from the model."),
    batch_size: int = num_option(32, "--batch-size", of=(FinetuneConfig, "eval_batch_size"), help="Sequences per forward pass."),
    top_k: int = num_option(5, "--top-k", ge=1, help="fill-mask: candidates per mask."),
    pooling: str = typer.Option("mean", "--pooling", help="features: mean, cls or pooler."),
    max_length: int | None = num_option(None, "--max-length", of=(FinetuneConfig, "max_seq_length"),
                                        help="Truncate inputs to this many tokens (default: the model's maximum)."),
    allow_impossible: bool = typer.Option(False, "--allow-impossible",
                                          help="question-answering: an empty answer wins when the null span scores higher (SQuAD "
                                               "2.0)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
    encoding: str | None = EncodingOpt,
) -> None:
    """Batched predictions for every record of a file, as jsonl."""
    from bertcli import api

    summary = api.predict(model, input_file, out, task=task, batch_size=batch_size, top_k=top_k, pooling=pooling,
                          max_length=max_length, allow_impossible=allow_impossible, encoding=encoding, force=force)
    console.log(f"{summary['records']:,} predictions ({summary['task']}, {summary['backend']}) -> {summary['out']}")


@finetune_app.command("squad")
def finetune_squad(
    checkpoint: Path = typer.Option(..., "--checkpoint", "-c",
                                    help="A bertcli or transformers BERT/RoBERTa/ALBERT/ModernBERT checkpoint directory."),
    data_dir: Path | None = typer.Option(None, "--data-dir", "-d",
                                         help="train-v1.1.json + dev-v1.1.json (or v2.0, or CMRC 2018's), "
                                            "a `datasets` save_to_disk directory or parquet files."),
    version: int = num_option(1, "--version", ge=1, le=2,
                              help="1: SQuAD v1.1; 2: SQuAD v2.0 (unanswerable questions, null threshold)."),
    hub: str | None = typer.Option(None, "--hub",
                                   help="Load with `datasets.load_dataset` (rajpurkar/squad, rajpurkar/squad_v2); needs the "
                                        "network."),
    recipe: str = typer.Option("squad", "--recipe", "-r",
                               help="Recipe whose `finetune` section (finetune.squad / squad_v2 blocks) is used."),
    set_: list[str] | None = SetOpt,
    out: Path | None = typer.Option(None, "--out", "-o", help="Output directory (default: runs/squad[_v2]/<checkpoint name>)."),
    force: bool = OutForceOpt,
) -> None:
    """Fine-tune on SQuAD (windows over long contexts, n-best decoding, official EM/F1); write the
    best model and predictions.json / nbest_predictions.json / null_odds.json."""
    from bertcli import api

    api.finetune_squad(checkpoint, data_dir=data_dir, hub=hub, version=version, recipe=recipe, overrides=set_, out=out,
                       force=force)


@finetune_app.command("ner")
def finetune_ner(
    checkpoint: Path = typer.Option(..., "--checkpoint", "-c",
                                    help="A bertcli or transformers BERT/RoBERTa/ALBERT/ModernBERT checkpoint directory."),
    data_dir: Path = typer.Option(..., "--data-dir", "-d",
                                  help="train.txt/valid.txt/test.txt (or eng.train/eng.testa/eng.testb), "
                                  "*.jsonl with tokens/ner_tags, or a datasets save_to_disk directory (conll2003)."),
    recipe: str = typer.Option("ner", "--recipe", "-r", help="Recipe whose `finetune` section (and its `ner` block) is used."),
    set_: list[str] | None = SetOpt,
    out: Path | None = typer.Option(None, "--out", "-o", help="Output directory (default: runs/ner/<checkpoint name>)."),
    force: bool = OutForceOpt,
    encoding: str | None = EncodingOpt,
) -> None:
    """Fine-tune a tagger (NER, CoNLL-2003 style); entity P/R/F1 as conlleval, predictions in CoNLL layout."""
    from bertcli import api

    api.finetune_ner(checkpoint, data_dir=data_dir, recipe=recipe, overrides=set_, out=out, encoding=encoding,
                     force=force)


@finetune_app.command("classify")
def finetune_classify(
    checkpoint: Path = typer.Option(..., "--checkpoint", "-c",
                                    help="A bertcli or transformers BERT/RoBERTa/ALBERT/ModernBERT checkpoint directory."),
    train: Path = typer.Option(..., "--train", help="Training file: .csv, .tsv, .jsonl, .parquet, or a save_to_disk directory."),
    dev: Path = typer.Option(..., "--dev", help="Dev file (same kinds), scored after every epoch."),
    test: Path | None = typer.Option(None, "--test", help="Test file (labels not needed): predictions are written for it."),
    text_column: str | None = typer.Option(None, "--text-column",
                                           help="Column of the text (default: finetune.classify.text_column, `text`)."),
    text_pair_column: str | None = typer.Option(None, "--text-pair-column", help="Column of the second text of a pair task."),
    label_column: str | None = typer.Option(None, "--label-column",
                                            help="Column of the label (default `label`): strings or ints."),
    regression: bool = typer.Option(False, "--regression", help="Predict a number (labels must be numeric): Pearson/Spearman."),
    recipe: str = typer.Option("classify", "--recipe", "-r",
                               help="Recipe whose `finetune` section (and its `classify` block) is used."),
    set_: list[str] | None = SetOpt,
    out: Path | None = typer.Option(None, "--out", "-o", help="Output directory (default: runs/classify/<checkpoint name>)."),
    force: bool = OutForceOpt,
    encoding: str | None = EncodingOpt,
) -> None:
    """Fine-tune a text (pair) classifier or regressor on your own files; accuracy, macro-F1, MCC (or Pearson, Spearman)."""
    from bertcli import api

    api.finetune_classify(checkpoint, train=train, dev=dev, test=test, text_column=text_column,
                          text_pair_column=text_pair_column, label_column=label_column,
                          regression=True if regression else None, recipe=recipe, overrides=set_, out=out, encoding=encoding,
                          force=force)


@app.command()
def features(
    checkpoint: Path = typer.Option(..., "--checkpoint", "-c",
                                    help="A bertcli or transformers BERT/RoBERTa/ALBERT/ModernBERT checkpoint directory."),
    input: Path = typer.Option(..., "--input", "-i", help="Texts: .txt (one per line), .csv, .tsv, .jsonl, .parquet."),
    out: Path = typer.Option(..., "--out", "-o", help="Output: .parquet, or .npy (ids beside it in <name>.ids.txt)."),
    layers: str = typer.Option("-1", "--layers", help="Hidden-state layers, e.g. -1,-2,-3,-4 (0 = embeddings)."),
    combine: str = typer.Option("concat", "--combine", help="concat, sum or mean over the layers."),
    pool: str = typer.Option("cls", "--pool", help="cls, mean (over real tokens) or none (one vector per token)."),
    text_column: str = typer.Option("text", "--text-column", help="Column of the text in table files."),
    id_column: str | None = typer.Option(None, "--id-column", help="Column of the text ids (default: the row number)."),
    max_seq_length: int = num_option(128, "--max-seq-length", of=(FinetuneConfig, "max_seq_length"),
                                     help="Longer texts are truncated."),
    batch_size: int = num_option(64, "--batch-size", of=(FinetuneConfig, "eval_batch_size"),
                                 help="Texts per forward pass (bounds memory)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda, cuda:N, mps."),
    force: bool = typer.Option(False, "--force", help="Replace existing --out files."),
    encoding: str | None = EncodingOpt,
) -> None:
    """BERT's feature-based use: chosen layers' hidden states, combined, per token or pooled per text."""
    from bertcli import api

    api.features(checkpoint, input, out, layers=layers, combine=combine, pool=pool, text_column=text_column,
                 id_column=id_column, max_seq_length=max_seq_length, batch_size=batch_size, device=device, encoding=encoding,
                 force=force)


def main(argv: list[str] | None = None) -> None:
    """Entry point: renders a UserError as one message with exit code 2 (traceback with --debug)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("BERTCLI_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    try:
        app(args=args, prog_name="bertcli")
    except UserError as e:
        if debug:
            raise
        console.print_error(e.what, e.where, e.fix)
        sys.exit(2)


if __name__ == "__main__":
    main()
