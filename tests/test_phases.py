"""Multi-phase runs (train.phases): the plan and its checks, the shipped recipes' documented
values, and the trainer across a phase boundary on stand-ins (tests/train_standins.py): data,
batch and schedule switch at the boundary, and a resume at the boundary or inside phase 2
continues bitwise."""

from __future__ import annotations

import shutil

import pytest
import torch
from train_standins import RowDataset, TinyModel, collate
from train_standins import hf_save_stub as _hf_save

from bertcli.config.phases import phase_of, plan
from bertcli.config.recipe import load_recipe
from bertcli.core.errors import UserError
from bertcli.train import checkpoint as ck
from bertcli.train.loop import PhaseData, Trainer, TrainInputs
from bertcli.train.metrics import TIMING_KEYS, read_metrics
from bertcli.train.phases import PhaseLR
from bertcli.train.schedule import lr_multiplier

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)

BASE = ["train.max_steps=12", "train.warmup_steps=2", "train.batch_size=8", "train.learning_rate=0.01",
        "train.log_every=1", "train.eval_every=100", "train.eval_batches=2", "train.save_every=4",
        "train.num_workers=0", "train.tensorboard=false", "train.keep_last=5", "seed=3"]
# Phase b: another dataset, half the batch, a schedule of its own (warmup again, lower peak).
TWO = "train.phases=[{name: a, steps: 6}, {name: b, steps: 6, batch_size: 4, learning_rate: 0.005, warmup_steps: 2}]"


def run(tmp_path, *overrides, name="run", resume=None, model_seed=0):
    """A two-phase run on stand-ins; returns (trainer, result, records, opened) where opened
    lists (phase index, step) for every phase whose data the loop asked for."""
    recipe = load_recipe(None, [*BASE, TWO, *overrides])
    phases = plan(recipe)
    rows = {0: RowDataset(37), 1: RowDataset(23, offset=500)}
    opened = []

    def data(i):
        return PhaseData(rows[i], RowDataset(10, offset=1000 + i), len(rows[i]), 10, collate)

    def open_phase(ph):
        opened.append((ph.index, trainer.step))
        return data(ph.index)

    start = phase_of(phases, (resume.step if resume else 0) + 1).index
    first = data(start)
    torch.manual_seed(model_seed)
    inputs = TrainInputs(recipe=recipe, model=TinyModel(), train_dataset=first.train_dataset,
                         val_dataset=first.val_dataset, n_train=first.n_train, n_val=first.n_val, collate=collate,
                         hf_save=_hf_save, run_dir=tmp_path / name, resume=resume, phases=phases,
                         open_phase=open_phase)
    trainer = Trainer(inputs)
    result = trainer.fit()
    return trainer, result, read_metrics(tmp_path / name / "metrics.jsonl"), opened


def strip(records):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def state_of(path):
    return ck.read(path).state.state_dict()


# --------------------------------------------------------------------------- the trainer
def test_data_batch_and_schedule_switch_at_the_boundary(tmp_path):
    _, result, m, opened = run(tmp_path)
    assert result.step == 12 and [r["step"] for r in m] == list(range(1, 13))
    assert [r["phase"] for r in m] == ["a"] * 6 + ["b"] * 6
    assert opened == [(1, 6)]                              # phase b's data asked for once, after step 6
    # phase a follows the run's schedule (warmup 2, decay to 0 at step 12) ...
    expected = {s: 0.01 * lr_multiplier(s, 2, 12) for s in range(1, 7)}
    # ... phase b its own: warmup from its first step to 0.005, decay to 0 at its last
    expected.update({s: 0.005 * lr_multiplier(s - 6, 2, 6) for s in range(7, 13)})
    assert {r["step"]: r["lr"] for r in m} == pytest.approx(expected, rel=1e-12)
    assert "val_loss" in m[5] and "val_loss" in m[11]      # each phase's end is validated
    boundary = state_of(tmp_path / "run" / "checkpoints" / "step-0000006")   # and checkpointed
    assert (boundary["phase"], boundary["phase_samples"], boundary["train_rows"]) == (0, 6 * 8, 37)
    final = state_of(ck.latest(tmp_path / "run"))
    assert (final["phase"], final["phase_name"], final["phase_start"]) == (1, "b", 6)
    assert final["phase_samples"] == 6 * 4 and final["consumed_samples"] == 6 * 8 + 6 * 4
    assert final["train_rows"] == 23 and final["batch_size"] == 4
    assert all(6 <= r["tokens_per_seq"] <= 14 for r in m)  # RowDataset rows have 6..14 tokens


