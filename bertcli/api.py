"""bertcli from Python: the functions the command line calls, with typed signatures.

    import bertcli
    run = bertcli.pretrain("bert-tiny", overrides={"train.max_steps": 200})
    bertcli.finetune("glue", run.checkpoint, tasks="sst2", data_dir="glue_data")
    bertcli.export(run.checkpoint, "deploy/fill-mask")

Each `bertcli` command is a thin layer over one of these (bertcli/cli.py): they load and check
the recipe exactly as the command does, build what is missing and return the result object the
command renders. A mistake in a recipe or an input raises `bertcli.core.errors.UserError` (its
`what`, `where` and `fix` are the CLI's one-line message). Heavy modules (torch, datasets) are
imported inside the functions, so `import bertcli` stays light.

`recipe` is a shipped recipe's name (`bert-tiny`, `glue`, ...), a path to a YAML file, or None
for all defaults; `overrides` are `--set` items, either as `["train.max_steps=200", ...]` or as a
mapping `{"train.max_steps": 200}` (values are written as YAML, so lists and strings work).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from bertcli.config.options import SweepArgs
from bertcli.config.recipe import check_purpose, load_recipe
from bertcli.core import jsonout
from bertcli.core.errors import UserError
from bertcli.core.locks import run_lock
from bertcli.core.outputs import check_recipe_work_dirs, writing
from bertcli.core.paths import check_recipe_outputs, default_out, resolve_checkpoint
from bertcli.core.testhooks import stop_point
from bertcli.export.graph import DEFAULT_OPSET
from bertcli.export.predictor import is_bundle
from bertcli.export.run import run_export
from bertcli.export.speed import teacher_student_speed
from bertcli.finetune import command as commands
from bertcli.finetune import ddp, sweep_shared
from bertcli.finetune import sweep as sweeps
from bertcli.finetune.distill.run import make_task, run_distill
from bertcli.serve.embed import embed_file
from bertcli.serve.evaluate_embed import evaluate_embed as run_evaluate_embed
from bertcli.serve.features import extract_features
from bertcli.serve.fill_mask import fill_mask as run
from bertcli.serve.predict import run_predict
from bertcli.tokenization.build import run_tokenize
from bertcli.train.phases import build_phase_data

if TYPE_CHECKING:  # real types for readers and checkers; importing them would pull in torch
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; typing_extensions comes with torch

    from bertcli.config.recipe import Recipe
    from bertcli.config.stages import StageResult
    from bertcli.export.run import ExportResult
    from bertcli.train.pipeline import PretrainResult

PathLike = str | os.PathLike[str]
Overrides = Sequence[str] | Mapping[str, Any] | None
Command = Literal["pretrain", "tokenize", "build-data", "finetune"]


class TaskOptions(TypedDict, total=False):
    """The shipped fine-tuning tasks' own options, `finetune(task, ..., **options)`: their
    commands' flags by parameter name (bertcli/finetune/*/command.py, each task's `options`;
    tests/test_finetune_commands.py keeps the two in step). Each task takes its own and refuses
    the others' (a TypeError from its `run`)."""

    tasks: str                          # glue
    from_mnli: bool                     # glue
    data_dir: Path | None               # glue, squad, ner
    hub: str | None                     # glue, squad
    version: int                        # squad
    train: Path                         # classify, embed
    dev: Path | None                    # classify, embed
    test: Path | None                   # classify
    text_column: str | None             # classify, embed
    text_pair_column: str | None        # classify, embed
    label_column: str | None            # classify
    regression: bool | None             # classify
    encoding: str | None                # classify, ner, embed
    unsupervised: bool | None           # embed, and the rest
    anchor_column: str | None
    positive_column: str | None
    negative_column: list[str] | None
    score_column: str | None
    dims: str | list[int] | None
    pooling: str | None
    normalize: bool | None
    symmetric: bool | None
    mini_batch_size: int | None

