"""`bertcli pretrain`: tokenize -> build-data -> train, reusing cached stages, in a run
directory (`recipe.out`) that holds exactly one run:

    <out>/recipe.yaml          the run's resolved recipe
    <out>/metrics.jsonl        one JSON object per logged step
    <out>/checkpoints/step-NNNNNNN/, <out>/final/    see bertcli.train.checkpoint
    <out>/tensorboard/         when tensorboard is installed
    <out>/tokenizer-<hash>/, data-<hash>/, ...      cached stages (unless cache_dir moves them)

Under torchrun every process runs this function; rank 0 builds missing stages while the others
wait, and only rank 0 writes the run's files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertcli.config.phases import budget_seconds, format_seconds, phase_of, plan
from bertcli.config.recipe import Recipe, load_recipe
from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.core.locks import run_lock
from bertcli.core.machine import use_threads
from bertcli.data.build import ensure_data
from bertcli.data.collator import PretrainCollator
from bertcli.data.dataset import PretrainDataset, load_data
from bertcli.model import build_model, parameter_counts, save_checkpoint
from bertcli.model.init_from import init_model
from bertcli.tokenization.build import ensure_tokenizer
from bertcli.tokenization.extend import load_extension
from bertcli.tokenization.load import load_tokenizer
from bertcli.train import checkpoint as ckpt_io
from bertcli.train import continued, distributed, memory, provenance
from bertcli.train.loop import PhaseData, Trainer, TrainInputs
from bertcli.train.metrics import read_metrics
from bertcli.train.phases import stage_name
from bertcli.train.precision import check_precision

RUN_FILES = ("recipe.yaml", "metrics.jsonl", "checkpoints", "final", "tensorboard")
# Sections whose change makes another run (train keys listed below may change on --resume).
RUN_SECTIONS = ("seed", "corpus", "tokenizer", "data", "model", "train")
RESUMABLE_TRAIN_KEYS = {"max_steps", "max_time", "eval_every", "eval_batches", "max_bad_steps"}


@dataclass
class PretrainResult:
    run_dir: Path
    step: int = 0
    max_steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    checkpoint: Path | None = None
    stages: list = field(default_factory=list)       # StageResults of tokenizer and data
    resumed_from: Path | None = None
    resumed_seconds: float = 0.0                    # training time of the runs before the resume
    last: dict = field(default_factory=dict)
    last_val: dict = field(default_factory=dict)
    interrupted: int | None = None               # signal number when stopped by a signal
    train_seconds: float = 0.0                      # training time (a budgeted run's clock)
    stage_seconds: float = 0.0                      # building stages in this run (not training time)
    phases: list = field(default_factory=list)      # bertcli.config.phases.Phase of a multi-phase run
    init: Any = None                                # continued pretraining: bertcli.train.continued.InitReport


# ----------------------------------------------------------------------- recipe comparison
def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """key path -> value of the fields that define a run (fields marked hash=False left out)."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            if f.metadata.get("hash", True) and not f.metadata.get("internal"):
                out.update(flatten(getattr(obj, f.name), f"{prefix}{f.name}."))
        return out
    if isinstance(obj, list):
        out = {}
        for i, x in enumerate(obj):
            out.update(flatten(x, f"{prefix[:-1]}[{i}]."))
        return out or {prefix[:-1]: []}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: obj}


