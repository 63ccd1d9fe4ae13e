"""`bertcli pretrain`: tokenize -> build-data -> train, reusing cached stages, in a run
directory (`recipe.out`) that holds exactly one run:

    <out>/recipe.yaml          the run's resolved recipe
    <out>/metrics.jsonl        one JSON object per logged step
    <out>/checkpoints/step-NNNNNNN/, <out>/final/    see bertcli.train.checkpoint
    <out>/tensorboard/, wandb/, mlruns/, trackers.json   train.report_to's trackers
    <out>/tokenizer-<hash>/, data-<hash>/, ...      cached stages (unless cache_dir moves them)

Under torchrun every process runs this function; rank 0 builds missing stages while the others
wait, and only rank 0 writes the run's files.

`_run` reads top to bottom: where the run starts (bertcli.train.resume.ResumeState: scratch or a
checkpoint, and the checks a resume needs), its stages (RunData), where its weights start
(bertcli.train.continued.start_weights: a new model or `model.init_from`), then either training
(`_train`) or a resume of a run already complete (`_already_complete`); both give a TrainResult,
from which the PretrainResult is built once.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import torch

from bertcli.config.model import EncoderConfig
from bertcli.config.phases import Phase, budget_seconds, format_seconds, phase_of, plan
from bertcli.config.recipe import Recipe
from bertcli.config.stages import StageResult
from bertcli.core import console
from bertcli.core.locks import run_lock
from bertcli.core.machine import use_threads
from bertcli.data.build import ensure_data
from bertcli.data.collator import PretrainCollator
from bertcli.data.dataset import PretrainDataset, load_data
from bertcli.model.checkpoint import save_checkpoint
from bertcli.model.count import parameter_counts
from bertcli.tokenization.build import ensure_tokenizer
from bertcli.tokenization.load import load_tokenizer
from bertcli.train import checkpoint as ckpt_io
from bertcli.train import continued, distributed, memory, provenance
from bertcli.train.continued import InitReport, WeightsStart
from bertcli.train.loop import PhaseData, Trainer, TrainInputs, TrainResult
from bertcli.train.metrics import read_metrics
from bertcli.train.objective import RTDObjective, build_rtd, save_rtd
from bertcli.train.phases import stage_name
from bertcli.train.precision import check_precision
from bertcli.train.resume import ResumeState, clear_run
from bertcli.train.trackers import check_report_to


@dataclass
class PretrainResult:
    run_dir: Path
    step: int = 0
    max_steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    checkpoint: Path | None = None
    stages: list[StageResult] = field(default_factory=list)   # tokenizer, then each phase's data as used
    resumed_from: Path | None = None
    resumed_seconds: float = 0.0                    # training time of the runs before the resume
    last: dict = field(default_factory=dict)
    last_val: dict = field(default_factory=dict)
    interrupted: int | None = None               # signal number when stopped by a signal
    train_seconds: float = 0.0                      # training time (a budgeted run's clock)
    stage_seconds: float = 0.0                      # building stages in this run (not training time)
    phases: list[Phase] = field(default_factory=list)   # the plan of a multi-phase run
    init: InitReport | None = None                  # continued pretraining, when the run trained


def _rtd(recipe: Recipe) -> bool:
    return recipe.train.objective == "rtd"


# ------------------------------------------------------------------------------- stages
def _stages(recipe: Recipe, d: distributed.Dist) -> tuple[StageResult, StageResult]:
    """Tokenizer and data (StageResults). The main process builds what is missing while the
    others wait; then each node's first process checks (a node without a shared filesystem
    builds its own copy, deterministically the same), then everyone loads."""
    def both() -> tuple[StageResult, StageResult]:
        return ensure_tokenizer(recipe), ensure_data(recipe)

    results = None
    if d.main:
        results = both()
    distributed.barrier(d)
    if not d.main and d.local_rank == 0:
        results = both()
    distributed.barrier(d)
    return results or both()


def _log_stage(s: StageResult) -> None:
    console.log(f"{s.name}: {'reused' if s.reused else 'built'} {s.path}")


class RunData:
    """The run's tokenizer and data as the trainer reads them: the start phase's now, a later
    phase's when the loop reaches it (`open_phase`, built when missing as at the start of a
    run). `stages` lists every stage the run used, in order, for the summary."""

    def __init__(self, tokenizer: StageResult, data: StageResult, start: Phase, d: distributed.Dist) -> None:
        self.d, self.stages = d, [tokenizer, data]
        for s in self.stages:
            _log_stage(s)
        self.tokenizer_dir, self.data_dir = tokenizer.path, data.path
        self.tok = load_tokenizer(tokenizer.path)
        splits = load_data(data.path)
        self.hashes = provenance.inputs_sha256(tokenizer.path, data.path)
        self.start = PhaseData(PretrainDataset(splits["train"]), PretrainDataset(splits["validation"]),
                               len(splits["train"]), len(splits["validation"]),
                               PretrainCollator(self.tok, start.recipe.data, start.recipe.seed, rtd=_rtd(start.recipe)),
                               self.hashes["data_sha256"])

    def open_phase(self, ph: Phase) -> PhaseData:
        _, built = _stages(ph.recipe, self.d)
        stage = stage_name(built, ph)
        self.stages.append(stage)
        _log_stage(stage)
        splits = load_data(stage.path)
        collate = PretrainCollator(self.tok, ph.recipe.data, ph.recipe.seed, rtd=_rtd(ph.recipe))
        return PhaseData(PretrainDataset(splits["train"]), PretrainDataset(splits["validation"]), len(splits["train"]),
                         len(splits["validation"]), collate,
                         provenance.content_sha256(stage.path, ["*.arrow"]))


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
    """Check, load the stages, build the model, then train (or find the run already complete);
    the result is put together once, from what training returned."""
    check_precision(recipe.train.precision, d.device)
    check_report_to(recipe.train.report_to, "train.report_to")
    state = ResumeState.pick(recipe, resume, force)
    # before the model exists: a resume takes the checkpoint's count (the same bits), a new run the free cores
    use_threads(recipe.train.threads, "train.threads", d.device, recorded=state.threads)
    distributed.barrier(d)  # every process has checked before rank 0 changes anything
    if d.main and force:
        clear_run(recipe.out)
    t0 = time.monotonic()
    phases = plan(recipe)
    start_phase = phase_of(phases, state.step + 1)   # the stages it needs now
    tokenizer, built = _stages(start_phase.recipe, d)
    stage_seconds = time.monotonic() - t0
    data = RunData(tokenizer, stage_name(built, start_phase), start_phase, d)
    state.check_inputs(data.hashes, data.tokenizer_dir, data.data_dir, data.start.n_train,
                       same_phase=state.in_phase(phases, start_phase))
    if d.main:
        state.set_aside_damaged()

    memory.check_model_fits(parameter_counts(recipe.model, data.tok.vocab_size)["total"], d.device)  # before allocating it
    torch.manual_seed(recipe.seed)  # the same initial weights in every process and every run
    weights = continued.start_weights(recipe, recipe.out, resuming=state.resuming)
    model = weights.build(data.tok, data.tokenizer_dir)
    if _rtd(recipe):  # the built model gives the discriminator's config; the generator is sized from it
        torch.manual_seed(recipe.seed)
        model = build_rtd(cast(EncoderConfig, model.config), recipe, start=model)
    if d.main:
        recipe.out.mkdir(parents=True, exist_ok=True)
        recipe.save(recipe.out)
        ckpt_io.prune(recipe.out, recipe.train.keep_last)
    state.announce()
    if state.complete(recipe.train):
        out = _already_complete(recipe, state)
    else:
        out = _train(recipe, state, model, data, phases, weights)
    result = PretrainResult(
        recipe.out, step=out.step, max_steps=recipe.train.max_steps, tokens=out.tokens,
        seconds=time.monotonic() - t0, checkpoint=out.checkpoint, stages=data.stages, resumed_from=state.path,
        resumed_seconds=state.elapsed_s, last=out.last, last_val=out.last_val, interrupted=out.interrupted,
        train_seconds=out.train_seconds, stage_seconds=stage_seconds + out.stage_seconds,
        phases=phases if recipe.train.phases else [], init=weights.report)
    if d.main:
        rows = pretrain_summary_rows(result, recipe)
        rows[1:1] = weights.summary_rows(result.last_val, result.stages[0].summary)
        console.summary(f"pretrain {recipe.name}: {'interrupted' if result.interrupted else 'done'}", rows)
    return result


def _already_complete(recipe: Recipe, state: ResumeState) -> TrainResult:
    """A resume of a run that already reached max_steps (or spent max_time): nothing trains;
    the figures are the checkpoint's and metrics.jsonl's up to its step."""
    ck = state.checkpoint
    assert ck is not None  # ResumeState.complete is False without a checkpoint
    budget = budget_seconds(recipe.train)
    console.log(f"the run is already complete at step {ck.step:,} (train.max_steps {recipe.train.max_steps:,}"
                f"{f', train.max_time {recipe.train.max_time}' if budget is not None else ''})")
    final = recipe.out / "final"
    records = read_metrics(recipe.out / "metrics.jsonl", up_to_step=ck.step)
    return TrainResult(step=ck.step, tokens=state.tokens, seconds=0.0,
                       last=records[-1] if records else {},
                       last_val=next((r for r in reversed(records) if "val_loss" in r), {}),
                       checkpoint=final if (final / "config.json").is_file() else ck.path,
                       train_seconds=state.elapsed_s)


def _train(recipe: Recipe, state: ResumeState, model: torch.nn.Module, data: RunData, phases: list[Phase],
           weights: WeightsStart) -> TrainResult:
    """Train from the state's step to the end (or a signal); under torchrun in every process."""
    d = data.d
    inputs = TrainInputs(
        recipe=recipe, model=model, train_dataset=data.start.train_dataset, val_dataset=data.start.val_dataset,
        n_train=data.start.n_train, n_val=data.start.n_val, collate=data.start.collate,
        hf_save=lambda m, directory: (save_rtd if _rtd(recipe) else save_checkpoint)(m, directory,
                                                                                    tokenizer_dir=data.tok.path),
        objective=RTDObjective() if _rtd(recipe) else None,
        run_dir=recipe.out, dist=d, resume=state.checkpoint, phases=phases, inputs_sha256=data.hashes,
        open_phase=data.open_phase)
    trainer = Trainer(inputs)
    inputs.first_record = weights.first_record(trainer, d.main)
    console.log(f"model: {sum(p.numel() for p in model.parameters()):,} parameters on {d.device}"
                f"{f' x {d.world_size} processes' if d.enabled else ''}; batch {trainer.batch_size} = "
                f"{trainer.accum} x {trainer.micro} x {d.world_size}; {recipe.train.precision}")
    return trainer.fit()


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