__all__ = [
    "build_data",
    "distill",
    "embed",
    "evaluate_embed",
    "export",
    "features",
    "fill_mask",
    "finetune",
    "finetune_classify",
    "finetune_glue",
    "finetune_ner",
    "finetune_squad",
    "load",
    "predict",
    "pretrain",
    "tokenize",
]


def _override_items(overrides: Overrides) -> list[str]:
    """`--set` items from a sequence of `key=value` strings or a {key: value} mapping."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        # JSON is YAML's flow syntax: 200 -> 200, "x" -> "x", [a, b] -> ["a", "b"], None -> null
        return [f"{key}={jsonout.dumps(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str):
        return [overrides]
    return list(overrides)


def load(recipe: PathLike | None = None, overrides: Overrides = None, command: Command | None = None,
         writes: bool = False) -> Recipe:
    """Load a recipe, apply the overrides and check every key. With `command`, the recipe must be
    made for it (a pretraining recipe for pretrain / tokenize / build-data, a `finetune` section
    for finetune); with `writes`, the output_dir / cache_dir it writes are checked before any
    work (bertcli.core.paths)."""
    r = load_recipe(None if recipe is None else str(recipe), _override_items(overrides))
    if command is not None:
        check_purpose(r, command)
    if writes:
        check_recipe_outputs(r)
        check_recipe_work_dirs(r)
    stop_point("recipe")
    return r


# ------------------------------------------------------------------------------ pretraining
def tokenize(recipe: PathLike | None = "bert-tiny", overrides: Overrides = None, force: bool = False) -> StageResult:
    """Stage 1: read the corpus and train the tokenizer, unless an identical one is cached
    (`force` rebuilds). Returns where it is, whether it was reused, and its summary rows."""
    r = load(recipe, overrides, "tokenize", writes=True)
    with _stage_lock(r):
        return run_tokenize(r, force=force)


def build_data(recipe: PathLike | None = "bert-tiny", overrides: Overrides = None, force: bool = False,
               all_phases: bool = False) -> list[StageResult]:
    """Stage 2: the pretraining pairs and masks (the tokenizer first when missing). A multi-phase
    recipe builds its first phase's data, or every phase's with `all_phases`."""
    r = load(recipe, overrides, "build-data", writes=True)
    with _stage_lock(r):
        return build_phase_data(r, force=force, all_phases=all_phases)


def _stage_lock(recipe: Recipe) -> contextlib.AbstractContextManager:
    """The run directory's lock for a stage command writing its stages into output_dir (a second
    writer fails at once, naming it). With a separate cache_dir the stages go there only, under
    their stage locks, where a second build of the same stage waits and reuses the first's."""
    return run_lock(recipe.out) if not recipe.cache_dir else contextlib.nullcontext()


def pretrain(recipe: PathLike | None = "bert-tiny", overrides: Overrides = None, resume: PathLike | None = None,
             force: bool = False) -> PretrainResult:
    """Run every missing stage, then pretrain. `resume`: "auto" (the run's newest complete
    checkpoint) or a checkpoint directory; `force` starts the run over. Returns the run's
    result: `run_dir`, `checkpoint` (its `final/` directory, a Hugging Face directory), `step`,
    `tokens`, the last logged metrics (`last`, `last_val`), and `interrupted` (the signal
    number when SIGINT / SIGTERM stopped it after saving a checkpoint)."""
    r = load(recipe, overrides, "pretrain", writes=True)  # a mistake in the recipe is reported before torch loads
    from bertcli.train.pipeline import run_pretrain

    return run_pretrain(r, resume=None if resume is None else str(resume), force=force)