def differences(old: Recipe, new: Recipe, sections=RUN_SECTIONS) -> list[tuple[str, Any, Any]]:
    """(key, old value, new value) for every run-defining key that differs."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    for s in sections:
        a.update(flatten(getattr(old, s), f"{s}.") if s != "seed" else {"seed": old.seed})
        b.update(flatten(getattr(new, s), f"{s}.") if s != "seed" else {"seed": new.seed})
    return [(k, a.get(k, "<absent>"), b.get(k, "<absent>")) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _describe(diffs: list[tuple[str, Any, Any]], limit: int = 6) -> str:
    shown = ", ".join(f"{k}: {o!r} -> {n!r}" for k, o, n in diffs[:limit])
    return shown + (f" (and {len(diffs) - limit} more)" if len(diffs) > limit else "")


def _saved_recipe(path: Path, what: str) -> Recipe:
    try:
        return load_recipe(str(path))
    except UserError as e:
        raise UserError(f"{what} has a recipe.yaml this bertcli cannot read ({e.what})", where=str(path),
                        fix="use another output_dir, or --force to start over there")


# -------------------------------------------------------------------------- run directory
def _has_run(run_dir: Path) -> bool:
    return any((run_dir / name).exists() for name in RUN_FILES)


def _refuse_another_run(run_dir: Path, recipe: Recipe) -> None:
    """UserError when the run directory holds the run of a recipe that differs from this one."""
    if not (run_dir / "recipe.yaml").is_file():
        return
    diffs = differences(_saved_recipe(run_dir / "recipe.yaml", "the output directory"), recipe)
    if diffs:
        raise UserError(f"the output directory holds the run of another recipe; differing keys: "
                        f"{_describe(diffs)}", where=str(run_dir),
                        fix="choose another output directory (--set output_dir=DIR), restore those keys, "
                            "or --force to replace that run")


def prepare_run(recipe: Recipe, resume: str | None, force: bool) -> ckpt_io.Checkpoint | None:
    """Check the output directory against the recipe and pick the checkpoint to resume from.
    Raises UserError (before anything is written) for another recipe's run, a damaged or
    foreign checkpoint, or a model changed since the checkpoint."""
    run_dir = recipe.out
    if resume and force:
        raise UserError("--resume and --force contradict each other",
                        fix="--resume continues the run, --force starts it over: give one")
    if force:
        return None
    if resume is None:
        if not _has_run(run_dir):
            return None
        _refuse_another_run(run_dir, recipe)
        last = ckpt_io.latest(run_dir)
        if last is None:
            return None  # a run of this recipe killed before its first checkpoint: start over
        at = f" (checkpoint at step {ckpt_io.read(last).step:,} of {recipe.train.max_steps:,})" \
            if _readable(last) else ""
        raise UserError(f"the output directory already holds this recipe's run{at}", where=str(run_dir),
                        fix="--resume auto continues it; --force starts it over")
    if resume == "auto":
        # the newest checkpoint that reads back complete; damaged newer ones are set aside (by _run)
        ck = ckpt_io.resumable(run_dir, require=ckpt_io.TrainState.required_keys())
        if ck is None:
            _refuse_another_run(run_dir, recipe)
            console.log(f"no checkpoint in {run_dir}: starting from scratch")
            return None
    else:
        ck = ckpt_io.read(Path(resume), require=ckpt_io.TrainState.required_keys())
    check_compatible(_saved_recipe(ck.recipe_yaml, "the checkpoint"), recipe, ck.path)
    return ck


def _readable(path: Path) -> bool:
    try:
        ckpt_io.read(path)
        return True
    except UserError:
        return False


def check_compatible(saved: Recipe, recipe: Recipe, where: Path) -> None:
    """A checkpoint continues only under the same model, data and training settings (a longer
    max_steps, other evaluation settings and every machine setting may change)."""
    model = differences(saved, recipe, ("model",))
    if model:
        raise UserError(f"the recipe's model changed since the checkpoint: {_describe(model)}", where=str(where),
                        fix="restore those model keys to resume, or start a new run (--force or another output_dir)")
    data = differences(saved, recipe, ("seed", "corpus", "tokenizer", "data"))
    if data:
        raise UserError(f"the checkpoint was trained on other data: {_describe(data)}", where=str(where),
                        fix="restore those keys to resume, or start a new run (--force or another output_dir)")
    train = [d for d in differences(saved, recipe, ("train",)) if d[0].split(".", 1)[1] not in RESUMABLE_TRAIN_KEYS]
    if train:
        raise UserError(f"the training settings changed since the checkpoint: {_describe(train)}", where=str(where),
                        fix="only train.max_steps, max_time, eval_every, eval_batches, max_bad_steps and machine "
                            "settings may change on --resume; restore the others or start a new run")


def _clear_run(run_dir: Path) -> None:
    for name in RUN_FILES:
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


# ------------------------------------------------------------------------------- stages
def _stages(recipe: Recipe, d: distributed.Dist):
    """Tokenizer and data (StageResults). The main process builds what is missing while the
    others wait; then each node's first process checks (a node without a shared filesystem
    builds its own copy, deterministically the same), then everyone loads."""
    def both():
        return ensure_tokenizer(recipe), ensure_data(recipe)

    results = None
    if d.main:
        results = both()
    distributed.barrier(d)
    if not d.main and d.local_rank == 0:
        results = both()
    distributed.barrier(d)
    return results or both()


# ---------------------------------------------------------------------------------- run
def run_pretrain(recipe: Recipe, resume: str | None = None, force: bool = False) -> PretrainResult:
    """Run the missing stages, then pretrain (or continue a run with `resume`)."""
    d = distributed.init(recipe.train.device)
    try:
        # one process per run directory: a second run on it fails at once, naming the holder
        with run_lock(recipe.out) if d.main else contextlib.nullcontext():
            return _run(recipe, resume, force, d)
    finally:
        distributed.shutdown()


def _run(recipe: Recipe, resume: str | None, force: bool, d: distributed.Dist) -> PretrainResult:
    check_precision(recipe.train.precision, d.device)
    run_dir = recipe.out
    ck = prepare_run(recipe, resume, force)
    # before the model exists: a resume takes the checkpoint's count (the same bits), a new run the free cores
    use_threads(recipe.train.threads, "train.threads", d.device, recorded=ck.state.threads if ck is not None else None)
    distributed.barrier(d)  # every process has checked before rank 0 changes anything
    if d.main and force:
        _clear_run(run_dir)
    t0 = time.monotonic()
    phases = plan(recipe)
    start_phase = phase_of(phases, (ck.step if ck is not None else 0) + 1)   # the stages it needs now
    tok_result, data_result = _stages(start_phase.recipe, d)
    result = PretrainResult(run_dir, max_steps=recipe.train.max_steps, stages=[tok_result, data_result],
                            stage_seconds=time.monotonic() - t0, phases=phases if recipe.train.phases else [])
    result.stages[1] = stage_name(data_result, start_phase)
    for s in result.stages:
        console.log(f"{s.name}: {'reused' if s.reused else 'built'} {s.path}")
    tok = load_tokenizer(tok_result.path)
    data = load_data(data_result.path)
    train_split, val_split = data["train"], data["validation"]
    hashes = provenance.inputs_sha256(tok_result.path, data_result.path)
    same_phase = ck is not None and phase_of(phases, max(1, ck.step)) is start_phase   # not at a boundary
    if ck is not None:
        # At a phase boundary the data is the next phase's: only the tokenizer must be the same.
        provenance.check_same_inputs(ck.state, hashes, ck.path, tok_result.path, data_result.path,
                                     compare=("tokenizer_sha256", "data_sha256") if same_phase else ("tokenizer_sha256",))
        if same_phase and ck.state.train_rows not in (None, len(train_split)):
            raise UserError(f"the checkpoint was trained on {ck.state.train_rows:,} rows, the data has "
                            f"{len(train_split):,}", where=str(ck.path), fix="rebuild the same data or start a new run")
        if d.main:
            ckpt_io.set_aside_damaged(ck)

    memory.check_model_fits(parameter_counts(recipe.model, tok.vocab_size)["total"], d.device)  # before allocating it
    torch.manual_seed(recipe.seed)  # the same initial weights in every process and every run
    init_notes: list = []
    if recipe.model.init_from is not None:      # continued pretraining (bertcli/model/init_from.py)
        init_record = continued.check_source(recipe, run_dir, resuming=ck is not None)
        model, init_notes = init_model(recipe, tok, load_extension(tok_result.path))
    else:
        model = build_model(recipe.model, tok.vocab_size, tok.pad_id)
    if d.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        recipe.save(run_dir)
        ckpt_io.prune(run_dir, recipe.train.keep_last)
    result.resumed_from = ck.path if ck is not None else None
    result.resumed_seconds = float(ck.state.elapsed_s) if ck is not None else 0.0
    if ck is not None:
        console.log(f"resuming from {ck.path} (step {ck.step:,}, {ck.state.consumed_samples:,} samples)")
    inputs = TrainInputs(
        recipe=recipe, model=model, train_dataset=PretrainDataset(train_split), val_dataset=PretrainDataset(val_split),
        n_train=len(train_split), n_val=len(val_split),
        collate=PretrainCollator(tok, start_phase.recipe.data, recipe.seed),
        hf_save=lambda m, directory: save_checkpoint(m, directory, tokenizer_dir=tok.path),
        run_dir=run_dir, dist=d, resume=ck, phases=phases, inputs_sha256=hashes,
        open_phase=lambda ph: _open_phase(ph, tok, d, result))
    budget = budget_seconds(recipe.train)
    if ck is not None and (ck.step >= recipe.train.max_steps
                           or (budget is not None and ck.state.elapsed_s >= budget)):
        console.log(f"the run is already complete at step {ck.step:,} (train.max_steps {recipe.train.max_steps:,}"
                    f"{f', train.max_time {recipe.train.max_time}' if budget is not None else ''})")
        result.train_seconds = float(ck.state.elapsed_s)
        final = run_dir / "final"
        result.step, result.tokens = ck.step, int(ck.state.tokens)
        result.checkpoint = final if (final / "config.json").is_file() else ck.path
        records = read_metrics(run_dir / "metrics.jsonl", up_to_step=ck.step)
        result.last = records[-1] if records else {}
        result.last_val = next((r for r in reversed(records) if "val_loss" in r), {})
    else:
        trainer = Trainer(inputs)
        if recipe.model.init_from is not None:
            inputs.first_record = continued.start_figures(trainer, init_record, run_dir, resuming=ck is not None,
                                                          main=d.main)
            result.init = continued.InitReport(init_notes, init_record)
        console.log(f"model: {sum(p.numel() for p in model.parameters()):,} parameters on {d.device}"
                    f"{f' x {d.world_size} processes' if d.enabled else ''}; batch {trainer.batch_size} = "
                    f"{trainer.accum} x {trainer.micro} x {d.world_size}; {recipe.train.precision}")
        out = trainer.fit()
        result.step, result.tokens, result.checkpoint = out.step, out.tokens, out.checkpoint
        result.last, result.last_val, result.interrupted = out.last, out.last_val, out.interrupted
        result.train_seconds = out.train_seconds
        result.stage_seconds += out.stage_seconds
    result.seconds = time.monotonic() - t0
    if d.main:
        rows = pretrain_summary_rows(result, recipe)
        if recipe.model.init_from is not None:
            rows[1:1] = continued.summary_rows(result.init, run_dir, result.last_val, init_notes,
                                               result.stages[0].summary)
        console.summary(f"pretrain {recipe.name}: {'interrupted' if result.interrupted else 'done'}", rows)
    return result


def _open_phase(ph, tok, d: distributed.Dist, result: PretrainResult):
    """A later phase's data for the trainer: its stage (built when missing, as at the start of a
    run) loaded as the loop reads it."""
    _, data_result = _stages(ph.recipe, d)
    data_result = stage_name(data_result, ph)
    result.stages.append(data_result)
    console.log(f"{data_result.name}: {'reused' if data_result.reused else 'built'} {data_result.path}")
    data = load_data(data_result.path)
    return PhaseData(PretrainDataset(data["train"]), PretrainDataset(data["validation"]), len(data["train"]),
                     len(data["validation"]), PretrainCollator(tok, ph.recipe.data, ph.recipe.seed),
                     provenance.content_sha256(data_result.path, ["*.arrow"]))


def pretrain_summary_rows(r: PretrainResult, recipe: Recipe) -> list[tuple[str, object]]:
    pair = recipe.data.objective if recipe.data.objective != "none" else None
    rows: list[tuple[str, object]] = [("stages", ", ".join(f"{s.name} {'reused' if s.reused else 'built'}"
                                                          for s in r.stages))]
    if r.resumed_from:
        rows.append(("resumed from", str(r.resumed_from)))
    time_row = f"{r.seconds:,.1f} s"
    if r.resumed_from:  # the run so far, and this segment (earlier runs: their training time)
        time_row = (f"{format_seconds(r.resumed_seconds + r.seconds)} in all: {format_seconds(r.resumed_seconds)} "
                    f"training before the resume + {r.seconds:,.1f} s this run")
    rows += [("steps", f"{r.step:,} / {r.max_steps:,}"), ("tokens", r.tokens), ("time", time_row)]
    for ph in r.phases:
        t = ph.recipe.train
        rows.append((f"phase {ph.name}", f"steps {ph.start + 1:,}-{ph.end:,}, {ph.recipe.data.max_seq_length} tokens, "
                                         f"batch {t.batch_size}, peak lr {t.learning_rate:g}"
                                         f"{' (own schedule)' if ph.own_schedule else ''}"))
    budget = budget_seconds(recipe.train)
    if budget is not None:
        rows.append(("training time", f"{format_seconds(r.train_seconds)} of the {recipe.train.max_time} budget "
                                      f"(building stages: {format_seconds(r.stage_seconds)}, not counted)"))
    if r.last:
        rows.append(("train loss / MLM acc", f"{r.last['loss']:.4f} / {r.last['mlm_acc']:.4f}"))
    v = r.last_val
    if v:
        rows.append(("val loss / MLM acc", f"{v['val_loss']:.4f} / {v['val_mlm_acc']:.4f} "
                                          f"(most-frequent-token baseline {v['val_mlm_majority_acc']:.4f})"))
        if pair and v.get("val_pair_acc") is not None:
            rows.append((f"val {pair.upper()} acc", f"{v['val_pair_acc']:.4f}"))
    rows += [("checkpoint", str(r.checkpoint) if r.checkpoint else "-"), ("metrics", str(r.run_dir / "metrics.jsonl"))]
    if r.interrupted:
        rows.append(("next", "the same command with --resume auto continues from the checkpoint"))
    elif r.checkpoint:
        rows.append(("next", f"bertcli fill-mask --checkpoint {r.checkpoint} \"...\"  |  "
                             f"bertcli finetune glue --checkpoint {r.checkpoint} --tasks sst2 --data-dir glue_data"))
    return rows
