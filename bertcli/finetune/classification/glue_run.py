"""`bertcli finetune glue`: fine-tune a checkpoint on GLUE tasks, report dev scores, write
submission files.

Output (default `runs/glue/<checkpoint name>/`):
    <task>/                  the best epoch's classifier as a Hugging Face directory (config.json,
                             model.safetensors, tokenizer files), results.json, dev_predictions/,
                             recipe.yaml; written under a temporary name, renamed when complete
    submission/<Task>.tsv    test-set predictions in the GLUE server's format
    glue_results.json        every task's dev scores and the GLUE average (also for one task)

Each task is the classification task with its GLUE preset, run by the shared runner; this
module only picks the tasks, places the submission files and averages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.finetune import runner
from bertcli.finetune.classification import metrics
from bertcli.finetune.classification.glue import GLUE_ORDER, TASKS, TaskSpec, get_task, resolve_hyper, task_overrides
from bertcli.finetune.classification.glue_data import SequenceSplit, TaskData, detect_layout, find_tasks, load_task
from bertcli.finetune.classification.submission import prediction_strings, write_json, write_predictions
from bertcli.finetune.classification.task import SequenceTask
from bertcli.finetune.task import TaskSplits

if TYPE_CHECKING:
    from bertcli.config.finetune_sections import FinetuneConfig
    from bertcli.config.recipe import Recipe


class GlueTask(SequenceTask):
    """One GLUE task: its preset's labels and metrics; test predictions go to `submission`
    (the run folder's submission/, beside the task folders) as the GLUE server wants them."""

    def __init__(self, spec: TaskSpec, cfg: FinetuneConfig, submission: Path, data_dir: Path | None = None,
                 hub: str | None = None, data: TaskData | None = None):
        super().__init__(spec.name, resolve_hyper(cfg, spec), spec.label)
        self.glue, self.submission = spec, Path(submission)
        self.source, self.bad_rows, self.given = (data_dir, hub), cfg.bad_rows, data

    def read(self) -> TaskSplits[SequenceSplit]:
        data_dir, hub = self.source
        data = self.given
        if data is None:
            console.log(f"reading {self.glue.glue_name} from {hub or data_dir}")
            data = load_task(self.glue, data_dir, hub, bad_rows=self.bad_rows)
            for file, n in data.skipped.items():
                console.log(f"warning: {file}: left out {n:,} rows with the wrong number of fields (finetune.bad_rows=skip)")
        if not data.test and self.glue.test:
            console.log(f"{self.glue.glue_name}: no test file, so no submission file")
        return TaskSplits(data.train, list(data.dev), list(data.test), data.layout, data.source,
                          {"skipped_rows": data.skipped})

    def describe(self) -> str:
        return self.glue.glue_name

    def write_predictions(self, split: SequenceSplit, predictions, directory: Path, kind: str) -> list[Path]:
        if kind == "dev":
            return super().write_predictions(split, predictions, directory, kind)
        file = next((s.submission for s in self.glue.test if s.name == split.name), "AX.tsv")
        return [write_predictions(self.submission / file, split.ids, prediction_strings(self.spec, predictions))]

    def test_record(self, paths: list[str]) -> dict:
        return {"submission": paths}

    def results(self) -> dict:
        return {"glue_name": self.glue.glue_name}

    def summary_rows(self, results: dict) -> list[tuple[str, str]]:
        return [(f"{self.glue.glue_name} {metrics.metric_header(self.glue)}",
                 f"{metrics.format_metrics(self.glue, results['dev'])}  (epoch {results['best_epoch']})")]


def run_glue(recipe: Recipe, checkpoint: Path, task: str, data_dir: Path | None = None, hub: str | None = None,
             out: Path | None = None) -> dict:
    """Fine-tune `checkpoint` on `task` (a name, comma-separated names, or `all`); returns the
    summary written to glue_results.json (also when one task ran)."""
    cfg = recipe.finetune
    task_overrides(cfg)                       # unknown task keys fail before any work
    if (data_dir is None) == (hub is None):
        raise UserError("give exactly one of --data-dir (local GLUE files) and --hub (a `datasets` name)",
                        fix="e.g. --data-dir glue_data, or --hub nyu-mll/glue")
    checkpoint = Path(checkpoint)
    runner.check_checkpoint_files(checkpoint)
    specs = select_tasks(task, data_dir, hub)
    out = runner.check_out_dir(Path(out) if out is not None else runner.default_out(checkpoint, "glue"))

    # Read every task before training any, so a broken file is found in seconds, not hours.
    tasks = [GlueTask(spec, cfg, out / "submission", data_dir, hub) for spec in specs]
    folders = [runner.prepare(t, recipe, checkpoint, out / t.name) for t in tasks]
    results = {t.name: runner.train(t, recipe, checkpoint, folder, show=False) for t, folder in zip(tasks, folders)}
    summary = summarize(results)
    write_json(out / "glue_results.json", summary)
    rows = [row for t in sorted(tasks, key=lambda t: GLUE_ORDER.index(t.name))
            for row in t.summary_rows(results[t.name]) + runner.test_rows(t, results[t.name])]
    avg = summary["glue_average"]
    if len(results) > 1 and avg is not None:
        n = len(summary["tasks_in_average"])
        rows.append(("GLUE average" if n == len(GLUE_ORDER) else f"average of {n} tasks (GLUE has 9)", f"{100 * avg:.1f}"))
    console.summary("GLUE dev results (x100)", rows)
    console.log(f"results in {out}; submission files in {out / 'submission'}")
    return summary


def run_glue_task(recipe: Recipe, checkpoint: Path, data: TaskData, out: Path, init: str = "pretrained") -> dict:
    """Fine-tune one GLUE task read already (`data`) into `out/<task>/`, submission files into
    `out/submission/`; returns results.json's content."""
    task = GlueTask(data.task, recipe.finetune, Path(out) / "submission", data=data)
    return runner.finetune_task(task, recipe, checkpoint, Path(out) / data.task.name, init=init, show=False)


def select_tasks(task: str, data_dir: Path | None, hub: str | None) -> list[TaskSpec]:
    """`all` (every task found in data_dir; all nine with --hub), or names separated by commas."""
    if task.strip().lower() == "all":
        if hub:
            return [TASKS[t] for t in GLUE_ORDER]
        assert data_dir is not None, "the caller gives data_dir when there is no hub"
        found = find_tasks(Path(data_dir))
        if not found and detect_layout(Path(data_dir)) is not None:
            raise UserError(f"{data_dir} holds one task's files, not GLUE task folders", where=str(data_dir),
                            fix="name that task with --tasks (e.g. --tasks rte), or point --data-dir at the folder above")
        if not found:
            seen = sorted(p.name for p in Path(data_dir).iterdir()) if Path(data_dir).is_dir() else []
            raise UserError(f"no GLUE task folders in {data_dir}", where=str(data_dir),
                            fix=f"found: {', '.join(seen) or 'nothing'}; expected folders such as CoLA, SST-2, "
                                "MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI (or cola, sst2, ... in the datasets layout)")
        return [TASKS[t] for t in GLUE_ORDER if t in found]
    specs = [get_task(name) for name in task.split(",") if name.strip()]
    if not specs:
        raise UserError("--tasks is empty", fix="a task name such as rte, or all")
    return list({s.name: s for s in specs}.values())


def summarize(results: dict[str, dict]) -> dict:
    scores = {name: r["score"] for name, r in results.items()}
    return {
        "tasks": {name: {"dev": r["dev"], "score": r["score"], "best_epoch": r["best_epoch"],
                         **({"test": r["test"]} if "test" in r else {})}
                  for name, r in results.items()},
        "glue_average": metrics.glue_average(scores),
        "tasks_in_average": [t for t in GLUE_ORDER if t in scores],
        "averaging": "unweighted mean of the task scores; a task with several metrics (MRPC F1/acc, "
                     "STS-B Pearson/Spearman, QQP F1/acc, MNLI matched/mismatched acc) scores their mean",
    }


def load_results(out: Path) -> dict:
    """glue_results.json of a finished run (for scripts and tests)."""
    return json.loads((Path(out) / "glue_results.json").read_text(encoding="utf-8"))


__all__ = ["GlueTask", "run_glue", "run_glue_task", "select_tasks", "summarize", "load_results"]