# ------------------------------------------------------------------------------ fine-tuning
def finetune(task: str, checkpoint: PathLike, recipe: PathLike | None = None, overrides: Overrides = None,
             out: PathLike | None = None, force: bool = False, sweep: SweepArgs | None = None,
             **options: Unpack[TaskOptions]) -> dict:
    """`bertcli finetune TASK`: `finetune("glue", ckpt, tasks="rte", data_dir="glue_data")`,
    `finetune("classify", ckpt, train=..., dev=...)`, `finetune("ner", ckpt, data_dir=...)`,
    `finetune("squad", ckpt, data_dir=..., version=2)`: the task's own options are its command's
    flags (bertcli/finetune/*/command.py). `recipe`: default the task's shipped recipe; `out`:
    default runs/<task>/<checkpoint name>, checked, locked and marked (bertcli.core.outputs.writing)
    before the heavy imports, so a refusal comes at once and nothing the user has is replaced.
    `sweep`: seeds and a learning-rate grid (SweepArgs(seeds="3", rates=[5e-5, 3e-5]),
    bertcli/finetune/sweep.py), each run in its own folder under `out`.
    Returns results.json's content (GLUE: glue_results.json's; a sweep: {"sweep": ...})."""
    cmd = commands.get(task)
    overrides = _override_items(overrides)
    if sweep is not None and sweep.rates:
        overrides = [*overrides, f"finetune.learning_rate={sweep.rates[0]!r}"]   # a task block's rate gives way
    r = load(cmd.recipe if recipe is None else recipe, overrides, "finetune")
    checkpoint = resolve_checkpoint(checkpoint)   # a run directory -> its final/ (or says what to resume)
    by_name: Mapping[str, Any] = options        # what the command declares, by name (cmd.inputs)
    _inputs_given(cmd.data_name, hub=options.get("hub"), **{k: by_name.get(k) for k in cmd.inputs})
    dest = Path(out) if out is not None else default_out(Path(checkpoint), cmd.default_kind(options))
    if any(options.get(k) for k in cmd.sweep_options) and sweep is None:
        sweep = SweepArgs()                         # e.g. GLUE's --from-mnli: a sweep of one seed
    if sweep is not None and (sweep.wanted or any(options.get(k) for k in cmd.sweep_options)):
        ddp.check_sweep(protocol=cmd.sweep is not None, shared=sweep.shared)
        if cmd.sweep_check is not None:
            cmd.sweep_check(sweep, options)
        plan = sweeps.make_plan(cmd.name, Path(checkpoint), r, sweep, dest)
        fresh = force and not sweep.resume          # --force replaces what is there; --resume continues it
        inputs = [checkpoint, *commands.input_paths(cmd, options)]

        def one_run(recipe_: Recipe, folder: Path) -> dict:
            return cmd.run(recipe_, Path(checkpoint), folder, **options)

        if sweep.shared:                            # several processes write `dest` (finetune/sweep_shared.py)
            if cmd.sweep is not None:
                raise UserError(f"--shared sweeps one task; finetune {cmd.name} runs a protocol of its own",
                                fix="give each task its own --out (and --shared there), or drop --shared")
            return sweep_shared.run_shared(plan, r, Path(checkpoint), dest, one_run, dict(options), inputs, force)
        # under torchrun rank 0 alone checks, locks and marks `dest`; every rank trains every run
        with (writing(dest, force or (sweep.resume and sweeps.is_sweep(dest)), inputs) if ddp.writes()
              else contextlib.nullcontext(dest)):
            if cmd.sweep is not None:       # a command with a protocol of its own (GLUE's tasks)
                return cmd.sweep(plan, r, Path(checkpoint), dest, fresh, **options)
            return sweeps.run_sweep(plan, r, Path(checkpoint), dest, one_run, fresh)
    # under torchrun only rank 0 checks, locks and marks `dest` (finetune/ddp.py); every rank reads the inputs
    with (writing(dest, force, [checkpoint, *commands.input_paths(cmd, options)]) if ddp.writes()
          else contextlib.nullcontext(dest)):
        return cmd.run(r, Path(checkpoint), dest, **options)


