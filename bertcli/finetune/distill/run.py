"""`bertcli distill`: a fine-tuned teacher teaches a smaller student on the same task.

    run_distill(recipe, teacher, task, out, layers | student, unlabelled)
        the teacher's head checked (config.json) -> the task reads its splits (the finetune
        commands' readers) -> --unlabelled examples join the training split without labels
        (unlabelled.py) -> the engine fine-tunes the student with the teacher's loss
        (`teacher.Teacher`) and writes `out/` as any fine-tuning run: the student as a Hugging
        Face directory, its predictions, results.json with a `distill` entry -> the summary
        puts teacher and student side by side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.finetune import runner
from bertcli.finetune.classification.classify import ClassifyTask
from bertcli.finetune.distill.heads import check_teacher_head
from bertcli.finetune.distill.unlabelled import add_unlabelled
from bertcli.finetune.qa.task import SquadTask
from bertcli.finetune.tagging.task import NerTask

if TYPE_CHECKING:
    from bertcli.config.finetune_sections import DistillConfig
    from bertcli.config.recipe import Recipe
    from bertcli.finetune.task import Task

CACHE = ".teacher-logits"    # inside the output directory (nothing is written beside it): a --force rerun
                             # into the same --out reads the earlier result's before replacing it


def run_distill(recipe: Recipe, checkpoint: Path, task: Task, out: Path, layers: int | None = None, student: str | None = None,
                unlabelled: Path | None = None, time_onnx: Callable[[Path, Path, int], dict] | None = None) -> dict:
    """Distill the fine-tuned `checkpoint` into a student on `task`; results.json's content.
    `time_onnx` (bertcli.export.speed.teacher_student_speed, from the caller: export sits above
    fine-tuning) times teacher and student when finetune.distill.measure_speed asks."""
    checkpoint = Path(checkpoint)
    check_weights(recipe.finetune.distill)
    if layers is not None and student is not None:
        raise UserError("give --student-layers K or --student SPEC, not both",
                        fix="--student-layers 4 (a subset of the teacher's layers) or --student DIR_OR_RECIPE")
    if layers is not None and layers < 1:
        raise UserError(f"--student-layers {layers} is not a positive number of layers", where="--student-layers",
                        fix="e.g. --student-layers 4")
    runner.check_checkpoint_files(checkpoint)
    check_teacher_head(checkpoint, task.head)
    out = runner.prepare(task, recipe, checkpoint, out)
    if unlabelled is not None:
        add_unlabelled(task, unlabelled, recipe)
    from bertcli.finetune.distill.teacher import Teacher  # torch: after the data are read and checked
    from bertcli.finetune.engine import run_task

    hook = Teacher(checkpoint, recipe.finetune.distill, student, layers, cache_dir=Path(out) / CACHE,
                   time_onnx=time_onnx)
    results = run_task(task, recipe, checkpoint, Path(out), teacher=hook)
    console.summary(f"distill {task.name}: teacher vs student (dev, x100)", summary_rows(results))
    console.log(f"student model and predictions in {out}")
    return results


WEIGHTS = ("soft_weight", "hard_weight", "hidden_weight", "attention_weight")


def check_weights(cfg: DistillConfig) -> None:
    """Before any work: some loss has a weight. With every weight 0 the loss is 0 x (each term),
    nothing the student could learn from (and NaN where a term is infinite)."""
    if not any(getattr(cfg, name) > 0 for name in WEIGHTS):
        shown = ", ".join(f"{name} {getattr(cfg, name):g}" for name in WEIGHTS)
        raise UserError(f"every distillation loss weight is 0 ({shown}): the student would learn from nothing",
                        where="finetune.distill",
                        fix="give a loss a weight, e.g. --set finetune.distill.soft_weight=0.5 (the teacher's soft "
                            "targets) or --set finetune.distill.hard_weight=1 (the gold labels)")


def summary_rows(results: dict) -> list[tuple[str, str]]:
    d = results["distill"]
    t, s = d["teacher"], d["student"]

    def mb(n: float | None) -> str:
        return "-" if n is None else f"{n / 1e6:.1f} MB"

    return [("score (teacher / student)", f"{100 * t['score']:.1f} / {100 * s['score']:.1f}"),
            ("score kept", "-" if d["score_kept_percent"] is None else f"{d['score_kept_percent']:.1f}%"),
            ("layers x hidden", f"{t['layers']} x {t['hidden_size']} / {s['layers']} x {s['hidden_size']}"),
            ("parameters", f"{t['parameters']:,} / {s['parameters']:,} ({d['parameters_ratio']:.2f}x fewer)"),
            ("file size", f"{mb(t['file_bytes'])} / {mb(s['file_bytes'])}"),
            ("teacher logits", d["teacher_logits"])] + speed_rows(d.get("speed"))


def speed_rows(speed: dict | None) -> list[tuple[str, str]]:
    """ONNX Runtime rows (teacher / student), when finetune.distill.measure_speed timed them."""
    if not speed:
        return []
    t, s = speed["teacher"], speed["student"]
    rows = []
    for kind in ("fp32", "int8"):
        rows.append((f"ORT {kind} batch-1 latency", f"{t[kind]['latency_ms_batch1_p50']:.1f} / "
                                                   f"{s[kind]['latency_ms_batch1_p50']:.1f} ms"))
        rows.append((f"ORT {kind} batch-32 throughput", f"{t[kind]['throughput_seq_per_s_batch32']:.0f} / "
                                                       f"{s[kind]['throughput_seq_per_s_batch32']:.0f} seq/s "
                                                       f"({speed['vs_teacher_fp32']['student'][kind]['throughput_x']:.1f}x "
                                                       "the teacher's fp32)"))
    return rows


def make_task(name: str, recipe: Recipe, train: Path | None = None, dev: Path | None = None, test: Path | None = None,
              data_dir: Path | None = None, hub: str | None = None, version: int = 1, encoding: str | None = None,
              **columns) -> tuple[Task, Recipe]:
    """The fine-tuning task `name` (classify, ner, squad) on the finetune commands' data flags;
    (task, recipe with the column flags in its classify block)."""
    if name == "classify":
        if train is None or dev is None:
            raise UserError("--teacher-task classify needs --train and --dev", fix="e.g. --train train.csv --dev dev.csv")
        if columns:
            cfg = dataclasses.replace(recipe.finetune, classify=dataclasses.replace(recipe.finetune.classify, **columns))
            recipe = dataclasses.replace(recipe, finetune=cfg)
        task = ClassifyTask(recipe.finetune, train, dev, test, encoding, recipe.corpus.max_line_bytes)
        return task, recipe
    if columns or train is not None or dev is not None or test is not None:
        raise UserError(f"--train/--dev/--test and the column flags are for --teacher-task classify, not {name}",
                        fix="give --data-dir for ner and squad")
    if name == "ner":
        if data_dir is None:
            raise UserError("--teacher-task ner needs --data-dir", fix="e.g. --data-dir conll2003/ (train.txt, valid.txt)")
        return NerTask(recipe.finetune, data_dir, encoding), recipe
    if name == "squad":
        return SquadTask(recipe.finetune, version, data_dir, hub), recipe
    raise UserError(f"unknown --teacher-task {name!r}", fix="one of: classify, ner, squad")
