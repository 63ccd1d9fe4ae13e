"""Fine-tune one classifier on one task: AdamW + warmup/linear decay from the trainer's own
modules, dev evaluation after every epoch, the best epoch's weights kept.

Deterministic for a given seed on a given device: the model's dropout draws from torch's global
RNG seeded here, the example order from its own generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertcli import console
from bertcli.finetune import metrics
from bertcli.finetune.encode import Encoded, collate, eval_batches
from bertcli.finetune.tasks import Hyper, TaskSpec
from bertcli.train.optim import build_optimizer
from bertcli.train.precision import StepGuard, autocast, clip_and_check, make_grad_scaler, optimizer_step
from bertcli.train.schedule import build_scheduler


@dataclass
class FitResult:
    best_epoch: int                                      # 1-based
    best_score: float
    dev_metrics: dict[str, dict[str, float]]             # of the best epoch, by dev split name
    history: list[dict] = field(default_factory=list)    # one entry per evaluation
    steps: int = 0


def schedule_lengths(n_train: int, hyper: Hyper) -> tuple[int, int, int]:
    """(steps per epoch, total steps, warmup steps); fractional epochs round up to a whole step."""
    per_epoch = math.ceil(n_train / hyper.batch_size)
    total = max(1, math.ceil(hyper.epochs * per_epoch))
    return per_epoch, total, math.ceil(hyper.warmup_ratio * total)


def loss_fn(task: TaskSpec, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the classes, or mean squared error on the score (STS-B)."""
    if task.is_regression:
        return F.mse_loss(logits[:, 0].float(), labels.float())
    return F.cross_entropy(logits.float(), labels)


@torch.no_grad()
def predict(model: nn.Module, data: Encoded, task: TaskSpec, pad_id: int, batch_size: int,
            device: torch.device, precision: str) -> np.ndarray:
    """Class ids [n] (or scores [n] for regression) in the split's order."""
    was_training = model.training
    model.eval()
    out = np.zeros(len(data), dtype=np.float32 if task.is_regression else np.int64)
    for index in eval_batches(data, batch_size):
        batch = collate(data, index, pad_id)
        with autocast(precision, device):
            logits = model(batch["input_ids"].to(device), batch["attention_mask"].to(device),
                           batch["token_type_ids"].to(device)).float()
        out[index] = (logits[:, 0] if task.is_regression else logits.argmax(-1)).cpu().numpy()
    model.train(was_training)
    return out


def evaluate(model: nn.Module, devs: dict[str, Encoded], task: TaskSpec, pad_id: int, batch_size: int,
             device: torch.device, precision: str) -> dict[str, dict[str, float]]:
    return {name: metrics.compute(task, predict(model, d, task, pad_id, batch_size, device, precision), d.labels)
            for name, d in devs.items()}


def fit(model: nn.Module, train: Encoded, devs: dict[str, Encoded], task: TaskSpec, hyper: Hyper,
        cfg, seed: int, device: torch.device, pad_id: int) -> FitResult:
    """Train `model` in place; on return it holds the weights of the best dev epoch."""
    torch.manual_seed(seed)
    order_rng = torch.Generator().manual_seed(seed)
    model.to(device)

    def train_mode():
        # A frozen encoder computes features as at inference (no dropout inside it); the
        # classifier's own dropout still applies.
        model.train()
        if cfg.freeze_encoder:
            model.encoder.eval()

    train_mode()
    opt = build_optimizer(model, "adamw", hyper.learning_rate, (cfg.beta1, cfg.beta2), cfg.eps,
                          hyper.weight_decay, device)
    per_epoch, total, warmup = schedule_lengths(len(train), hyper)
    sched = build_scheduler(opt, warmup, total, "linear")
    scaler = make_grad_scaler(cfg.precision, device)
    guard = StepGuard(max_bad_steps=20, what=f"fine-tuning {task.name}")
    params = [p for p in model.parameters() if p.requires_grad]

    best: FitResult | None = None
    best_state: dict[str, torch.Tensor] | None = None
    history: list[dict] = []
    step, epoch = 0, 0
    with console.progress(f"fine-tuning {task.name}", total=total) as bar:
        while step < total:
            epoch += 1
            perm = torch.randperm(len(train), generator=order_rng).numpy()
            losses = []
            for start in range(0, len(perm), hyper.batch_size):
                if step >= total:
                    break
                batch = {k: v.to(device) for k, v in collate(train, perm[start:start + hyper.batch_size], pad_id).items()}
                with autocast(cfg.precision, device):
                    logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
                loss = loss_fn(task, logits, batch["labels"])
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                norm = clip_and_check(params, cfg.grad_clip, scaler, opt)
                value = float(loss.detach())
                if optimizer_step(opt, scaler, guard, norm, value, step=step + 1):
                    losses.append(value)
                sched.step()
                step += 1
                bar.advance(1)
            dev = evaluate(model, devs, task, pad_id, cfg.eval_batch_size, device, cfg.precision)
            train_mode()
            score = metrics.task_score(task, dev)
            history.append({"epoch": epoch, "step": step, "train_loss": float(np.mean(losses)) if losses else None,
                            "dev": dev, "score": score})
            is_best = best is None or score > best.best_score
            console.log(f"{task.name} epoch {epoch}: loss {history[-1]['train_loss'] or float('nan'):.4f}, "
                        f"{metrics.metric_header(task)} {metrics.format_metrics(task, dev)}"
                        + (" (best)" if is_best else ""))
            if is_best:
                best = FitResult(epoch, score, dev)
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    best.history, best.steps = history, step
    return best
