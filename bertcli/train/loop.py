"""The pretraining loop: gradient accumulation to the global batch, MLM (+ NSP / SOP) losses
weighted so that accumulation and data parallelism equal one big batch, clipping, the
non-finite guard, logging, validation, checkpoints and exact resume.

Loss of one optimizer step over a global batch with M masked tokens and S sequences:
    loss = sum(CE over masked tokens) / M + sum(CE over pair labels) / S
Each micro-batch contributes its sums divided by the *global* counts (known before the first
forward: the step's micro-batches are fetched first and their counts all-reduced), times the
number of processes because DDP averages gradients.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from bertcli.config.phases import Phase, budget_seconds, phase_of, plan
from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.core.testhooks import pause_point
from bertcli.model.card import pretrain_card
from bertcli.model.finite import check_trained
from bertcli.train import checkpoint as ckpt_io
from bertcli.train import memory
from bertcli.train.compile import compile_blocks, compile_layers
from bertcli.train.distributed import Dist, all_gather_json, all_reduce_sum
from bertcli.train.heap import release_free_memory
from bertcli.train.metrics import LiveView, MetricsLog
from bertcli.train.optim import build_optimizer
from bertcli.train.phases import PhaseLR, budget_multiplier, progress, state_value
from bertcli.train.precision import StepGuard, autocast, clip_and_check, make_grad_scaler, optimizer_step
from bertcli.train.sampler import EvalBatchSampler, TrainBatchSampler, split_batch
from bertcli.train.schedule import build_scheduler
from bertcli.train.trackers import Trackers, report_names

if TYPE_CHECKING:  # bertcli.model is heavy; only its class is needed, for the checker
    from bertcli.model.heads import PreTrainingModel

# Interval sums kept per process between log steps (all-reduced when logged / checkpointed).
SUMS = ("mlm_loss", "mlm_correct", "masked", "pair_loss", "pair_correct", "sequences", "tokens")


@dataclass
class TrainInputs:
    """What the loop needs from the earlier stages (kept abstract so tests can pass stand-ins)."""

    recipe: Any                      # bertcli.config.recipe.Recipe
    model: torch.nn.Module           # PreTrainingModel on the CPU, initialized
    train_dataset: Any               # torch Dataset, items (epoch, index) -> row
    val_dataset: Any | None
    n_train: int
    n_val: int
    collate: Callable                # rows -> dict of tensors (PretrainCollator)
    hf_save: Callable                # (model, directory) -> writes the Hugging Face part
    run_dir: Path
    dist: Dist = field(default_factory=Dist)
    resume: ckpt_io.Checkpoint | None = None
    inputs_sha256: dict = field(default_factory=dict)  # tokenizer_sha256 / data_sha256, recorded in checkpoints
    # Multi-phase runs: the plan (None: bertcli.config.phases.plan(recipe)); the data above is the
    # phase the run starts in, `open_phase(phase) -> PhaseData` gives a later phase's.
    phases: list[Phase] | None = None
    open_phase: Callable[[Phase], PhaseData] | None = None
    # Continued pretraining: the step-0 validation of the loaded weights, written first to a new metrics.jsonl.
    first_record: dict | None = None
    # train.objective: rtd: an RTDObjective (bertcli.train.objective) computes the losses; None: MLM.
    objective: Any = None


@dataclass
class PhaseData:
    """One phase's data as the loop reads it (the TrainInputs fields of the same names)."""

    train_dataset: Any
    val_dataset: Any | None
    n_train: int
    n_val: int
    collate: Callable
    data_sha256: str | None = None      # recorded in checkpoints (bertcli.train.provenance)


# The trainer state keys resuming reads (Trainer._load); a checkpoint lacking one is damaged.
STATE_KEYS = ckpt_io.TrainState.required_keys()


@dataclass
class TrainResult:
    step: int
    tokens: int
    seconds: float
    last: dict = field(default_factory=dict)        # last logged training record
    last_val: dict = field(default_factory=dict)    # last validation metrics
    checkpoint: Path | None = None
    interrupted: int | None = None                  # signal number when stopped by a signal
    train_seconds: float = 0.0                      # training time of the run (earlier runs included)
    stage_seconds: float = 0.0                      # building phases' data during this run (not counted)