def finetune_glue(checkpoint: PathLike, tasks: str, data_dir: PathLike | None = None, hub: str | None = None,
                  recipe: PathLike | None = "glue", overrides: Overrides = None,
                  out: PathLike | None = None, force: bool = False, sweep: SweepArgs | None = None,
                  from_mnli: bool = False) -> dict:
    """Fine-tune on GLUE: `tasks` is a name (sst2, SST-2, ...), several separated by commas, or
    `all`; the data from `data_dir` (the download script's layout, save_to_disk or parquet) or
    `hub` (datasets.load_dataset, needs the network). `sweep` (seeds, a rate grid) and `from_mnli`
    run the GLUE protocol (classification/glue_sweep.py). Returns glue_results.json's content (a
    sweep: results.json's, {"sweep": ...})."""
    return finetune("glue", checkpoint, recipe, overrides, out, force, sweep, tasks=tasks, data_dir=_path(data_dir),
                    hub=hub, from_mnli=from_mnli)


def finetune_classify(checkpoint: PathLike, train: PathLike, dev: PathLike, test: PathLike | None = None,
                      text_column: str | None = None, text_pair_column: str | None = None,
                      label_column: str | None = None, regression: bool | None = None,
                      recipe: PathLike | None = "classify", overrides: Overrides = None,
                      out: PathLike | None = None, encoding: str | None = None, force: bool = False) -> dict:
    """Fine-tune a text (pair) classifier, or a regressor, on your own csv / tsv / jsonl /
    parquet / save_to_disk files. The column and regression arguments override the recipe's
    finetune.classify block where given. Returns results.json's content."""
    return finetune("classify", checkpoint, recipe, overrides, out, force, train=Path(train), dev=Path(dev),
                    test=_path(test), text_column=text_column, text_pair_column=text_pair_column,
                    label_column=label_column, regression=regression, encoding=encoding)


def finetune_ner(checkpoint: PathLike, data_dir: PathLike, recipe: PathLike | None = "ner",
                 overrides: Overrides = None, out: PathLike | None = None, encoding: str | None = None,
                 force: bool = False) -> dict:
    """Fine-tune a tagger on CoNLL-2003-style data (files, jsonl or a save_to_disk directory);
    entity P/R/F1 as conlleval. Returns results.json's content."""
    return finetune("ner", checkpoint, recipe, overrides, out, force, data_dir=Path(data_dir), encoding=encoding)


def finetune_squad(checkpoint: PathLike, data_dir: PathLike | None = None, hub: str | None = None,
                   version: int = 1, recipe: PathLike | None = "squad", overrides: Overrides = None,
                   out: PathLike | None = None, force: bool = False) -> dict:
    """Fine-tune on SQuAD v1.1 (`version=2`: v2.0; CMRC 2018 too) from `data_dir` or `hub`;
    official EM / F1. Returns results.json's content."""
    return finetune("squad", checkpoint, recipe, overrides, out, force, data_dir=_path(data_dir), hub=hub,
                    version=version)


