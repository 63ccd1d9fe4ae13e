"""The fine-tuning engine: one loop for every task (the interface is in `finetune/task.py`).

    run_task(task, recipe, checkpoint, final)      (called by `runner.finetune_task`)
        load the checkpoint with the task's head (a pretraining-only checkpoint starts the head
        fresh and says so) -> featurize train/dev/test -> fit (AdamW from the trainer's
        modules, warmup + linear decay, precision, a dev evaluation after every epoch, the best
        epoch's weights kept) -> test predictions -> `final/`: the best model as a Hugging Face
        directory, results.json, dev predictions, recipe.yaml, written under a temporary name
        and renamed when complete.

Deterministic for a given seed on a given device: the model's dropout draws from torch's global
RNG seeded here, the example order from its own generator.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from bertcli.config.bounds import MAX_STEPS
from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.core.fs import building
from bertcli.core.machine import use_threads
from bertcli.core.testhooks import pause_point
from bertcli.finetune import accumulate, auto_lr, ddp, outcome, tracking
from bertcli.finetune.classification.submission import write_json
from bertcli.finetune.progress import fit_progress
from bertcli.finetune.task import Features, Hyper, Split, Task
from bertcli.model.card import CARD, card_wanted, finetune_card
from bertcli.model.checkpoint import Model, load_checkpoint
from bertcli.model.finite import check_trained
from bertcli.model.heads import init_weights
from bertcli.tokenization.load import load_tokenizer
from bertcli.train.loop import StopFlag
from bertcli.train.optim import build_optimizer
from bertcli.train.precision import (
    StepGuard,
    autocast,
    check_precision,
    clip_and_check,
    make_grad_scaler,
    optimizer_step,
    resolve_device,
)
from bertcli.train.schedule import build_scheduler
from bertcli.train.trackers import check_report_to

if TYPE_CHECKING:
    from bertcli.config.finetune_sections import FinetuneConfig
    from bertcli.config.recipe import Recipe
    from bertcli.finetune.distill.teacher import Teacher
    from bertcli.model.checkpoint import LoadReport
    from bertcli.tokenization.load import TokenizerInfo
    from bertcli.train.distributed import Dist


@dataclass
class FitResult:
    best_epoch: int                                      # 1-based
    best_score: float | None                             # None: no dev set scored (embed without --dev)
    dev_metrics: dict[str, dict[str, float]]             # of the best epoch, by dev split name
    history: list[dict] = field(default_factory=list)    # one entry per evaluation
    steps: int = 0
    train_loss: float | None = None                      # of the kept epoch (finetune.select's tie rule)
    interrupted: int | None = None                       # the signal that stopped the run early
    total_steps: int = 0


def schedule_lengths(n_train: int, hyper: Hyper) -> tuple[int, int, int]:
    """(steps per epoch, total steps, warmup steps); fractional epochs round up to a whole step.
    The total depends on the data: epochs within their own bound can still ask for more steps
    than a run counts (MAX_STEPS), so it is checked here, where the data has just been read."""
    per_epoch = math.ceil(n_train / hyper.batch_size)
    if hyper.epochs * per_epoch > MAX_STEPS:
        largest = MAX_STEPS / per_epoch
        raise UserError(f"finetune.epochs (--epochs) {hyper.epochs:g} over {per_epoch:,} batches per epoch is "
                        f"{hyper.epochs * per_epoch:.4g} optimizer steps, more than the {MAX_STEPS:,} a run can count",
                        fix=f"give --epochs (finetune.epochs) at most {largest:.6g} for this data, or a larger "
                            f"--batch-size")
    total = max(1, math.ceil(hyper.epochs * per_epoch))
    return per_epoch, total, math.ceil(hyper.warmup_ratio * total)


class StepsCounted(Exception):
    """What `run_task` raises inside `counting_steps()`, once the run's data are read and checked
    and before anything is loaded: the optimizer steps the run will take over its training
    examples (a task that cuts long examples into windows, SQuAD's or a tagger's, takes a few
    more). Nothing was trained or written."""

    def __init__(self, steps: int, examples: int) -> None:
        super().__init__(f"{steps:,} optimizer steps over {examples:,} training examples")
        self.steps, self.examples = steps, examples


_COUNTING: ContextVar[bool] = ContextVar("bertcli_counting_steps", default=False)


@contextlib.contextmanager
def counting_steps() -> Iterator[None]:
    """Inside it, `run_task` counts its steps (raises StepsCounted) instead of training: how a
    sweep states its cost before any work, through the command's own run (the same flags, data
    and checks as the run it stands for)."""
    token = _COUNTING.set(True)
    try:
        yield
    finally:
        _COUNTING.reset(token)


# ------------------------------------------------------------------------------------ batches
def collate(data: Features, index: np.ndarray, pad_id: int, multiple: int = 8) -> dict[str, torch.Tensor]:
    """Batch of the features `index`, right-padded to the longest rounded up to `multiple`.

    input_ids, token_type_ids, attention_mask: LongTensor [B, T]; each per-token array [B, T]
    (padding -100, the ignore index); each per-feature array [B, ...]; index [B].
    """
    starts, ends = data.offsets[index], data.offsets[index + 1]
    longest = int((ends - starts).max(initial=0))        # 0 for an empty index (a rank's empty shard)
    width = -(-longest // multiple) * multiple
    B = len(index)
    ids = np.full((B, width), pad_id, dtype=np.int64)
    types = np.zeros((B, width), dtype=np.int64)
    mask = np.zeros((B, width), dtype=np.int64)
    tokens = {k: np.full((B, width), -100, dtype=np.int64) for k in data.per_token}
    for row, (s, e) in enumerate(zip(starts, ends)):
        n = e - s
        ids[row, :n] = data.ids[s:e]
        types[row, :n] = data.types[s:e]
        mask[row, :n] = 1
        for k, flat in data.per_token.items():
            tokens[k][row, :n] = flat[s:e]
    batch = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(types),
             "attention_mask": torch.from_numpy(mask), "index": torch.from_numpy(np.asarray(index, dtype=np.int64))}
    batch.update({k: torch.from_numpy(v) for k, v in tokens.items()})
    batch.update({k: torch.from_numpy(np.ascontiguousarray(v[index])) for k, v in data.per_feature.items()})
    return batch


def eval_batches(data: Features, batch_size: int) -> list[np.ndarray]:
    """Feature indices in batches of similar length (less padding); results are put back in
    order through these indices."""
    order = np.argsort(data.lengths, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def _to(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@torch.no_grad()
def check_outputs(model: nn.Module, task: Task, train: Features, devs: dict, pad_id: int, cfg: FinetuneConfig,
                  device: torch.device) -> None:
    """Before saving: the trained model's outputs on a held-back batch (the first of the first
    non-empty dev split; the first training batch when there is none) are finite, else the run
    diverged (errors.Diverged naming the learning rate) and nothing is presented as a result."""
    data = next((feats for _, feats in devs.values() if len(feats)), task.check_features(train))
    if not len(data):
        return
    was_training = model.training
    model.eval()
    batch = _to(collate(data, eval_batches(data, cfg.eval_batch_size)[0], pad_id), device)
    with autocast(cfg.precision, device):
        outputs = task.forward(model, batch, train=False)
    model.train(was_training)
    # masked: a task's forward may put -inf where no answer can be (SQuAD's padding)
    check_trained(outputs, f"fine-tuning {task.name}", task.hyper.learning_rate, "--lr, finetune.learning_rate",
                  masked=True)


# ------------------------------------------------------------------------------------ loop
@torch.no_grad()
def predict(model: nn.Module, task: Task, split: Split, data: Features, pad_id: int, batch_size: int,
            device: torch.device, precision: str, d: Dist | None = None) -> object:
    """The task's predictions for `split` (one per example, in order). Under torchrun (`d`) each
    rank predicts every world_size-th batch and all ranks get the gathered rows."""
    was_training = model.training
    model.eval()
    rows: dict[int, object] = {}
    step = 1 if d is None else d.world_size
    for index in eval_batches(data, batch_size)[0 if d is None else d.rank::step]:
        batch = _to(collate(data, index, pad_id), device)
        with autocast(precision, device):
            outputs = task.forward(model, batch, train=False)
        for i, row in zip(index, task.collect(outputs, batch)):
            rows[int(i)] = row
    model.train(was_training)
    collected = list(rows[i] for i in range(len(data))) if d is None else ddp.gather_rows(d, rows, len(data))
    return task.decode(split, data, collected)


def evaluate_devs(model: nn.Module, task: Task, devs: dict, pad_id: int, batch_size: int, device: torch.device,
                  precision: str, d: Dist | None = None) -> dict:
    """{dev split name: metrics} over every dev split (`devs`: name -> (split, features))."""
    return {name: task.evaluate(split, predict(model, task, split, feats, pad_id, batch_size, device, precision, d))
            for name, (split, feats) in devs.items()}


def fit(model: Model, task: Task, train: Features, devs: dict, cfg: FinetuneConfig, seed: int, device: torch.device,
        pad_id: int, teacher: Teacher | None = None, d: Dist | None = None,
        log: Callable[[dict], None] | None = None) -> FitResult:
    """Train `model` in place; on return it holds the weights of the best dev epoch. `teacher`
    (distillation, bertcli.finetune.distill.teacher.Teacher): its `loss(task, outputs, batch)`
    replaces the task's loss, and its own parameters (projections) train with the model's.
    `d` (under torchrun, finetune/ddp.py): each rank trains on its shard of every global batch.
    `log` gets a record per step (loss, lr) and per epoch (train_loss, dev_<split>_<metric>)."""
    d = d if d is not None and d.enabled else None
    hyper = task.hyper
    # dropout: each rank its own masks under torchrun (Dist.dropout_seed); alone, the run's seed.
    # The example order is every rank's, from order_rng.
    torch.manual_seed(seed if d is None else d.dropout_seed(seed))
    order_rng = torch.Generator().manual_seed(seed)
    model.to(device)

    def train_mode() -> None:
        # A frozen encoder computes features as at inference (no dropout inside it); the
        # head's own dropout still applies.
        model.train()
        if cfg.freeze_encoder:
            model.encoder.eval()

    train_mode()
    if isinstance(hyper.learning_rate, str):      # "auto" from a caller that skipped run_task
        choose_learning_rate(task, model)
    opt = build_optimizer(model, "adamw", hyper.learning_rate, (cfg.beta1, cfg.beta2), cfg.eps,
                          hyper.weight_decay, device)
    extra = [] if teacher is None else teacher.attach(opt, device)  # before the scheduler sets each group's lr
    per_epoch, total, warmup = schedule_lengths(len(train), hyper)
    sched = build_scheduler(opt, warmup, total, "linear")
    scaler = make_grad_scaler(cfg.precision, device)
    guard = StepGuard(max_bad_steps=20, what=f"fine-tuning {task.name}")
    params = [p for p in model.parameters() if p.requires_grad] + extra
    def batch_of(index: np.ndarray) -> dict:
        return collate(train, index, pad_id)

    micro = accumulate.choose(task, model, train, cfg, hyper.batch_size, batch_of, device, d, teacher, opt)

    best: FitResult | None = None
    best_state: dict[str, torch.Tensor] | None = None
    history: list[dict] = []
    step, epoch = 0, 0
    select = cfg.select
    agreed: list[int] = []      # under torchrun: a stop every rank has seen (the step's all-reduce)

    def halted() -> bool:       # alone, a signal stops at once; under torchrun, only once all ranks agree
        return stop.signum is not None if d is None else bool(agreed)

    with StopFlag() as stop, fit_progress(f"fine-tuning {task.name}", total, hyper.epochs) as bar:
        while step < total and not halted():
            epoch += 1
            perm = torch.randperm(len(train), generator=order_rng).numpy()
            losses = []
            for start in range(0, len(perm), hyper.batch_size):
                pause_point(f"finetune-step-{step + 1}", until=lambda: stop.signum is not None)
                if step >= total or halted():
                    break
                if d is None and micro is None:
                    batch = _to(collate(train, perm[start:start + hyper.batch_size], pad_id), device)
                    with autocast(cfg.precision, device):
                        outputs = task.forward(model, batch, train=True)
                    loss = task.loss(outputs, batch) if teacher is None else teacher.loss(task, outputs, batch)
                    opt.zero_grad(set_to_none=True)
                    scaler.scale(loss).backward()
                    value = float(loss.detach())
                else:
                    if micro is not None:    # gradient accumulation (finetune/accumulate.py), alone or under torchrun
                        value, stopped = accumulate.backward(model, task, batch_of, perm[start:start + hyper.batch_size],
                                                             cfg, device, opt, scaler, params, micro, d,
                                                             stop.signum is not None)
                    else:
                        assert d is not None
                        value, stopped = ddp_backward(model, task, train, perm[start:start + hyper.batch_size], pad_id,
                                                      cfg, device, opt, scaler, params, d, stop.signum is not None,
                                                      teacher)
                    if stopped:              # another rank was signalled: stop here too, at the same step
                        stop.signum = stop.signum or signal.SIGTERM
                        agreed.append(stop.signum)
                        break
                norm = clip_and_check(params, cfg.grad_clip, scaler, opt)
                if optimizer_step(opt, scaler, guard, norm, value, step=step + 1):
                    losses.append(value)
                lr_now = float(sched.get_last_lr()[0])
                sched.step()
                step += 1
                bar.advance(1, loss=value, lr=lr_now, epoch=epoch)
                if log is not None:
                    log({"step": step, "epoch": epoch, "loss": value, "lr": lr_now})
            if halted():
                break                        # a part-epoch is neither evaluated nor kept
            dev = evaluate_devs(model, task, devs, pad_id, cfg.eval_batch_size, device, cfg.precision, d)
            train_mode()
            score = task.score(dev)
            if log is not None:
                log({"step": step, "epoch": epoch, "train_loss": float(np.mean(losses)) if losses else None,
                     **{f"dev_{n}_{k}": v for n, m in dev.items() for k, v in m.items() if isinstance(v, (int, float))}})
            history.append({"epoch": epoch, "step": step, "train_loss": float(np.mean(losses)) if losses else None,
                            "dev": dev, "score": score})
            is_best = outcome.keeps(select, score, history[-1]["train_loss"], None if best is None else best.best_score,
                                    None if best is None else best.train_loss)
            console.log(f"{task.name} epoch {epoch}: loss {history[-1]['train_loss'] or float('nan'):.4f}, "
                        f"{task.format(dev)}" + (" (best)" if is_best else ""))
            if is_best:
                best = FitResult(epoch, score, dev, train_loss=history[-1]["train_loss"])
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    if best is None or best_state is None:
        assert stop.signum is not None, "at least one epoch ran"
        console.log(f"stopped by {outcome.signal_name(stop.signum)} at step {step:,}/{total:,}, before the first "
                    f"epoch ended: nothing was kept (no epoch had been evaluated)")
        raise outcome.Interrupted(stop.signum)
    model.load_state_dict(best_state)
    # a signal after the last step (under torchrun: not agreed by every rank) does not mark the run
    best.history, best.steps, best.total_steps = history, step, total
    best.interrupted = stop.signum if d is None or agreed else None
    return best


def ddp_backward(model: nn.Module, task: Task, train: Features, index: np.ndarray, pad_id: int,
                 cfg: FinetuneConfig, device: torch.device, opt, scaler, params: list, d: Dist,
                 stopping: bool, teacher: Teacher | None = None) -> tuple[float, bool]:
    """One global batch under torchrun: this rank's shard's loss, summed over its labelled units
    and divided by the global count (distillation: each term by its own count), backward,
    gradients summed over ranks (the one-process mean's gradient). A task whose loss spans the
    global batch (`Task.whole_batch_loss`: embed) computes the one-process loss on every rank,
    its gradient reaching the local shard, so it is neither weighted nor summed (and every rank
    runs the forward, whose gather is a collective, an empty shard too). (global mean loss,
    whether any rank is stopping); nothing is computed when one is."""
    local = ddp.shard(index, d)
    whole = task.whole_batch_loss
    batch = _to(collate(train, local, pad_id), device) if len(local) or whole else None
    if batch is None:
        units = [0] if teacher is None else [0, 0]
    else:
        units = [task.loss_units(batch)] if teacher is None else teacher.loss_units(task, batch)
    totals, stopped = ddp.sync_step(d, units, stopping, device)
    if stopped:
        return float("nan"), True
    opt.zero_grad(set_to_none=True)
    loss = torch.zeros((), device=device)
    if batch is not None and (whole or any(units)):
        shares = [u / t if t else 0.0 for u, t in zip(units, totals)]    # the shard's sum / the global count
        with autocast(cfg.precision, device):
            outputs = task.forward(model, batch, train=True)
        if whole:
            loss = task.loss(outputs, batch)
        elif teacher is not None:
            loss = teacher.loss(task, outputs, batch, shares)
        else:
            loss = task.loss(outputs, batch) * shares[0]
        scaler.scale(loss).backward()
    # the value logged is summed over ranks: a whole-batch loss is the same on each, so each adds 1/N of it
    return ddp.reduce_grads(d, params, loss / d.world_size if whole else loss), False


# ------------------------------------------------------------------------------------ one run
def check_fit(model: Model, tok: TokenizerInfo, max_seq_length: int, checkpoint: Path) -> None:
    """The tokenizer's ids and the sequence length must fit the model's embeddings."""
    c = model.config
    if tok.vocab_size > c.vocab_size:
        raise UserError(f"the tokenizer of {checkpoint} has {tok.vocab_size:,} tokens but the model only "
                        f"{c.vocab_size:,} embeddings", where=str(checkpoint),
                        fix="the tokenizer files do not belong to these weights")
    usable = c.max_position_embeddings - c.position_offset
    if max_seq_length > usable:
        raise UserError(f"finetune.max_seq_length {max_seq_length} exceeds the {usable} positions of {checkpoint}",
                        fix=f"--set finetune.max_seq_length={usable} (or lower)")


def load_model(task: Task, checkpoint: Path, cfg: FinetuneConfig, seed: int,
               init: str = "pretrained") -> tuple[Model, LoadReport]:
    """The checkpoint with the task's head; (model, LoadReport)."""
    torch.manual_seed(seed)            # the fresh head's initialization
    model, report = load_checkpoint(checkpoint, head=task.head, dropout=cfg.dropout, **task.model_kwargs)
    if report.fresh:                   # never encoder tensors: a missing one is a UserError
        console.log(f"{task.name}: the {task.head} head starts fresh ({checkpoint} has none for this task)")
    if init == "random":
        init_weights(model)
    if cfg.freeze_encoder:
        for name, p in model.encoder.named_parameters():
            p.requires_grad_(name.startswith("pooler."))
    return model, report


def run_task(task: Task, recipe: Recipe, checkpoint: Path, final: Path, init: str = "pretrained",
             teacher: Teacher | None = None) -> dict:
    """The run (`_run_task`) with its records and trackers (finetune/tracking.py), whose tracker
    runs end however it ends."""
    with tracking.RunLog(final) as log:
        return _run_task(task, recipe, checkpoint, final, init, teacher, log)


def _run_task(task: Task, recipe: Recipe, checkpoint: Path, final: Path, init: str, teacher: Teacher | None,
              log: tracking.RunLog) -> dict:
    """Fine-tune, evaluate and predict one task whose splits are read (`task.data`); returns its
    results.json content. `final` is the model directory to write (the runner has checked it).
    `init="random"` re-initializes the encoder (same architecture, same seed): the baseline that
    shows what pretraining is worth. `teacher` (distillation): `checkpoint` is the teacher's; the
    model trained is the teacher's student, taught by its outputs (see `fit`)."""
    cfg, hyper, data = recipe.finetune, task.hyper, task.data
    device = resolve_device(cfg.device, where="finetune.device")
    check_precision(cfg.precision, device)        # before tokenizing, not at the first batch
    check_report_to(cfg.report_to, "finetune.report_to")
    if _COUNTING.get():
        raise StepsCounted(schedule_lengths(len(data.train), hyper)[1], len(data.train))
    ddp.check_batch(hyper.batch_size)   # every rank, before joining
    if teacher is not None:
        teacher.check_distributed(ddp.world_size())
    # a sweep's runs (finetune/sweep.py) all use the count it chose and recorded, as a resumed
    # pretraining run uses its checkpoint's: `auto` would follow the machine's load from run to run
    use_threads(cfg.threads, "finetune.threads", device, recorded=recipe.sweep_threads, recorded_by="sweep")
    tok = load_tokenizer(checkpoint)
    if teacher is None:
        model, report = load_model(task, checkpoint, cfg, recipe.seed, init)
    else:
        model, report = teacher.student(task, cfg, recipe.seed)
    check_fit(model, tok, hyper.max_seq_length, checkpoint)
    lr = choose_learning_rate(task, model)
    zero_types = model.config.type_vocab_size < 2

    train = task.featurize(data.train, tok, zero_types)
    devs = {s.name: (s, task.featurize(s, tok, zero_types)) for s in data.dev}
    tests = {s.name: (s, task.featurize(s, tok, zero_types)) for s in data.test}
    per_epoch, total, warmup = schedule_lengths(len(train), hyper)  # checked before the teacher's pass

    d = ddp.join(cfg.device) if ddp.world_size() > 1 else None   # after every input check of this rank
    if d is not None:
        device = d.device
    if teacher is not None:                        # its logits sharded over the ranks and gathered
        with ddp.peers(d):
            teacher.prepare(task, train, devs, tok.pad_id, cfg, device, d)
    windows = f" ({len(train):,} windows)" if len(train) != len(data.train) else ""
    console.log(f"{task.describe()}: {len(data.train):,} train examples{windows}, {total:,} steps "
                f"({per_epoch:,}/epoch, {warmup:,} warmup), lr {hyper.learning_rate:g}, batch {hyper.batch_size}, "
                f"{hyper.max_seq_length} tokens, device {device}")
    group = tracking.sweep_group()          # one tracker run per (lr, seed), grouped under its sweep
    name = f"{group or recipe.name + '-' + task.name}-lr{hyper.learning_rate:g}-seed{recipe.seed}"
    log.start(cfg.report_to if d is None or d.main else "none",   # only rank 0 logs
              {**recipe.to_dict(), "name": name, "group": group, "output_dir": str(final)})
    start = time.monotonic()
    with ddp.peers(d):
        result = fit(model, task, train, devs, cfg, recipe.seed, device, tok.pad_id, teacher, d, log=log)
    seconds = time.monotonic() - start
    check_outputs(model, task, train, devs, tok.pad_id, cfg, device)
    chance = outcome.warn_if_chance(task.name, result.history, baselines(task, devs), hyper.learning_rate, lr.source)

    def run(split: Split, feats: Features) -> object:      # the task's predictions of the split
        return predict(model, task, split, feats, tok.pad_id, cfg.eval_batch_size, device, cfg.precision, d)

    final = Path(final)
    with ddp.output_dir(d, lambda: building(final, recipe)) as tmp:   # only rank 0 leaves files
        if cfg.save_model and (d is None or d.main):
            task.save_model(model, tmp, checkpoint)
        for split, feats in devs.values():
            task.write_predictions(split, run(split, feats), tmp, "dev")
        written, test_metrics = [], {}
        for split, feats in tests.values():
            predictions = run(split, feats)
            written += task.write_predictions(split, predictions, tmp, "test")
            if task.has_gold(split):           # scored as run_glue / run_ner score a labelled test set
                test_metrics[split.name] = task.evaluate(split, predictions)
        # listed by where they are once the folder is renamed (a task may write elsewhere)
        test_files = [str(final / Path(p).relative_to(tmp)) if Path(p).is_relative_to(tmp) else str(p)
                      for p in written]
        results = {
            "task": task.name, "head": task.head,
            "dev": result.dev_metrics, "score": result.best_score,
            "best_epoch": result.best_epoch, "history": result.history,
            "hyperparameters": hyper.values, "seed": recipe.seed,
            "checkpoint": str(checkpoint), "init": init, "fresh_parameters": list(report.fresh),
            "data": {"layout": data.layout, "source": data.source, "train": len(data.train),
                     **{f"dev_{s.name}": len(s) for s in data.dev}, **{f"test_{s.name}": len(s) for s in data.test},
                     **data.facts},
            "steps": result.steps, "train_seconds": round(seconds, 1), **task.test_record(test_files),
            **task.results(),
            **run_facts(cfg, lr, result, test_metrics, chance),
            **({} if teacher is None else teacher.results(model, tmp, result)),
        }
        write_json(tmp / "results.json", results)
        log.close(tmp, {"score": result.best_score, "best_epoch": result.best_epoch})  # metrics.jsonl, trackers
        if cfg.save_model and card_wanted(final):
            (tmp / CARD).write_text(finetune_card(results, recipe.language, seconds, str(device)), encoding="utf-8")
    if result.interrupted is not None:
        console.log(f"stopped by {outcome.signal_name(result.interrupted)} at step {result.steps:,}/"
                    f"{result.total_steps:,}: kept epoch {result.best_epoch} ({_kept_words(result, cfg)}) in {final}"
                    + ("" if cfg.save_model else " (results only: "
                    "finetune.save_model is false)") + "; results.json records the stop")
        raise outcome.Interrupted(result.interrupted, results)
    return results


def _kept_words(result: FitResult, cfg: FinetuneConfig) -> str:
    """Why the stopped run's kept epoch is the one kept: its dev score and the rule, or no dev set."""
    n = len(result.history)
    if result.best_score is None:
        return f"no dev set: the last of the {n} trained"
    rule = "best" if getattr(cfg, "select", "best") == "best" else "last"
    return f"dev score {result.best_score:.4f}, the {rule} of the {n} evaluated"


# ------------------------------------------------------------------------------------ run facts
def choose_learning_rate(task: Task, model: Model) -> auto_lr.LrChoice:
    """`finetune.learning_rate: auto` resolved from the model's size (auto_lr), into the task's
    settings; said in the log."""
    choice = auto_lr.choose(task.hyper.learning_rate, model.config, task.name)
    task.hyper.learning_rate = choice.value
    task.hyper.values["learning_rate"] = choice.value
    if choice.source == "auto":
        console.log(f"{task.name}: learning rate {choice.value:g} (finetune.learning_rate: auto; {choice.reason}); "
                    "--lr sets another")
    return choice


def baselines(task: Task, devs: dict) -> dict[str, tuple[str, float, int]]:
    """dev split -> (main metric, its value for the task's majority-class baseline, examples);
    empty for a task without one (regression, SQuAD)."""
    out = {}
    for name, (split, _) in devs.items():
        constant = task.baseline(split)
        if constant is None:
            continue
        metrics = task.evaluate(split, constant)
        metric, n = task.chance_metric(split)
        metric = metric or next(iter(metrics))
        out[name] = (metric, float(metrics[metric]), n)
    return out


def run_facts(cfg: FinetuneConfig, lr: auto_lr.LrChoice, result: FitResult, test_metrics: dict,
              chance: dict | None) -> dict:
    """results.json's entries for the rate, the kept epoch's rule, the scored test splits, a
    chance-level finding and a stop by signal."""
    facts: dict = {"learning_rate": lr.record(), "select": cfg.select}
    if test_metrics:
        facts["test"] = test_metrics
    if chance is not None:
        facts["chance"] = chance
    if result.interrupted is not None:
        facts["interrupted"] = {"signal": outcome.signal_name(result.interrupted), "step": result.steps,
                                "total_steps": result.total_steps}
    return facts
