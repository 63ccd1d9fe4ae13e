"""The teacher: the fine-tuning engine's hook (`engine.run_task(..., teacher=Teacher(...))`).

    student(task, cfg, seed)   the teacher loaded with the task's head (refused without one, or
                               with other labels), and the student made from it (student.py)
    prepare(task, train, ...)  the teacher's dev score, and its logits on every training feature,
                               computed once (eval mode: no dropout, so they are fixed) and kept
                               in a safetensors file keyed by the teacher's weights and the
                               features, reused by a rerun on the same data
    attach(opt, device)        the hidden-state projection's parameters, trained with the student
    loss(task, outputs, batch) soft_weight * soft + hard_weight * hard (+ hidden, attention)
    results(model, dir, fit)   results.json's `distill` entry: teacher and student side by side

Soft targets per head: classification, one distribution per example over the classes
(regression: the teacher's score); token, one per labelled position (the first sub-token of each
word, the rows the task's forward computes); qa, the start and the end distributions of each
window over its real tokens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from bertcli.config.checkpoint import read_config, weights_sha256
from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.core.fs import write_atomic
from bertcli.finetune.distill import losses
from bertcli.finetune.distill.heads import HEAD_COMMANDS
from bertcli.finetune.distill.student import from_spec, from_teacher
from bertcli.finetune.engine import _to, collate, eval_batches, evaluate_devs
from bertcli.model.checkpoint import LoadReport, load_checkpoint
from bertcli.train.distributed import Dist, all_reduce_sum

if TYPE_CHECKING:
    from bertcli.config.finetune_sections import DistillConfig, FinetuneConfig
    from bertcli.finetune.engine import FitResult
    from bertcli.finetune.task import Features, Task

HEAD_PARAMS = {"classification": "classifier", "token": "classifier", "qa": "qa_outputs"}


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


class Teacher:
    def __init__(self, directory: Path, settings: DistillConfig, student_spec: str | None = None, layers: int | None = None,
                 cache_dir: Path | None = None, time_onnx: Callable[[Path, Path, int], dict] | None = None):
        self.directory, self.settings = Path(directory), settings
        # (teacher dir, student dir, tokens) -> results.json's distill.speed; the export layer's
        # timing (bertcli.export.speed), handed down by the caller since fine-tuning sits below export
        if settings.measure_speed and time_onnx is None:
            raise ValueError("finetune.distill.measure_speed needs time_onnx (bertcli.export.speed.teacher_student_speed)")
        self.time_onnx = time_onnx
        self.student_spec, self.layers = student_spec, layers
        self.cache_dir = cache_dir
        self.model: Any = None
        self.cache: Tensor | None = None      # [features, C] | [tokens, C] | [tokens, 2]
        self.cache_state = "live"
        self.cache_name: str | None = None    # the cache file's name under --out, once keyed
        self.project: nn.Module | None = None
        self.gold: Tensor | None = None       # [features] bool: from a labelled example (None: all are)
        s = settings
        self.intermediate = s.hidden_weight > 0 or s.attention_weight > 0

    # ------------------------------------------------------------------ models
    def student(self, task: Task, cfg: FinetuneConfig, seed: int) -> tuple[Any, LoadReport]:
        d = self.directory
        own = read_config(d, task.head).labels
        if task.labels is not None and own is not None and tuple(own) != tuple(task.labels):
            raise UserError(f"the teacher's labels ({', '.join(own)}) are not the training data's "
                            f"({', '.join(task.labels)})", where=str(d / "config.json"),
                            fix="distill on the data the teacher was fine-tuned on (the same label set)")
        teacher, report = load_checkpoint(d, head=task.head, labels=own)
        param = HEAD_PARAMS[task.head]
        if any(n.startswith(param) or f".{param}" in n for n in report.fresh):
            raise UserError(f"the teacher {d} has no trained {task.head} head ({param} is missing)", where=str(d),
                            fix=f"fine-tune it first (bertcli {HEAD_COMMANDS[task.head]} -c {d})")
        self.model = teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        where = f"--student-layers (teacher {d})"
        if self.student_spec is not None:
            student, self.layer_map = from_spec(self.student_spec, teacher, d, task, cfg.dropout, seed)
            source = self.student_spec
        else:
            student, self.layer_map = from_teacher(teacher, self.layers or 4, cfg.dropout, where)
            source = f"layers {', '.join(str(i + 1) for i in self.layer_map)} of the teacher"
        tc, sc = teacher.config, student.config
        if self.settings.attention_weight > 0:
            if sc.num_attention_heads != tc.num_attention_heads or tc.spec.positions == "rotary":
                raise UserError(f"the attention loss needs as many heads in the student ({sc.num_attention_heads}) "
                                f"as in the teacher ({tc.num_attention_heads}) and absolute positions "
                                f"(the teacher's: {tc.spec.positions})", where="finetune.distill.attention_weight",
                                fix="--set finetune.distill.attention_weight=0")
        if self.settings.hidden_weight > 0 and sc.hidden_size != tc.hidden_size:
            torch.manual_seed(seed)
            self.project = nn.Linear(sc.hidden_size, tc.hidden_size)   # TinyBERT's W_h: Hs -> Ht
        self.capture_s = self.capture_t = None
        if self.intermediate:
            attention = self.settings.attention_weight > 0
            self.capture_s = losses.Capture(student, attention, training=True)
            self.capture_t = losses.Capture(teacher, attention)
        console.log(f"distill: teacher {tc.num_hidden_layers} layers x {tc.hidden_size} "
                    f"({parameter_count(teacher):,} parameters) -> student {sc.num_hidden_layers} x {sc.hidden_size} "
                    f"({parameter_count(student):,}) from {source}")
        self.student_source = source
        return student, LoadReport(d)

    def attach(self, opt: torch.optim.Optimizer, device: torch.device) -> list:
        if self.project is None:
            return []
        self.project.to(device)
        params = list(self.project.parameters())
        opt.add_param_group({"params": params})
        return params

    # ------------------------------------------------------------------ soft targets
    def check_distributed(self, world: int) -> None:
        """Before the process group is joined: the hidden-state and attention losses are means over
        each layer's own rows, which no per-step count of this engine weights yet."""
        if world > 1 and self.intermediate:
            raise UserError(f"finetune.distill.hidden_weight and attention_weight do not run under torchrun yet "
                            f"(WORLD_SIZE={world})", where="finetune.distill",
                            fix="set both to 0 (the soft and hard losses run under torchrun), or distill as one process")

    def prepare(self, task: Task, train: Features, devs: dict, pad_id: int, cfg: FinetuneConfig,
                device: torch.device, d: Dist | None = None) -> None:
        """Under torchrun (`d`): the dev evaluation and the logits are sharded over the ranks and
        gathered, so every rank holds the whole cache; only rank 0 keeps it in the output."""
        assert self.model is not None, "student() first"
        self.model.to(device)
        self.device, self.train = device, train
        self.offsets = torch.from_numpy(train.offsets).to(device)
        unlabelled = task.data.facts.get("unlabelled", 0)
        if unlabelled:                     # --unlabelled examples follow the labelled ones (unlabelled.py)
            labelled = len(task.data.train) - unlabelled
            self.gold = torch.from_numpy(np.asarray(train.example) < labelled).to(device)
        self.teacher_dev = evaluate_devs(self.model, task, devs, pad_id, cfg.eval_batch_size, device, cfg.precision, d)
        self.teacher_score = task.score(self.teacher_dev)
        console.log(f"distill: the teacher on dev: {task.format(self.teacher_dev)}")
        if self.intermediate or not self.settings.cache_logits:
            return
        path = None if self.cache_dir is None else Path(self.cache_dir) / f"{self._key(task, train, cfg)}.safetensors"
        self.cache_name = None if path is None else path.name
        if path is not None and everywhere(d, path.is_file()):   # an earlier result in --out (read, never written)
            from safetensors.torch import load_file

            self.cache, self.cache_state = load_file(str(path))["logits"].to(device), "reused"
            console.log(f"distill: the teacher's logits reused from {path}")
            return
        self.cache = self._compute(task, train, pad_id, cfg, device, d)
        self.cache_state = "computed"
        console.log(f"distill: the teacher's logits on {len(train):,} training features computed once, for every epoch")

    def _key(self, task: Task, train: Features, cfg: FinetuneConfig) -> str:
        h = hashlib.sha256(weights_sha256(self.directory).encode() + task.head.encode())
        for a in (train.ids, train.types, train.offsets, *train.per_token.values(), *train.per_feature.values()):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()[:24]

    @torch.no_grad()
    def _compute(self, task: Task, train: Features, pad_id: int, cfg: FinetuneConfig, device: torch.device,
                 d: Dist | None = None) -> Tensor:
        """The teacher's soft-target logits on every training feature (rows keyed as `_keys`).
        Under torchrun each rank computes every world_size-th batch into a zero cache, and one
        all-reduce sums them: every row is written by exactly one rank, so the sum is exact (x + 0)
        and every rank holds the one-process cache."""
        size = len(train) if task.head == "classification" else int(train.offsets[-1])
        width = 2 if task.head == "qa" else len(task.labels or ())      # qa: (start, end) per token
        cache = torch.zeros((size, width), device=device)
        batches = eval_batches(train, cfg.eval_batch_size)
        for index in batches if d is None else batches[d.rank::d.world_size]:
            batch = _to(collate(train, index, pad_id), device)
            rows = self._rows(task, task.forward(self.model, batch, train=True), batch)[0].float()
            keys = self._keys(task, batch, rows)
            if task.head == "qa":                      # [2B, T] -> per token (start, end)
                B, T = batch["input_ids"].shape
                real = batch["attention_mask"].bool()
                both = rows.view(2, B, T).permute(1, 2, 0)[real]        # [n real, 2]
                cache[keys[real]] = both
            else:
                assert rows.shape[-1] == width, f"teacher rows {tuple(rows.shape)} vs {width} labels"
                cache[keys] = rows
        if d is not None:
            all_reduce_sum(d, cache)
        return cache

    def _rows(self, task, outputs, batch) -> tuple[Tensor, Tensor | None]:
        """(logits [R, C], allowed classes [R, C] or None) of one model's outputs on `batch`."""
        if task.head == "classification":
            return outputs, None
        if task.head == "token":
            return outputs[0], None                                         # [n, C] at labelled positions
        start, end = outputs                                                # [B, T] each
        real = batch["attention_mask"].bool()
        return torch.cat([start, end]), torch.cat([real, real])            # [2B, T]

    def _keys(self, task, batch, rows) -> Tensor:
        """Where each row of `_rows` lives in the cache: the feature ([B]), the flat token of each
        labelled position ([n]), or every token of each window ([B, T], clipped at its end)."""
        index = batch["index"]
        if task.head == "classification":
            return index
        B, T = batch["input_ids"].shape
        starts = self.offsets[index]                                        # [B]
        if task.head == "token":
            positions = task_positions(batch)
            return starts[positions // T] + positions % T
        last = self.offsets[index + 1] - 1
        return torch.minimum(starts[:, None] + torch.arange(T, device=starts.device), last[:, None])  # [B, T]

    def _targets(self, task, batch, student_rows: Tensor) -> Tensor:
        if self.cache is None:
            with torch.no_grad():
                if self.capture_t is not None:
                    self.capture_t.on = True
                out = task.forward(self.model, batch, train=True)
                if self.capture_t is not None:
                    self.capture_t.on = False
            return self._rows(task, out, batch)[0].float()
        keys = self._keys(task, batch, student_rows)
        if task.head == "qa":
            t = self.cache[keys]                                            # [B, T, 2]
            return torch.cat([t[..., 0], t[..., 1]])                        # [2B, T]
        return self.cache[keys]

    # ------------------------------------------------------------------ the loss
    def loss_units(self, task: Task, batch: dict) -> list[int]:
        """[rows the soft loss averages over, units the hard loss averages over] in `batch` (under
        torchrun each term's mean is weighted by the shard's share of its own global count): the
        task's units, and for the hard loss those of the labelled examples (--unlabelled's have none)."""
        soft = task.loss_units(batch)        # QA's soft rows are 2 per window: the same share as its windows
        if self.gold is None:
            return [soft, soft]
        keep = self.gold[batch["index"]]
        return [soft, task.loss_units({k: v[keep] for k, v in batch.items() if k in ("index", "labels")})]

    def loss(self, task: Task, outputs: Any, batch: dict, shares: list[float] | None = None) -> Tensor:
        """outputs: the task's forward's. `shares` (under torchrun): [soft, hard] weights of this
        shard's means (its units / the global units, `loss_units`); alone, 1 each."""
        s = self.settings
        soft_share, hard_share = (1.0, 1.0) if shares is None else shares
        rows, mask = self._rows(task, outputs, batch)
        targets = self._targets(task, batch, rows)
        if task.head == "classification" and rows.shape[-1] == 1:
            soft = losses.regression_loss(rows, targets)
        else:
            soft = losses.soft_loss(rows, targets, s.temperature, mask)
        total = s.soft_weight * soft_share * soft
        if s.hard_weight > 0:
            total = total + s.hard_weight * hard_share * self._hard(task, outputs, batch)
        if self.intermediate:
            assert self.capture_s is not None and self.capture_t is not None
            s_states, s_probs = self.capture_s.take()
            t_states, t_probs = self.capture_t.take()
            if s.hidden_weight > 0:
                total = total + s.hidden_weight * losses.hidden_loss(s_states, t_states, self.layer_map, self.project)
            if s.attention_weight > 0:
                total = total + s.attention_weight * losses.attention_loss(
                    s_probs, t_probs, self.layer_map, batch["attention_mask"].bool())
        return total

    def _hard(self, task, outputs, batch) -> Tensor:
        """The task's loss on the gold labels of the batch's labelled examples; --unlabelled
        ones have none (`self.gold`): only their soft targets teach."""
        if self.gold is None:
            return task.loss(outputs, batch)
        keep = self.gold[batch["index"]]                                   # [B]
        if bool(keep.all()):
            return task.loss(outputs, batch)
        if not bool(keep.any()):
            return torch.zeros((), device=keep.device)      # the soft loss carries the graph
        if task.head == "classification":
            return task.loss(outputs[keep], {**batch, "labels": batch["labels"][keep]})
        if task.head == "token":                       # logits [n, C] at flat positions [n]
            logits, positions = outputs
            rows = keep[positions.div(batch["input_ids"].shape[1], rounding_mode="floor")]
            return task.loss((logits[rows], positions[rows]), batch)
        start, end = outputs                           # [B, T] each
        return task.loss((start[keep], end[keep]), {k: batch[k][keep] for k in ("start_positions", "end_positions")})

    # ------------------------------------------------------------------ the record
    def results(self, model: Any, directory: Path, fit: FitResult) -> dict:
        assert self.model is not None
        t_file = self.directory / "model.safetensors"
        s_file = Path(directory) / "model.safetensors"
        tc, sc = self.model.config, model.config
        teacher = {"checkpoint": str(self.directory), "layers": tc.num_hidden_layers, "hidden_size": tc.hidden_size,
                   "parameters": parameter_count(self.model), "file_bytes": t_file.stat().st_size if t_file.is_file() else None,
                   "dev": self.teacher_dev, "score": self.teacher_score}
        student = {"source": self.student_source, "layers": sc.num_hidden_layers, "hidden_size": sc.hidden_size,
                   "teacher_layers": [i + 1 for i in self.layer_map],
                   "parameters": parameter_count(model), "file_bytes": s_file.stat().st_size if s_file.is_file() else None,
                   "dev": fit.dev_metrics, "score": fit.best_score}
        kept = (100 * fit.best_score / self.teacher_score
                if self.teacher_score and fit.best_score is not None else None)
        settings = {k: getattr(self.settings, k) for k in
                    ("temperature", "soft_weight", "hard_weight", "hidden_weight", "attention_weight")}
        for c in (self.capture_s, self.capture_t):
            if c is not None:
                c.close()
        if self.cache is not None and self.cache_dir is not None and self.cache_name:
            # kept with the result (the output's temporary directory): a --force rerun into the
            # same --out reads it from the earlier result before that is replaced
            from safetensors.torch import save_file

            kept_at = Path(directory) / Path(self.cache_dir).name / str(self.cache_name)
            kept_at.parent.mkdir(parents=True, exist_ok=True)
            cache = self.cache
            write_atomic(kept_at, lambda p: save_file({"logits": cache.cpu().contiguous()}, str(p)))
        speed = None
        if self.settings.measure_speed and s_file.is_file() and self.time_onnx is not None:  # None: measure_speed off
            speed = self.time_onnx(self.directory, Path(directory), min(128, self.model.config.max_position_embeddings - 2))
        return {"distill": {"teacher": teacher, "student": student,
                            "score_kept_percent": None if kept is None else round(kept, 2),
                            "parameters_ratio": round(teacher["parameters"] / student["parameters"], 3),
                            "teacher_logits": self.cache_state, "settings": settings,
                            **({} if speed is None else {"speed": speed})}}


def everywhere(d: Dist | None, flag: bool) -> bool:
    """`flag` on every rank (alone: `flag`): the ranks take the same branch (an all-reduce)."""
    if d is None or not d.enabled:
        return flag
    return int(all_reduce_sum(d, torch.tensor([float(flag)], device=d.device)).item()) == d.world_size


def task_positions(batch) -> Tensor:
    """NerTask.forward's training positions: flat indices of the labelled tokens."""
    return batch["labels"].reshape(-1).ne(-100).nonzero().squeeze(1)


__all__ = ["Teacher", "parameter_count"]
