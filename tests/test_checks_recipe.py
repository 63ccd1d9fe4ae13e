"""Numbers in recipes and data are checked as a class, not field by field: every float setting of
every section refuses nan and inf, every count and interval that is used as a divisor refuses 0,
every numeric field declares its range, labels are finite, and metrics.jsonl is strict JSON.
The fields are enumerated from the dataclasses, so a field added later is covered too."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers.recipes import FIELDS, set_items

from bertcli.config.recipe import load_recipe, validate
from bertcli.core.errors import UserError
from bertcli.train.metrics import MetricsLog, format_record, read_metrics, to_json_line

FLOATS = [(p, f) for p, f, t in FIELDS if t is float]
DIVISORS = [(p, f) for p, f, t in FIELDS if t is int and (f.metadata.get("ge") or 0) >= 1]


def test_the_enumeration_sees_every_section():
    paths = {p for p, _, _ in FIELDS}
    assert len(FLOATS) >= 25 and len(DIVISORS) >= 20, (len(FLOATS), len(DIVISORS))
    for needle in ("train.learning_rate", "model.layer_norm_eps", "finetune.tasks.rte.epochs",
                   "corpus.sources[0].max_documents", "train.log_every", "train.save_every", "seed"):
        assert needle in paths


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "nan", "Infinity"])
def test_every_float_setting_refuses_non_finite_values(value):
    for path, _ in FLOATS:
        with pytest.raises(UserError) as info:
            load_recipe(None, set_items(path, value))
        assert "finite" in info.value.what and path.split("[0].")[-1] in info.value.what, (path, info.value.what)


def test_every_count_used_as_a_divisor_refuses_zero_before_any_work():
    assert {"train.log_every", "train.save_every", "train.eval_every", "train.batch_size",
            "train.micro_batch_size", "train.eval_batches", "finetune.batch_size",
            "finetune.eval_batch_size", "data.dupe_factor"} <= {p for p, _ in DIVISORS}
    for path, _ in DIVISORS:
        with pytest.raises(UserError, match=r"must be >= \d+, got 0"):
            load_recipe(None, set_items(path, "0"))


def test_every_numeric_field_declares_its_range():
    """The generic mechanism only works when a field states its bounds: a new count without
    `ge=1` (or a float without a lower bound) would let 0 or a negative through."""
    unbounded = [p for p, f, _ in FIELDS if f.metadata.get("ge") is None and f.metadata.get("gt") is None
                 and not f.metadata.get("signed")]
    assert unbounded == [], f"declare ge/gt for: {unbounded}"


def test_values_set_from_python_or_resolved_get_the_same_checks():
    r = load_recipe(None)
    r.train.learning_rate = float("inf")
    with pytest.raises(UserError, match="train.learning_rate: must be a finite number"):
        validate(r)
    r = load_recipe(None)
    r.model.layer_norm_eps = float("nan")                  # a family default slot
    with pytest.raises(UserError, match="model.layer_norm_eps"):
        validate(r)
    r = load_recipe(None)
    r.train.save_every = 0
    with pytest.raises(UserError, match="train.save_every: must be >= 1"):
        validate(r)


def test_the_message_names_the_line_of_the_key(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: x\ntrain:\n  max_steps: 10\n  learning_rate: .inf\n", encoding="utf-8")
    with pytest.raises(UserError) as info:
        load_recipe(str(path))
    assert info.value.where == f"{path}:4"


def test_the_cli_gives_one_message_and_exit_2(cli):
    from conftest import assert_user_error

    assert_user_error(cli("info", "-r", "bert-tiny", "--set", "train.learning_rate=.inf"),
                      "train.learning_rate: must be a finite number")
    assert_user_error(cli("pretrain", "-r", "bert-tiny", "--set", "train.log_every=0"),
                      "train.log_every: must be >= 1, got 0")


# ------------------------------------------------------------------------------------- labels
@pytest.mark.parametrize("score", ["nan", "NaN", "inf", "-inf"])
def test_a_non_finite_regression_label_is_an_error_naming_file_and_line(tmp_path, score):
    from helpers.glue import GLUE_FILES, write_glue

    from bertcli.finetune.classification.glue import TASKS
    from bertcli.finetune.classification.glue_data import load_task

    root = write_glue(tmp_path / "glue", {**GLUE_FILES, "STS-B/train.tsv": GLUE_FILES["STS-B/train.tsv"]
                                          .replace("3.800", score)})
    with pytest.raises(UserError) as info:
        load_task(TASKS["stsb"], root)
    assert "not a finite number" in info.value.what and info.value.where.endswith("STS-B/train.tsv:3")


def test_a_non_finite_label_in_a_datasets_split_names_the_row(tmp_path):
    import datasets

    from bertcli.finetune.classification.glue import TASKS
    from bertcli.finetune.classification.glue_data import load_task

    cols = {"sentence1": ["a", "b", "c"], "sentence2": ["d", "e", "f"], "label": [1.0, float("nan"), 2.0],
            "idx": [0, 1, 2]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(cols),
                          "validation": datasets.Dataset.from_dict(cols)}).save_to_disk(str(tmp_path / "stsb"))
    with pytest.raises(UserError, match=r"label at row 1 \(idx 1\).*not a finite number"):
        load_task(TASKS["stsb"], tmp_path)


# ----------------------------------------------------------------------------- metrics.jsonl
def _strict(line: str):
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(line, parse_constant=refuse)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_metrics_jsonl_stays_strict_json_with_a_flag(tmp_path, bad):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write({"step": 1, "loss": 2.5, "mlm_acc": 0.1, "pair_loss": None, "lr": 1e-3, "tokens_per_s": 10.0})
    log.write({"step": 2, "loss": bad, "mlm_loss": bad, "mlm_acc": 0.2, "pair_loss": None, "lr": 1e-3,
               "tokens_per_s": 10.0})
    log.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    records = [_strict(x) for x in lines]                     # a strict parser reads every line
    assert records[1]["loss"] is None and records[1]["nonfinite"] == ["loss", "mlm_loss"]
    assert "nonfinite" not in records[0] and records[1]["pair_loss"] is None
    back = read_metrics(tmp_path / "metrics.jsonl")           # readers get nan back, legit nulls stay null
    assert math.isnan(back[1]["loss"]) and back[1]["pair_loss"] is None
    assert "loss nan" in format_record({**back[1], "val_loss": None, "val_mlm_acc": 0.5}, None).replace("  ", " ")
    # a resume rewrites the kept lines, still strict
    MetricsLog(tmp_path / "metrics.jsonl", resume_step=2).close()
    assert [_strict(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == records
    assert to_json_line({"step": 3, "x": np.float64("nan").item()}) == '{"step": 3, "x": null, "nonfinite": ["x"]}\n'