@pytest.mark.parametrize("at", [6, 8], ids=["at-the-boundary", "inside-phase-2"])
def test_resume_across_phases_is_bitwise(tmp_path, at):
    """A run killed after step `at` + 1 resumes from the step-`at` checkpoint (the boundary's, or
    one inside phase b) with another initial model: every record equals the uninterrupted run's."""
    _, _, full, _ = run(tmp_path, name="full")
    part = tmp_path / "part"
    (part / "checkpoints").mkdir(parents=True)
    name = f"step-{at:07d}"
    shutil.copytree(tmp_path / "full" / "checkpoints" / name, part / "checkpoints" / name)
    lines = (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()[: at + 1]
    (part / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    _, result, resumed, opened = run(tmp_path, name="part", resume=ck.read(ck.latest(part)), model_seed=99)
    assert result.step == 12 and opened == []             # phase b's data came with the inputs
    assert strip(resumed) == strip(full)


def test_resume_refuses_moved_phase_boundaries(tmp_path):
    """Phases given as fractions move with max_steps: a checkpoint inside phase b (step 8, b from
    step 6) cannot continue where the new plan puts step 8 in phase a."""
    frac = "train.phases=[{name: a, fraction: 0.5}, {name: b, fraction: 0.5, batch_size: 4}]"
    run(tmp_path, frac, name="r")
    resume = ck.read(tmp_path / "r" / "checkpoints" / "step-0000008")
    with pytest.raises(UserError, match="phase 'b' from step 6.*step 8 in 'a'"):
        run(tmp_path, frac, "train.max_steps=20", name="r2", resume=resume)


def test_phase_lr_of_a_run_without_own_schedules_is_the_run_schedule():
    r = load_recipe("bert-base")
    fn = PhaseLR(plan(r), r.train.learning_rate)
    for update in (1, 5000, 10000, 899999, 900000, 900001, 1000000):
        assert fn(update - 1) == lr_multiplier(update, 10000, 1000000)   # exactly, through the boundary


# ------------------------------------------------------------------------------ recipes
@pytest.mark.parametrize("name", ["bert-base", "bert-large"])
def test_bert_recipes_run_the_papers_two_phases(name):
    """Devlin et al. 2019, A.2: 1M steps at batch 256, 90% at 128 tokens (20 predictions), 10%
    at 512 (80), one schedule: warmup 10k, linear decay."""
    r = load_recipe(name)
    a, b = plan(r)
    assert (a.start, a.end, b.start, b.end) == (0, 900_000, 900_000, 1_000_000)
    assert (a.recipe.data.max_seq_length, a.recipe.data.max_predictions_per_seq) == (128, 20)
    assert (b.recipe.data.max_seq_length, b.recipe.data.max_predictions_per_seq) == (512, 80)
    assert a.recipe.train.batch_size == b.recipe.train.batch_size == 256
    assert not a.own_schedule and not b.own_schedule
    assert (r.train.warmup_steps, r.train.learning_rate, r.train.schedule) == (10_000, 1e-4, "linear")
    # every other data setting is the same in both phases: only the two keys differ
    da, db = vars(a.recipe.data), vars(b.recipe.data)
    assert {k for k in da if da[k] != db[k]} == {"max_seq_length", "max_predictions_per_seq"}


def test_bert_large_lamb_recipe_has_nvidias_published_values():
    """NVIDIA DeepLearningExamples pretrain_config.sh (You et al. 2019): 64k then 32k, 7038 then
    1563 steps, peaks 6e-3 then 4e-3, warmup 0.2843 and 0.128 of each phase."""
    r = load_recipe("bert-large-lamb")
    a, b = plan(r)
    assert r.train.optimizer == "lamb" and (a.steps, b.steps) == (7038, 1563) and r.train.max_steps == 8601
    assert (a.recipe.train.batch_size, b.recipe.train.batch_size) == (65536, 32768)
    assert (a.recipe.train.learning_rate, b.recipe.train.learning_rate) == (6e-3, 4e-3)
    assert a.own_schedule and b.own_schedule
    assert a.recipe.train.warmup_steps == int(0.2843 * 7038) and b.recipe.train.warmup_steps == int(0.128 * 1563)
    assert (r.train.schedule, r.train.power) == ("polynomial", 0.5)
    assert (a.recipe.data.max_seq_length, b.recipe.data.max_seq_length) == (128, 512)
    assert (a.recipe.data.max_predictions_per_seq, b.recipe.data.max_predictions_per_seq) == (20, 80)


def test_tiny_two_phase_recipe():
    a, b = plan(load_recipe("bert-tiny-2phase"))
    assert (a.name, a.steps, a.recipe.data.max_seq_length) == ("short", 1350, 64)
    assert (b.name, b.steps, b.recipe.data.max_seq_length, b.recipe.data.max_predictions_per_seq) == ("long", 150, 128, 20)


# ------------------------------------------------------------------------------- checks
def test_fractions_are_of_max_steps_and_their_rounding_goes_to_the_last():
    r = load_recipe(None, ["train.max_steps=10", "train.phases=[{fraction: 0.33}, {fraction: 0.33}, {fraction: 0.34}]"])
    assert [(p.name, p.steps) for p in plan(r)] == [("phase1", 3), ("phase2", 3), ("phase3", 4)]
    r = load_recipe(None, ["train.max_steps=100", "train.phases=[{steps: 70}, {fraction: 0.3}]"])
    assert [p.steps for p in plan(r)] == [70, 30]


@pytest.mark.parametrize("sets, message", [
    (["train.phases=[{steps: 600000}, {steps: 100000}]"], "add up to 700,000 steps"),
    (["train.phases=[{steps: 10, fraction: 0.5}]"], "as steps or as a fraction"),
    (["train.phases=[{fraction: 0.9}, {fraction: 0.1, data: {max_seq_lenght: 512}}]"],
     "train.phases[1].data.max_seq_lenght: unknown key; did you mean train.phases[1].data.max_seq_length"),
    (["train.phases=[{fraction: 0.9}, {fraction: 0.1, data: {max_seq_length: 1024}}]"],
     r"train.phases[1] (phase2): data.max_seq_length 1024 exceeds the model's 512 positions"),
    (["train.phases=[{fraction: 0.9}, {fraction: 0.1, data: {max_seq_length: [512]}}]"],
     "train.phases[1].data.max_seq_length: expected an integer"),
    (["train.phases=[{fraction: 0.5}, {fraction: 0.5, batch_size: 100, micro_batch_size: 30}]"],
     "train.phases[1] (phase2): train.batch_size 100 is not a multiple of train.micro_batch_size 30"),
    (["train.phases=[{fraction: 0.5}, {fraction: 0.5, schedule: cosinus}]"],
     "train.phases[1].schedule: 'cosinus' is not one of"),
    (["train.max_steps=100", "train.phases=[{fraction: 0.5}, {fraction: 0.5, warmup_steps: 60}]"],
     "warmup of 60 steps in a phase of 50"),
    (["train.phases=[{name: x, fraction: 0.5}, {name: x, fraction: 0.5}]"], "the name 'x' is taken"),
    (["train.phases=[{fraction: 0.5}, {fraction: 0.5, stesp: 3}]"], "train.phases[1].stesp: unknown key"),
    (["train.max_time=1h", "train.phases=[{fraction: 0.5}, {fraction: 0.5}]"], "train.phases with train.max_time"),
])
def test_phase_mistakes_are_clear_errors_at_load(sets, message):
    with pytest.raises(UserError) as e:
        load_recipe(None, sets)
    assert message in e.value.what


def test_build_data_without_all_phases_builds_only_the_first_phase(monkeypatch):
    """What `bertcli build-data` builds (the stage function stubbed: no building here)."""
    import bertcli.data.build as build
    import bertcli.train.phases as train_phases
    from bertcli.config.stages import StageResult
    from bertcli.train.phases import build_phase_data

    built = []
    monkeypatch.setattr(train_phases, "run_build_data", lambda r, force=False: built.append(r.data.max_seq_length)
                        or StageResult("data", build.data_dir(r), False))
    r = load_recipe("bert-base", ["output_dir=/nonexistent/run"])
    assert [x.name for x in build_phase_data(r)] == ["data seq128"] and built == [128]
    assert [x.name for x in build_phase_data(r, all_phases=True)] == ["data seq128", "data seq512"]
    assert built == [128, 128, 512]
    a, b = (build.data_dir(p.recipe) for p in plan(r))
    assert a != b and a == build.data_dir(r)               # phase 1 is the data section itself: same stage


def test_a_phase_batch_that_does_not_fit_the_processes_fails_before_training(tmp_path):
    """Phase b's micro-batch of 4 exceeds its per-process batch on 2 processes (4 / 2): refused
    when the trainer is built, not when the run reaches phase b."""
    from bertcli.train.distributed import Dist

    recipe = load_recipe(None, [*BASE, "train.phases=[{steps: 6}, {steps: 6, batch_size: 4, micro_batch_size: 4}]"])
    inputs = TrainInputs(recipe=recipe, model=TinyModel(), train_dataset=RowDataset(37), val_dataset=None,
                         n_train=37, n_val=0, collate=collate, hf_save=_hf_save, run_dir=tmp_path / "r",
                         dist=Dist(world_size=2))
    with pytest.raises(UserError, match=r"train.phases\[1\] \(phase2\): train.micro_batch_size 4 does not divide"):
        Trainer(inputs)
    assert not (tmp_path / "r").exists()