def distill(checkpoint: PathLike, task: Literal["classify", "ner", "squad"], train: PathLike | None = None,
            dev: PathLike | None = None, test: PathLike | None = None, data_dir: PathLike | None = None,
            hub: str | None = None, version: int = 1, text_column: str | None = None,
            text_pair_column: str | None = None, label_column: str | None = None, layers: int | None = None,
            student: str | None = None, unlabelled: PathLike | None = None, recipe: PathLike | None = "distill",
            overrides: Overrides = None, out: PathLike | None = None, encoding: str | None = None,
            force: bool = False, sweep: SweepArgs | None = None) -> dict:
    """Distill the fine-tuned `checkpoint` (the teacher) into a smaller student on `task`, read
    with the finetune commands' data arguments (classify: train / dev / test and the columns;
    ner: data_dir; squad: data_dir or hub, version). The student: `layers` of the teacher's
    (default 4), or `student`, a checkpoint directory or recipe of the teacher's family and
    vocabulary. `unlabelled`: examples only the teacher labels (distill/unlabelled.py). `sweep`: seeds
    and a learning-rate grid, as for `finetune`. Returns results.json's content, whose `distill`
    entry puts teacher and student side by side (a sweep: {"sweep": ...})."""
    columns = {k: v for k, v in {"text_column": text_column, "text_pair_column": text_pair_column,
                                 "label_column": label_column}.items() if v is not None}
    overrides = _override_items(overrides)
    if sweep is not None and sweep.rates:
        overrides = [*overrides, f"finetune.learning_rate={sweep.rates[0]!r}"]
    r = load(recipe, overrides, "finetune")
    checkpoint = resolve_checkpoint(checkpoint)   # a run directory -> its final/
    dest = Path(out) if out is not None else default_out(Path(checkpoint), "distill")

    def one_run(recipe_: Recipe, folder: Path) -> dict:
        t, recipe_ = make_task(task, recipe_, _path(train), _path(dev), _path(test), _path(data_dir), hub, version,
                               encoding, **columns)
        return run_distill(recipe_, Path(checkpoint), t, folder, layers=layers, student=student,
                           unlabelled=_path(unlabelled), time_onnx=teacher_student_speed)

    inputs = [checkpoint, train, dev, test, data_dir, unlabelled]
    if sweep is not None and sweep.wanted:
        ddp.check_sweep()
        make_task(task, r, _path(train), _path(dev), _path(test), _path(data_dir), hub, version, encoding, **columns)
        plan = sweeps.make_plan("distill", Path(checkpoint), r, sweep, dest)
        if sweep.shared:
            ddp.check_sweep(shared=True)
            given = {"task": task, "train": train, "dev": dev, "test": test, "data_dir": data_dir, "hub": hub,
                     "version": version, "layers": layers, "student": student, "unlabelled": unlabelled, **columns}
            return sweep_shared.run_shared(plan, r, Path(checkpoint), dest, one_run, given,
                                           [p for p in inputs if p is not None], force)
        with (writing(dest, force or (sweep.resume and sweeps.is_sweep(dest)), inputs) if ddp.writes()
              else contextlib.nullcontext(dest)):
            return sweeps.run_sweep(plan, r, Path(checkpoint), dest, one_run, force and not sweep.resume)
    # under torchrun only rank 0 checks, locks and marks `dest`, as for finetune
    with writing(dest, force, inputs) if ddp.writes() else contextlib.nullcontext(dest):
        return one_run(r, dest)


# ------------------------------------------------------------------------------ using a model
def features(checkpoint: PathLike, input: PathLike, out: PathLike, layers: str = "-1", combine: str = "concat",
             pool: str = "cls", text_column: str = "text", id_column: str | None = None,
             max_seq_length: int = 128, batch_size: int = 64, device: str = "auto",
             encoding: str | None = None, force: bool = False, threads: int | None = None) -> dict:
    """BERT's feature-based use: the chosen layers' hidden states (0 = embeddings, -1 = last),
    combined (concat, sum, mean) and pooled (cls, mean, none), for every text of `input`,
    written to `out` (.parquet or .npy). Returns a summary."""
    return extract_features(resolve_checkpoint(checkpoint), Path(input), Path(out), layers=layers, combine=combine, pool=pool,
                            text_column=text_column, id_column=id_column, max_seq_length=max_seq_length,
                            batch_size=batch_size, device=device, encoding=encoding,
                            force=force, threads=threads)


def embed(checkpoint: PathLike, input: PathLike, out: PathLike, text_column: str = "text",
          id_column: str | None = None, pooling: str | None = None, normalize: bool | None = None,
          max_seq_length: int | None = None, batch_size: int = 64, device: str = "auto",
          encoding: str | None = None, force: bool = False, threads: int | None = None) -> dict:
    """Sentence embeddings of every text of `input` into `out` (.parquet or .npy), pooled as a
    sentence-transformers directory says, else by `pooling` (default mean). Returns a summary."""
    return embed_file(Path(checkpoint), Path(input), Path(out), text_column=text_column, id_column=id_column,
                      pooling=pooling, normalize=normalize, max_seq_length=max_seq_length, batch_size=batch_size,
                      device=device, encoding=encoding, force=force, threads=threads)