class StopFlag:
    """SIGINT / SIGTERM ask the loop to save a checkpoint and stop after the current step; a
    second SIGINT stops at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}  # signal -> the handler it had before

    def __enter__(self) -> StopFlag:
        for s in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: no handlers
                self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc: object) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def _ignore_stop_signals(_worker_id: int) -> None:
    # Ctrl-C, and SIGTERM from schedulers (SLURM, docker stop), reach the whole process group: the
    # workers keep serving until the main process has saved its checkpoint and shuts them down
    # (they still exit by themselves when the main process dies).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Trainer:
    def __init__(self, inp: TrainInputs):
        self.inp, self.r, self.cfg, self.d = inp, inp.recipe, inp.recipe.train, inp.dist
        cfg, d = self.cfg, self.d
        self.device = d.device
        self.pair = inp.recipe.data.objective != "none"
        self.objective = inp.objective
        # a PreTrainingModel (tests pass stand-ins with the same attributes): its .config is read
        self.model = cast("PreTrainingModel", inp.model.to(self.device))
        self.optimizer = build_optimizer(self.model, cfg.optimizer, cfg.learning_rate, (cfg.beta1, cfg.beta2),
                                         cfg.eps, cfg.weight_decay, self.device)
        self.phases = inp.phases or plan(inp.recipe)
        self.phased = bool(cfg.phases)
        for ph in self.phases:  # every phase's batch fits the processes: known now, not hours later
            try:
                micro = ph.recipe.train.micro_batch_size
                split_batch(ph.recipe.train.batch_size, d.world_size, None if micro == "auto" else micro)
            except UserError as e:
                if not self.phased:
                    raise
                raise UserError(f"train.phases[{ph.index}] ({ph.name}): {e.what}", fix=f"{e.fix} (its batch_size / "
                                f"micro_batch_size: train.phases[{ph.index}].*)") from None
        if self.phased:  # each update follows the schedule of the phase that runs it
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, PhaseLR(self.phases, cfg.learning_rate))
        else:
            self.scheduler = build_scheduler(self.optimizer, cfg.warmup_steps, cfg.max_steps, cfg.schedule,
                                             cfg.power, cfg.min_lr_ratio, cfg.decay_fraction)
        # Time budget: `elapsed` counts the training seconds of every run of this training (the
        # checkpoint carries them), not the time spent building a phase's data. The clock is an
        # attribute so that tests can drive the schedule with a fake one.
        self.budget = budget_seconds(cfg)
        self.clock = time.monotonic
        self.elapsed, self.elapsed_before, self.excluded = 0.0, 0.0, 0.0
        self.scaler = make_grad_scaler(cfg.precision, self.device)
        self.autocast = lambda: autocast(cfg.precision, self.device)
        self.guard = StepGuard(cfg.max_bad_steps)
        self.step, self.consumed, self.tokens, self.overflows = 0, 0, 0, 0
        self.sums = torch.zeros(len(SUMS), dtype=torch.float64, device=self.device)
        self.majority: float | None = None
        rng = None
        if inp.resume is not None:
            rng = self._load(inp.resume)
        else:
            # Dropout differs between processes (each sees other data); init is already done.
            torch.manual_seed(d.dropout_seed(inp.recipe.seed))
        self.rng_to_restore = rng
        self.phase: Phase              # both set by _enter_phase, next
        self.data: PhaseData
        self._enter_phase(phase_of(self.phases, self.step + 1),
                          PhaseData(inp.train_dataset, inp.val_dataset, inp.n_train, inp.n_val, inp.collate,
                                    inp.inputs_sha256.get("data_sha256")))
        if inp.resume is not None:
            self._check_resumed_phase(inp.resume.state)
        if self.budget is not None:
            self._set_budget_lr()
        # the model, DDP around it, or torch.compile's wrapper (typed as a plain callable): Any,
        # since .no_sync() (DDP only) is reached through the compile wrapper's attribute forwarding
        self.wrapped: Any = self.model
        if d.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.wrapped = DDP(self.model, device_ids=[self.device] if self.device.type == "cuda" else None)
        if compile_layers(cfg.compile, self.device):
            compile_blocks(self.model)

    # ------------------------------------------------------------------- micro-batch
    def _micro_batch(self, ph: Phase) -> tuple[int, int, int]:
        """(local batch, micro-batch, accumulation steps) of phase `ph` (the whole run when it has
        no phases): its train.micro_batch_size, or with `auto` the largest that fits the device's
        free memory at the phase's longest rows, from probe forward passes
        (bertcli.train.memory); a size or a model that cannot fit is a UserError here, before the
        phase's first step."""
        cfg, d = ph.recipe.train, self.d
        auto = cfg.micro_batch_size == "auto"
        local, requested, _ = split_batch(cfg.batch_size, d.world_size,
                                          None if cfg.micro_batch_size == "auto" else cfg.micro_batch_size)
        length = ph.recipe.data.max_seq_length
        available, source = memory.available_bytes(self.device)
        try:
            per_seq, fixed = memory.measure(lambda m: self._probe(m, length, ph.recipe.data), self.model)
        except torch.cuda.OutOfMemoryError:
            per_seq, fixed = float(available), 0.0        # not even the probe's 1 sequence fits
        static = memory.static_bytes(self.model) - memory.resident_bytes(self.model, self.optimizer)
        p = memory.plan(local, static, per_seq, fixed, available, source, None if auto else requested, length)
        micro = min(all_gather_json(d, p.micro))          # every process accumulates the same number
        if auto and d.main:
            console.log(f"train.micro_batch_size auto: {p.describe(local, length)}" +
                        (f"; {micro} to match the other processes" if micro != p.micro else ""))
        return split_batch(cfg.batch_size, d.world_size, micro)

    def _probe(self, m: int, length: int, dcfg=None) -> None:
        """A forward pass of m synthetic rows of `length` tokens, masked as the data section
        `dcfg` (default: the recipe's) would mask them."""
        V = self.model.config.vocab_size
        dcfg = dcfg or self.r.data
        k = max(1, min(length - 2, round(length * dcfg.mlm_probability), dcfg.max_predictions_per_seq or length))
        g = torch.Generator().manual_seed(0)
        rows = torch.arange(m).unsqueeze(1) * length                          # [m, 1]
        b = {"input_ids": torch.randint(0, V, (m, length), generator=g),
             "attention_mask": torch.ones(m, length, dtype=torch.long),
             "token_type_ids": torch.zeros(m, length, dtype=torch.long),
             "mlm_positions": (rows + torch.arange(1, k + 1)).reshape(-1),     # [m * k]
             "mlm_labels": torch.randint(0, V, (m * k,), generator=g),
             "pair_labels": torch.zeros(m, dtype=torch.long),
             "rtd_uniform": torch.rand(m * k, generator=g, dtype=torch.float64)}  # read by train.objective: rtd
        self._losses(self.model, self._to_device(b))                          # the graph is dropped unused

    # ------------------------------------------------------------------------- state
    def _state(self) -> ckpt_io.TrainState:
        sums = self.sums.clone()
        return ckpt_io.TrainState(
            step=self.step, consumed_samples=self.consumed, tokens=self.tokens,
            world_size=self.d.world_size, batch_size=self.batch_size, train_rows=self.data.n_train,
            bad_steps=self.guard.bad_steps, overflows=self.overflows,
            scheduler={k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"},
            scaler=self.scaler.state_dict() if self.scaler.is_enabled() else {},
            interval_sums=dict(zip(SUMS, sums.tolist())), majority_acc=self.majority,
            tokenizer_sha256=self.inp.inputs_sha256.get("tokenizer_sha256"), data_sha256=self.data.data_sha256,
            # the phase of the last update and the cursor into its data; the training time
            phase=self.phase.index, phase_name=self.phase.name, phase_start=self.phase.start,
            phase_samples=(self.step - self.phase.start) * self.batch_size, elapsed_s=self.elapsed,
            threads=torch.get_num_threads())

    def _load(self, ck: ckpt_io.Checkpoint) -> list[dict]:
        s = ck.state
        rng = ckpt_io.restore(ck, self.model, self.optimizer)
        sd = self.scheduler.state_dict()
        sd.update(s.scheduler)
        self.scheduler.load_state_dict(sd)
        # The next update's learning rate follows this run's schedule, not the one saved in the
        # optimizer state: max_steps may change on resume (the same value when it did not).
        for group, base, fn in zip(self.optimizer.param_groups, self.scheduler.base_lrs, self.scheduler.lr_lambdas):
            group["lr"] = base * fn(self.scheduler.last_epoch)
        if s.scaler:
            self.scaler.load_state_dict(s.scaler)
        self.step, self.consumed, self.tokens = int(s.step), int(s.consumed_samples), int(s.tokens)
        self.guard.bad_steps, self.overflows = int(s.bad_steps), int(s.overflows)
        self.majority = s.majority_acc
        self.elapsed = self.elapsed_before = float(s.elapsed_s)
        # The main process holds the interval sums of all processes; the others start from zero.
        if self.d.main:
            self.sums = torch.tensor([s.interval_sums[k] for k in SUMS], dtype=torch.float64, device=self.device)
        return rng

    def _save(self, path: Path) -> Path:
        sums = all_reduce_sum(self.d, self.sums.clone())
        state = self._state()
        state.interval_sums = dict(zip(SUMS, sums.tolist()))
        rng = all_gather_json(self.d, ckpt_io.capture_rng())
        if self.d.main:
            ckpt_io.save(path, model=self.model, hf_save=self.inp.hf_save, recipe=self.r, optimizer=self.optimizer,
                         state=state, rng=rng)
            ckpt_io.prune(self.inp.run_dir, self.cfg.keep_last)
        return path

    def _save_final(self, path: Path, results: dict) -> Path:
        if self.d.main:
            card = pretrain_card(self.r, self.step, self.tokens, self.elapsed, results, str(self.d.device))
            ckpt_io.save_model_only(path, model=self.model, hf_save=self.inp.hf_save, recipe=self.r, step=self.step,
                                    card=card)
        return path

    # -------------------------------------------------------------------------- data
    def _train_loader(self) -> DataLoader:
        # the cursor into this phase's data: the samples its steps so far consumed
        sampler = TrainBatchSampler(self.data.n_train, self.batch_size, self.micro, self.d.rank,
                                    self.d.world_size, self.r.seed,
                                    start_sample=(self.step - self.phase.start) * self.batch_size)
        workers = self.cfg.num_workers
        return DataLoader(self.data.train_dataset, batch_sampler=sampler, collate_fn=self.data.collate,
                          num_workers=workers, pin_memory=self.device.type == "cuda",
                          prefetch_factor=4 if workers else None, worker_init_fn=_ignore_stop_signals if workers else None,
                          # its own generator: creating the iterator must not draw from torch's global RNG
                          generator=torch.Generator().manual_seed(self.r.seed))

    def _to_device(self, batch: dict) -> dict:
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    # ------------------------------------------------------------------------ losses
    def _losses(self, model, b: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Summed (not averaged) MLM and pair losses of one micro-batch and their correct counts."""
        if self.objective is not None:   # RTD: the pair slot carries the discriminator's loss
            return self.objective.losses(model, b, self.autocast)
        with self.autocast():
            out = model(b["input_ids"], b["attention_mask"], b.get("token_type_ids"), b["mlm_positions"])
        # [M', V]: the masked positions' logits and rows up to a bucketed count, whose label -100
        # leaves them out of the loss and the accuracy (argmax is never -100): shapes repeat
        rows = getattr(out, "mlm_rows", None)                                  # None: a model without them
        logits = (out.mlm_logits if rows is None else rows).float()
        labels = b["mlm_labels"]                                               # [N]
        padded = F.pad(labels, (0, logits.shape[0] - labels.numel()), value=-100)  # [M']
        mlm_sum = F.cross_entropy(logits, padded, reduction="sum", ignore_index=-100)
        mlm_correct = (logits.argmax(-1) == padded).sum()
        zero = mlm_sum.new_zeros(())
        if self.pair and out.pair_logits is not None:
            pl = out.pair_logits.float()                                       # [B, 2]
            pair_sum = F.cross_entropy(pl, b["pair_labels"], reduction="sum")
            pair_correct = (pl.argmax(-1) == b["pair_labels"]).sum()
        else:
            pair_sum, pair_correct = zero, zero
        return mlm_sum, mlm_correct, pair_sum, pair_correct, labels

    # -------------------------------------------------------------------------- step
    def _train_step(self, batches: list[dict], stop: StopFlag) -> tuple[bool, bool]:
        """One optimizer step. Returns (applied, stop requested on any process)."""
        masked = sum(b["mlm_labels"].numel() for b in batches)
        seqs = sum(b["input_ids"].shape[0] for b in batches)
        tokens = sum(int(b["attention_mask"].sum()) for b in batches)
        counts = torch.tensor([masked, seqs, tokens, 1 if stop.signum else 0], dtype=torch.float64, device=self.device)
        all_reduce_sum(self.d, counts)
        g_masked, g_seqs = max(1.0, counts[0].item()), max(1.0, counts[1].item())
        scale_m, scale_s = self.d.world_size / g_masked, self.d.world_size / g_seqs
        if self.objective is not None:
            scale_s = self.objective.pair_scale(self.d.world_size, counts[2].item())
        step_sums = torch.zeros(len(SUMS), dtype=torch.float64, device=self.device)
        for i, b in enumerate(batches):
            b = self._to_device(b)
            sync = i == len(batches) - 1 or not self.d.enabled
            ctx = contextlib.nullcontext() if sync else self.wrapped.no_sync()
            with ctx:
                mlm_sum, mlm_correct, pair_sum, pair_correct, _ = self._losses(self.wrapped, b)
                loss = mlm_sum * scale_m + pair_sum * scale_s
                self.scaler.scale(loss).backward()
            step_sums += torch.stack([mlm_sum.detach().double(), mlm_correct.double(),
                                      mlm_sum.new_tensor(b["mlm_labels"].numel(), dtype=torch.float64),
                                      pair_sum.detach().double(), pair_correct.double(),
                                      mlm_sum.new_tensor(b["input_ids"].shape[0], dtype=torch.float64),
                                      b["attention_mask"].sum().double()])
        norm = clip_and_check(self.model.parameters(), self.cfg.grad_clip, self.scaler, self.optimizer)
        applied = optimizer_step(self.optimizer, self.scaler, self.guard, norm, step=self.step + 1)
        if not applied and self.scaler.is_enabled():
            self.overflows += 1
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if applied:
            self.sums += step_sums
        self.step += 1
        self.consumed += self.batch_size
        self.tokens += int(counts[2].item())
        return applied, counts[3].item() > 0

    def _summary(self, s: dict, prefix: str = "") -> dict:
        rec = _summarize(s, self.pair, prefix)
        return rec if self.objective is None else self.objective.summarize(s, rec, prefix)

    # -------------------------------------------------------------------------- eval
    @torch.no_grad()
    def validate(self) -> dict:
        if self.data.val_dataset is None or self.data.n_val == 0:
            return {}
        rows = None if self.cfg.eval_batches is None else self.cfg.eval_batches * self.batch_size
        sampler = EvalBatchSampler(self.data.n_val, self.micro, self.d.rank, self.d.world_size, rows)
        loader = DataLoader(self.data.val_dataset, batch_sampler=sampler, collate_fn=self.data.collate,
                            num_workers=0, generator=torch.Generator().manual_seed(0))
        self.model.eval()
        sums = torch.zeros(len(SUMS), dtype=torch.float64, device=self.device)
        counts = torch.zeros(self.model.config.vocab_size, dtype=torch.float64, device=self.device)
        for b in loader:
            b = self._to_device(b)
            mlm_sum, mlm_correct, pair_sum, pair_correct, labels = self._losses(self.model, b)
            sums += torch.stack([mlm_sum.double(), mlm_correct.double(), sums.new_tensor(labels.numel()),
                                 pair_sum.double(), pair_correct.double(), sums.new_tensor(b["input_ids"].shape[0]),
                                 b["attention_mask"].sum().double()])
            counts += torch.bincount(labels, minlength=counts.numel()).double()
        self.model.train()
        all_reduce_sum(self.d, sums)
        all_reduce_sum(self.d, counts)
        rec = self._summary(dict(zip(SUMS, sums.tolist())), prefix="val_")
        # Accuracy of always predicting the most frequent masked token: the floor to beat.
        self.majority = counts.max().item() / max(1.0, counts.sum().item())
        rec["val_mlm_majority_acc"] = self.majority
        return rec

    @torch.no_grad()
    def _check_outputs(self, last: dict) -> None:
        """Before the final save: the model's outputs on a held-back batch (the validation split's
        first; the last training batch when there is none) are finite, else the run diverged."""
        b = last
        if self.data.val_dataset is not None and self.data.n_val:
            b = self.data.collate([self.data.val_dataset[(0, i)] for i in range(min(self.micro, self.data.n_val))])
        b = self._to_device(b)
        self.model.eval()
        with self.autocast():
            out = self.model(b["input_ids"], b["attention_mask"], b.get("token_type_ids"), b["mlm_positions"])
        self.model.train()
        check_trained(out, "pretraining", self.cfg.learning_rate, "--set train.learning_rate")

    # --------------------------------------------------------------------------- fit
    def fit(self) -> TrainResult:
        cfg, d = self.cfg, self.d
        run_dir = self.inp.run_dir
        resume_step = self.step if self.inp.resume is not None else None
        metrics = MetricsLog(run_dir / "metrics.jsonl", resume_step=resume_step, enabled=d.main)
        tb = Trackers(report_names(cfg.report_to), run_dir, enabled=d.main, resume_step=resume_step)
        tb.start({**self.r.to_dict(), "output_dir": str(run_dir)})
        if resume_step is None and self.inp.first_record:
            metrics.write(self.inp.first_record)
        pair_name = self.r.data.objective if self.pair else None
        result = TrainResult(step=self.step, tokens=self.tokens, seconds=0.0)
        start = time.monotonic()
        self.model.train()
        if self.rng_to_restore is not None:
            ckpt_io.restore_rng(self.rng_to_restore[min(d.rank, len(self.rng_to_restore) - 1)])
        it = None
        self.t0 = self.clock()
        interval_start, interval_tokens = time.monotonic(), 0
        first_log = min(cfg.max_steps, (self.step // cfg.log_every + 1) * cfg.log_every)
        with StopFlag() as stop, LiveView(cfg.max_steps, self.step, pair_name, enabled=d.main,
                                             budget=self.budget, first_log_step=first_log) as view:
            try:
                while self.step < cfg.max_steps and not self._budget_spent():
                    # a test holds the run here to signal it at a known step; a no-op otherwise
                    pause_point(f"train-step-{self.step + 1}", until=lambda: stop.signum is not None)
                    if it is None or self.step >= self.phase.end:
                        it = None                        # the finished phase's workers shut down
                        it = iter(self._phase_loader(view, result))
                    batches = [next(it) for _ in range(self.accum)]
                    lr = self.optimizer.param_groups[0]["lr"]
                    tokens_before = self.tokens
                    _, stopping = self._train_step(batches, stop)
                    self._tick()
                    release_free_memory(self.step)  # slower memory growth over long runs (train/heap.py)
                    interval_tokens += self.tokens - tokens_before
                    step, final = self.step, self.step >= cfg.max_steps or self._budget_spent()
                    # the end of a phase is validated and checkpointed: a resume can start at it
                    phase_end = step == self.phase.end and not final
                    view.step(step)
                    evaluating = final or phase_end or step % cfg.eval_every == 0
                    if final or stopping or evaluating or step % cfg.log_every == 0:
                        now = time.monotonic()
                        rec = self._log_record(lr, interval_tokens / max(1e-9, now - interval_start))
                        if evaluating:
                            val = self.validate()
                            rec.update(val)
                            result.last_val = val
                        interval_start, interval_tokens = time.monotonic(), 0
                        metrics.write(rec)
                        tb.log(rec, step)
                        view.record(rec)
                        result.last = rec
                    if final:
                        # the state to resume or extend the run from (refused when the weights are
                        # not finite), then final/, the model alone, once its outputs are finite
                        self._save(ckpt_io.step_dir(run_dir, step))
                        self._check_outputs(batches[-1])
                        result.checkpoint = self._save_final(run_dir / "final", result.last_val)
                    elif stopping:
                        result.checkpoint = self._save(ckpt_io.step_dir(run_dir, step))
                        result.interrupted = stop.signum or signal.SIGTERM
                        view.message(f"stopped by signal at step {step}; checkpoint {result.checkpoint}")
                        break
                    elif phase_end or step % cfg.save_every == 0:
                        result.checkpoint = self._save(ckpt_io.step_dir(run_dir, step))
            finally:
                metrics.close()
                tb.summary({k: v for k, v in (result.last_val or {}).items() if isinstance(v, (int, float))})
                tb.finish()
                del it
        result.step, result.tokens, result.seconds = self.step, self.tokens, time.monotonic() - start
        result.train_seconds = self.elapsed
        return result

    # ---------------------------------------------------------------- phases, budget
    def _enter_phase(self, ph: Phase, data: PhaseData) -> None:
        self.phase, self.data = ph, data
        self.batch_size = ph.recipe.train.batch_size
        _, self.micro, self.accum = self._micro_batch(ph)

    def _check_resumed_phase(self, s) -> None:
        """The checkpoint's phase must be the plan's phase of its step (max_steps may change on
        resume, and with it the phases given as fractions)."""
        phase, start = state_value(s, "phase"), state_value(s, "phase_start")
        if phase is None or not self.phased:
            return
        done = phase_of(self.phases, max(1, self.step))
        if (phase, start) != (done.index, done.start):
            assert self.inp.resume is not None  # only called while resuming (__init__)
            raise UserError(f"the checkpoint is in phase {state_value(s, 'phase_name')!r} from step {start}, "
                            f"the recipe's phases put step {self.step:,} in {done.name!r} from step {done.start}",
                            where=str(self.inp.resume.path),
                            fix="restore train.max_steps (phases given as fractions move with it)")

    def _phase_loader(self, view, result: TrainResult) -> DataLoader:
        """The loader of the phase that runs the next update; a phase starting now gets its data
        first (built if missing: that time does not count, and it leaves the RNGs untouched so
        the run goes on exactly as one resumed at this boundary)."""
        ph = phase_of(self.phases, self.step + 1)
        if ph is not self.phase:
            t = self.clock()
            rng = ckpt_io.capture_rng()
            # a multi-phase run's caller (bertcli.train.pipeline) always gives open_phase
            assert self.inp.open_phase is not None, "a later phase needs TrainInputs.open_phase"
            data = self.inp.open_phase(ph)
            ckpt_io.restore_rng(rng)
            spent = self.clock() - t
            self.excluded += spent
            result.stage_seconds += spent
            self._enter_phase(ph, data)
        if self.phased:
            tr = ph.recipe.train
            view.message(f"{ph.name}: steps {ph.start + 1:,}-{ph.end:,}, max_seq_length {ph.recipe.data.max_seq_length}, "
                         f"batch {tr.batch_size} = {self.accum} x {self.micro} x {self.d.world_size}, "
                         f"peak lr {tr.learning_rate:g}")
        return self._train_loader()

    def _tick(self) -> None:
        """After a step: the training time so far (the same on every process), and under a
        budget the learning rate of the next update."""
        local = self.elapsed_before + (self.clock() - self.t0) - self.excluded
        if self.budget is not None and self.d.enabled:
            local = all_reduce_sum(self.d, torch.tensor([local], dtype=torch.float64, device=self.device)).item()
            local /= self.d.world_size
        self.elapsed = local
        if self.budget is not None:
            self._set_budget_lr()

    def _budget_spent(self) -> bool:
        return self.budget is not None and self.elapsed >= self.budget

    def _set_budget_lr(self) -> None:
        p = progress(self.step + 1, self.elapsed, self.budget, self.cfg.max_steps)
        m = budget_multiplier(self.cfg, p)
        for group, base in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
            group["lr"] = base * m

    def _log_record(self, lr: float, tokens_per_s: float) -> dict:
        sums = all_reduce_sum(self.d, self.sums.clone())
        self.sums.zero_()
        s = dict(zip(SUMS, sums.tolist()))
        rec = {"step": self.step, **self._summary(s), "lr": lr, "tokens_per_s": tokens_per_s}
        if self.phased:  # the phase, and the mean length of the rows it trained on since the last record
            rec["phase"] = self.phase.name
            rec["tokens_per_seq"] = s["tokens"] / s["sequences"] if s["sequences"] else float("nan")
        if self.budget is not None:
            rec["train_seconds"] = self.elapsed
        if self.guard.bad_steps:
            rec["bad_steps"] = self.guard.bad_steps
        if self.overflows:
            rec["fp16_overflows"] = self.overflows
        return rec


def _summarize(s: dict, pair: bool, prefix: str = "") -> dict:
    """Mean losses and accuracies from interval sums (nan when the interval had no step)."""
    nan = float("nan")
    mlm_loss = s["mlm_loss"] / s["masked"] if s["masked"] else nan
    rec = {"loss": mlm_loss, "mlm_loss": mlm_loss, "mlm_acc": s["mlm_correct"] / s["masked"] if s["masked"] else nan,
           "pair_loss": None, "pair_acc": None}
    if pair:
        pair_loss = s["pair_loss"] / s["sequences"] if s["sequences"] else nan  # a float, unlike rec's values
        rec["pair_loss"] = pair_loss
        rec["pair_acc"] = s["pair_correct"] / s["sequences"] if s["sequences"] else nan
        rec["loss"] = mlm_loss + pair_loss
    return {prefix + k: v for k, v in rec.items()}
