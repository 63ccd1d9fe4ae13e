"""`bertcli finetune glue`: fine-tune a checkpoint on GLUE tasks, report dev scores, write
submission files.

Output (default `runs/glue/<checkpoint name>/`):
    <task>/                  the best epoch's classifier as a Hugging Face directory (config.json,
                             model.safetensors, tokenizer files), results.json, dev_predictions/,
                             recipe.yaml; written under a temporary name, renamed when complete
    submission/<Task>.tsv    test-set predictions in the GLUE server's format
    glue_results.json        with several tasks: every task's dev scores and the GLUE average
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.finetune import metrics
from bertcli.finetune.readers import TaskData, detect_layout, find_tasks, load_task
from bertcli.finetune.submission import prediction_strings, write_json, write_predictions
from bertcli.finetune.tasks import GLUE_ORDER, TASKS, TaskSpec, get_task, resolve_hyper, task_overrides
from bertcli.core.paths import check_output_dir
from bertcli.model.hf import read_config
from bertcli.tokenization.load import LOADABLE



def run_glue(recipe, checkpoint: Path, task: str, data_dir: Path | None = None, hub: str | None = None,
             out: Path | None = None) -> dict:
    """Fine-tune `checkpoint` on `task` (a name, comma-separated names, or `all`); returns the
    summary written to glue_results.json (also when one task ran)."""
    cfg = recipe.finetune
    task_overrides(cfg)                       # unknown task keys fail before any work
    if (data_dir is None) == (hub is None):
        raise UserError("give exactly one of --data-dir (local GLUE files) and --hub (a `datasets` name)",
                        fix="e.g. --data-dir glue_data, or --hub nyu-mll/glue")
    checkpoint = Path(checkpoint)
    check_checkpoint(checkpoint)
    specs = select_tasks(task, data_dir, hub)
    out = check_output_dir(Path(out) if out is not None else default_out(checkpoint), "the output directory", "--out")

    # Read every task before training any, so a broken file is found in seconds, not hours.
    datas = []
    for spec in specs:
        console.log(f"reading {spec.glue_name} from {hub or data_dir}")
        data = load_task(spec, data_dir, hub, bad_rows=cfg.bad_rows)
        for file, n in data.skipped.items():
            console.log(f"warning: {file}: left out {n:,} rows with the wrong number of fields (finetune.bad_rows=skip)")
        datas.append(data)

    results = {}
    for data in datas:
        results[data.task.name] = run_task(recipe, checkpoint, data, out)
    summary = summarize(results)
    write_json(out / "glue_results.json", summary)
    show(results, summary)
    console.log(f"results in {out}; submission files in {out / 'submission'}")
    return summary


def select_tasks(task: str, data_dir: Path | None, hub: str | None) -> list[TaskSpec]:
    """`all` (every task found in data_dir; all nine with --hub), or names separated by commas."""
    if task.strip().lower() == "all":
        if hub:
            return [TASKS[t] for t in GLUE_ORDER]
        found = find_tasks(Path(data_dir))
        if not found and detect_layout(Path(data_dir)) is not None:
            raise UserError(f"{data_dir} holds one task's files, not GLUE task folders", where=str(data_dir),
                            fix="name that task with --task (e.g. --task rte), or point --data-dir at the folder above")
        if not found:
            seen = sorted(p.name for p in Path(data_dir).iterdir()) if Path(data_dir).is_dir() else []
            raise UserError(f"no GLUE task folders in {data_dir}", where=str(data_dir),
                            fix=f"found: {', '.join(seen) or 'nothing'}; expected folders such as CoLA, SST-2, "
                                "MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI (or cola, sst2, ... in the datasets layout)")
        return [TASKS[t] for t in GLUE_ORDER if t in found]
    specs = [get_task(name) for name in task.split(",") if name.strip()]
    if not specs:
        raise UserError("--task is empty", fix="a task name such as rte, or all")
    return list({s.name: s for s in specs}.values())


def check_checkpoint(checkpoint: Path) -> None:
    """The checks that need no weights, before any task is read: config.json, a tokenizer file."""
    read_config(checkpoint)
    if not any((checkpoint / name).is_file() for name in LOADABLE):
        raise UserError(f"checkpoint {checkpoint} has no tokenizer (no {' or '.join(LOADABLE)})", where=str(checkpoint),
                        fix="save the tokenizer next to the weights, e.g. "
                            "AutoTokenizer.from_pretrained(SRC).save_pretrained(DIR), or copy the run's tokenizer files")


def default_out(checkpoint: Path, kind: str = "glue") -> Path:
    """runs/<kind>/<checkpoint name>; `final` and `step-N` are named with their run too."""
    path = checkpoint.resolve()
    name = path.name
    if name == "final" or name.startswith("step"):
        name = f"{path.parent.name}-{name}"
    return Path("runs") / kind / name


def run_task(recipe, checkpoint: Path, data: TaskData, out: Path, init: str = "pretrained") -> dict:
    """Fine-tune, evaluate and predict one GLUE task (the classification task with the task's
    preset) into `out/<task>/`, submission files into `out/submission/`; returns results.json.
    `init="random"` re-initializes the encoder (same architecture, same seed): the baseline that
    shows what pretraining is worth."""
    from bertcli.finetune.engine import run_task as run
    from bertcli.finetune.sequence import SequenceTask

    spec = data.task
    if recipe.finetune.max_train_examples is not None:
        data = replace(data, train=_head(data.train, recipe.finetune.max_train_examples))
    task = SequenceTask(data, resolve_hyper(recipe.finetune, spec), test_folder="submission")
    results = run(task, recipe, Path(checkpoint), Path(out) / spec.name, root=Path(out), init=init,
                  announce=spec.glue_name)
    if not data.test and spec.test:
        console.log(f"{spec.glue_name}: no test file, so no submission file")
    return results


def _head(split, n: int):
    return replace(split, text_a=split.text_a[:n], text_b=split.text_b[:n] if split.text_b is not None else None,
                   labels=split.labels[:n], ids=split.ids[:n])


def summarize(results: dict[str, dict]) -> dict:
    scores = {name: r["score"] for name, r in results.items()}
    return {
        "tasks": {name: {"dev": r["dev"], "score": r["score"], "best_epoch": r["best_epoch"]}
                  for name, r in results.items()},
        "glue_average": metrics.glue_average(scores),
        "tasks_in_average": [t for t in GLUE_ORDER if t in scores],
        "averaging": "unweighted mean of the task scores; a task with several metrics (MRPC F1/acc, "
                     "STS-B Pearson/Spearman, QQP F1/acc, MNLI matched/mismatched acc) scores their mean",
    }


def show(results: dict[str, dict], summary: dict) -> None:
    rows = []
    for name in GLUE_ORDER:
        if name in results:
            spec, r = TASKS[name], results[name]
            rows.append((f"{spec.glue_name} {metrics.metric_header(spec)}",
                         f"{metrics.format_metrics(spec, r['dev'])}  (epoch {r['best_epoch']})"))
    avg = summary["glue_average"]
    if len(results) > 1 and avg is not None:
        n = len(summary["tasks_in_average"])
        label = "GLUE average" if n == len(GLUE_ORDER) else f"average of {n} tasks (GLUE has 9)"
        rows.append((label, f"{100 * avg:.1f}"))
    console.summary("GLUE dev results (x100)", rows)


def load_results(out: Path) -> dict:
    """glue_results.json of a finished run (for scripts and tests)."""
    return json.loads((Path(out) / "glue_results.json").read_text(encoding="utf-8"))


__all__ = ["run_glue", "run_task", "select_tasks", "summarize", "load_results"]