def evaluate_embed(checkpoint: PathLike, beir: PathLike | None = None, split: str = "test",
                   sts: PathLike | None = None, pooling: str | None = None, normalize: bool | None = None,
                   max_seq_length: int | None = None, batch_size: int = 64, device: str = "auto",
                   threads: int | None = None) -> dict:
    """Retrieval (nDCG@10, MRR@10, Recall@1/10/100, MAP@100 on a BEIR directory) and / or STS
    (Pearson, Spearman of cosine) of any checkpoint's embeddings. Returns the figures."""
    return run_evaluate_embed(Path(checkpoint), beir=_path(beir), split=split, sts=_path(sts), pooling=pooling,
                    normalize=normalize, max_seq_length=max_seq_length, batch_size=batch_size, device=device,
                    threads=threads)


def fill_mask(checkpoint: PathLike, text: str, top_k: int = 5) -> list[dict[str, Any]]:
    """For each mask token in `text`: its position and the top-k fillers (token, id,
    probability, the text with the filler in place)."""
    return run(resolve_checkpoint(checkpoint), text, top_k=top_k)


def export(checkpoint: PathLike, out: PathLike, task: str | None = None, opset: int = DEFAULT_OPSET, fp16: bool = False,
           quantize: Literal["int8"] | None = None, dev: PathLike | None = None, verify: bool = True,
           force: bool = False, threads: int | None = None, optimize: bool = True) -> ExportResult:
    """Export a checkpoint to an ONNX bundle, verified against PyTorch unless `verify=False`
    (needs the `export` extra). `result.passed` is False when verification failed (the bundle
    is then not kept). `optimize`: ONNX Runtime's transformer fusions, kept where verified (not
    for fp16, the GPU runtimes' graph)."""
    return run_export(resolve_checkpoint(checkpoint), Path(out), task=task, opset=opset, fp16=fp16, quantize=quantize,
                      dev=_path(dev), verify=verify, force=force, threads=threads, optimize=optimize)


def predict(model: PathLike, input: PathLike, out: PathLike | None = None, task: str | None = None,
            batch_size: int = 32, top_k: int = 5, pooling: str = "mean", max_length: int | None = None,
            allow_impossible: bool = False, encoding: str | None = None, force: bool = False,
            threads: int | None = None) -> dict:
    """Batched predictions for every record of `input` (.txt, .jsonl, .csv/.tsv, .parquet) as
    jsonl into `out` (stdout when None), with PyTorch (a checkpoint directory) or ONNX Runtime
    (a bundle or its model.onnx). Returns a summary (records, task, backend, out)."""
    model = Path(model)
    if not is_bundle(model):  # an export bundle or its model.onnx is read as it is
        model = resolve_checkpoint(model)
    return run_predict(model, Path(input), _path(out), task=task, batch_size=batch_size, top_k=top_k,
                       pooling=pooling, max_length=max_length, allow_impossible=allow_impossible,
                       encoding=encoding, force=force, threads=threads)


def _inputs_given(data: str | None, hub: str | None = None, **paths: PathLike | None) -> None:
    """The input checks that need no data read, before torch is imported (a mistyped path is
    reported at once): the paths given exist; `data` names a set read from --data-dir or --hub,
    exactly one of which is given. The readers check the contents."""
    if data is not None and (paths.get("data_dir") is None) == (hub is None):
        raise UserError(f"give exactly one of --data-dir (local {data} files) and --hub (a `datasets` name)",
                        fix=f"--data-dir DIR with the {data} files, or --hub NAME (needs the network)")
    for name, p in paths.items():
        if p is not None and not Path(p).exists():
            flag = "--" + name.replace("_", "-")
            raise UserError(f"{flag} {p} does not exist", fix=f"give {flag} an existing file or directory")


def _path(p: PathLike | None) -> Path | None:
    return None if p is None else Path(p)
