"""The nine GLUE tasks, presets of the classification task (`finetune/classification/task.py`): where their data
lives, which columns hold what, their labels and metrics.

Label ids follow the `datasets` GLUE builder (nyu-mll/glue), so the original TSV files and the
`datasets` layout give the same ids; `labels` holds the label *as spelled in the TSV files*
(which is also what the GLUE server wants in a submission file), in id order.

Column names: the TSV header names of the files the download script leaves (CoLA's train/dev
have no header: `source, label, original label, sentence`), and the `datasets` column names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bertcli.core.errors import UserError, did_you_mean
from bertcli.finetune.classification.labels import LabelSpec
from bertcli.finetune.task import Hyper, overlay  # noqa: F401 (Hyper: re-exported)

if TYPE_CHECKING:
    from bertcli.config.finetune_sections import FinetuneConfig


@dataclass(frozen=True)
class EvalSplit:
    """A dev or test split: its TSV file, its `datasets` split, its name in results / submissions."""

    name: str          # "dev", or "matched" / "mismatched" for MNLI, "ax" for the diagnostic set
    tsv: str           # file name inside the task folder
    hub_split: str     # split name in the `datasets` layout
    submission: str = ""   # submission file name (test splits only)


@dataclass(frozen=True)
class TaskSpec:
    name: str                      # canonical key: cola, sst2, ...
    glue_name: str                 # folder name in the GLUE download: CoLA, SST-2, ...
    label: LabelSpec               # what the classifier predicts: TSV spellings (None: regression),
                                   # readable `datasets` names, GLUE's metrics (main first)
    tsv_a: str                     # header name of the first text column
    tsv_b: str | None              # ... of the second (None: single-sentence task)
    tsv_label: str                 # ... of the label column in train/dev
    tsv_test_id: str = "index"     # ... of the id column in test.tsv
    hub_a: str = "sentence1"
    hub_b: str | None = "sentence2"
    dev: tuple[EvalSplit, ...] = (EvalSplit("dev", "dev.tsv", "validation"),)
    test: tuple[EvalSplit, ...] = ()
    headerless_train: tuple[int, int] | None = None  # (text column, label column) without header

    @property
    def pair(self) -> bool:
        return self.tsv_b is not None


def _test(submission: str) -> tuple[EvalSplit, ...]:
    return (EvalSplit("test", "test.tsv", "test", submission),)


BINARY = ("0", "1")
NLI3 = ("entailment", "neutral", "contradiction")
NLI2 = ("entailment", "not_entailment")

TASKS: dict[str, TaskSpec] = {t.name: t for t in [
    TaskSpec("cola", "CoLA", LabelSpec(BINARY, ("unacceptable", "acceptable"), ("mcc",)),
             tsv_a="sentence", tsv_b=None, tsv_label="label", hub_a="sentence", hub_b=None,
             test=_test("CoLA.tsv"), headerless_train=(3, 1)),
    TaskSpec("sst2", "SST-2", LabelSpec(BINARY, ("negative", "positive"), ("accuracy",)),
             tsv_a="sentence", tsv_b=None, tsv_label="label", hub_a="sentence", hub_b=None,
             test=_test("SST-2.tsv")),
    TaskSpec("mrpc", "MRPC", LabelSpec(BINARY, ("not_equivalent", "equivalent"), ("f1", "accuracy")),
             tsv_a="#1 String", tsv_b="#2 String", tsv_label="Quality", test=_test("MRPC.tsv")),
    TaskSpec("stsb", "STS-B", LabelSpec(None, None, ("pearson", "spearman"), (0.0, 5.0)),
             tsv_a="sentence1", tsv_b="sentence2", tsv_label="score", test=_test("STS-B.tsv")),
    TaskSpec("qqp", "QQP", LabelSpec(BINARY, ("not_duplicate", "duplicate"), ("f1", "accuracy")),
             tsv_a="question1", tsv_b="question2", tsv_label="is_duplicate", tsv_test_id="id",
             hub_a="question1", hub_b="question2", test=_test("QQP.tsv")),
    TaskSpec("mnli", "MNLI", LabelSpec(NLI3, NLI3, ("accuracy",)),
             tsv_a="sentence1", tsv_b="sentence2", tsv_label="gold_label",
             hub_a="premise", hub_b="hypothesis",
             dev=(EvalSplit("matched", "dev_matched.tsv", "validation_matched"),
                  EvalSplit("mismatched", "dev_mismatched.tsv", "validation_mismatched")),
             test=(EvalSplit("matched", "test_matched.tsv", "test_matched", "MNLI-m.tsv"),
                   EvalSplit("mismatched", "test_mismatched.tsv", "test_mismatched", "MNLI-mm.tsv"))),
    TaskSpec("qnli", "QNLI", LabelSpec(NLI2, NLI2, ("accuracy",)),
             tsv_a="question", tsv_b="sentence", tsv_label="label",
             hub_a="question", hub_b="sentence", test=_test("QNLI.tsv")),
    TaskSpec("rte", "RTE", LabelSpec(NLI2, NLI2, ("accuracy",)),
             tsv_a="sentence1", tsv_b="sentence2", tsv_label="label", test=_test("RTE.tsv")),
    TaskSpec("wnli", "WNLI", LabelSpec(BINARY, ("not_entailment", "entailment"), ("accuracy",)),
             tsv_a="sentence1", tsv_b="sentence2", tsv_label="label", test=_test("WNLI.tsv")),
]}

# The diagnostic set (AX) is predicted by MNLI's model: `diagnostic/diagnostic.tsv` in the GLUE
# download (columns index, sentence1, sentence2), config `ax` (split test) in `datasets`.
AX = EvalSplit("ax", "diagnostic.tsv", "test", "AX.tsv")
AX_FOLDER, AX_HUB_CONFIG = "diagnostic", "ax"

# How the GLUE leaderboard forms one number per task (Wang et al. 2018, section 4): tasks with
# several metrics score the unweighted mean of them; MNLI is one task whose two metrics are
# matched and mismatched accuracy. The GLUE score is the mean of the nine task scores (AX is
# not part of it).
GLUE_ORDER = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def normalize(name: str) -> str:
    """`SST-2`, `sst_2`, `STS-B`, `CoLA` -> `sst2`, `sst2`, `stsb`, `cola`."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def get_task(name: str) -> TaskSpec:
    """The task named `name` (any GLUE spelling), or a UserError with the closest name."""
    key = normalize(name)
    if key in TASKS:
        return TASKS[key]
    raise UserError(
        f"unknown GLUE task {name!r}" + did_you_mean(key, list(TASKS)),
        fix="tasks: " + ", ".join(TASKS) + ", or `all` for every task found in --data-dir",
    )


def resolve_hyper(cfg: FinetuneConfig, task: TaskSpec) -> Hyper:
    """finetune.<key> overlaid by finetune.tasks.<task>.<key> where that is set."""
    return overlay(cfg, task_overrides(cfg).get(task.name))


def task_overrides(cfg: FinetuneConfig) -> dict:
    """finetune.tasks keyed by canonical task name; an unknown task key is a UserError. Keys that
    spell the same task (`rte` in the recipe, `RTE` from --set) merge, later values winning."""
    import dataclasses

    out: dict = {}
    for key, override in (cfg.tasks or {}).items():
        norm = normalize(key)
        if norm not in TASKS:
            raise UserError(f"finetune.tasks.{key}: unknown GLUE task" + did_you_mean(norm, list(TASKS)),
                            fix="keys of finetune.tasks are task names: " + ", ".join(TASKS))
        if norm in out:
            changes = {f.name: getattr(override, f.name) for f in dataclasses.fields(override)
                       if getattr(override, f.name) is not None}
            override = dataclasses.replace(out[norm], **changes)
        out[norm] = override
    return out
