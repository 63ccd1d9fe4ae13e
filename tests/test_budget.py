"""Time budgets (train.max_time): durations, the schedule laid out over the budget, stopping,
and resume, on stand-ins with a fake clock (no test here depends on how fast the machine is);
then one short budgeted run through the real CLI, checked by properties that hold at any speed."""

from __future__ import annotations

import shutil

import pytest
import torch
from conftest import ONE_THREAD, run_cli
from train_standins import RowDataset, TinyModel, collate
from train_standins import hf_save_stub as _hf_save

from bertcli.config.phases import parse_duration
from bertcli.config.recipe import load_recipe
from bertcli.core.errors import UserError
from bertcli.train import checkpoint as ck
from bertcli.train.loop import Trainer, TrainInputs
from bertcli.train.metrics import TIMING_KEYS, read_metrics
from bertcli.train.phases import budget_multiplier, progress
from bertcli.train.schedule import lr_multiplier

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)

BASE = ["train.max_steps=100", "train.warmup_steps=20", "train.batch_size=8", "train.learning_rate=0.01",
        "train.log_every=1", "train.eval_every=1000", "train.eval_batches=2", "train.save_every=4",
        "train.num_workers=0", "train.tensorboard=false", "train.keep_last=5", "seed=3", "train.max_time=10s"]


class FakeClock:
    """Each reading is `tick` seconds after the previous one. The trainer reads it once when
    training starts and once after every step, so step k ends at k * tick seconds."""

    def __init__(self, tick: float = 1.0):
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def run(tmp_path, *overrides, name="run", resume=None, tick=1.0, model_seed=0):
    recipe = load_recipe(None, [*BASE, *overrides])
    torch.manual_seed(model_seed)
    inputs = TrainInputs(recipe=recipe, model=TinyModel(), train_dataset=RowDataset(37),
                         val_dataset=RowDataset(10, offset=1000), n_train=37, n_val=10, collate=collate,
                         hf_save=_hf_save, run_dir=tmp_path / name, resume=resume)
    trainer = Trainer(inputs)
    trainer.clock = FakeClock(tick)
    result = trainer.fit()
    return trainer, result, read_metrics(tmp_path / name / "metrics.jsonl")


# ------------------------------------------------------------------------------ durations
@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("24h", 86400), ("1h30m", 5400),
                                           ("2d", 172800), ("0.5h", 1800), (" 1m 30s ", 90)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["30", "", "m", "10x", "1h-5m", "0s", "-5m", "1e3s"])
def test_bad_durations_are_refused_at_load(text):
    with pytest.raises(UserError, match="train.max_time: .* is not a duration"):
        load_recipe(None, [f"train.max_time='{text}'"])


# ------------------------------------------------------------------------------ schedule
def test_budget_schedule_is_the_step_schedule_when_steps_bind_first():
    """progress = max(elapsed / budget, step / max_steps): a budget that is never reached gives
    the step schedule (warmup the same share of the run)."""
    t = load_recipe(None, ["train.max_steps=50", "train.warmup_steps=5", "train.schedule=cosine"]).train
    for step in range(1, 51):
        p = progress(step, elapsed=0.001 * step, budget=1000.0, max_steps=50)
        assert budget_multiplier(t, p) == pytest.approx(lr_multiplier(step, 5, 50, "cosine"), rel=1e-9, abs=1e-12)


def test_the_run_stops_at_the_first_step_past_the_budget_with_the_schedule_over_time(tmp_path):
    """Fake clock: step k ends at k seconds; budget 10 s, max_steps 100 (a cap far away). Update k
    runs at progress max(k / 100, (k - 1) / 10): warmup over the first 20% of the budget (20 of
    100 steps), linear decay to 0 at its end."""
    trainer, result, m = run(tmp_path)
    assert result.step == 10 and [r["step"] for r in m] == list(range(1, 11))
    assert [r["train_seconds"] for r in m] == [float(k) for k in range(1, 11)]
    t = trainer.cfg
    expected = [0.01 * budget_multiplier(t, max(k / 100, (k - 1) / 10)) for k in range(1, 11)]
    assert [r["lr"] for r in m] == pytest.approx(expected, rel=1e-9)
    assert m[2]["lr"] == pytest.approx(0.01)             # update 3: progress 0.2, the end of warmup
    assert m[-1]["lr"] == pytest.approx(0.01 * 0.1 / 0.8)  # update 10: progress 0.9 of a decay from 0.2
    final = ck.read(ck.latest(tmp_path / "run")).state.state_dict()
    assert final["step"] == 10 and final["elapsed_s"] == 10.0
    assert "val_loss" in m[-1]                             # the budget's end is the run's end


def test_resuming_a_budgeted_run_keeps_its_steps_and_the_remaining_budget(tmp_path):
    """The step-4 checkpoint records 4 s of training; resumed (with the same fake clock), the run
    has 6 s left: it ends at step 10 with every record equal to the uninterrupted run's."""
    _, _, full = run(tmp_path, name="full")
    part = tmp_path / "part"
    (part / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "full" / "checkpoints" / "step-0000004", part / "checkpoints" / "step-0000004")
    lines = (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()[:6]
    (part / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    resume = ck.read(part / "checkpoints" / "step-0000004")
    assert resume.state.elapsed_s == 4.0
    _, result, resumed = run(tmp_path, name="part", resume=resume, model_seed=99)
    assert result.step == 10
    model_and_clock = lambda rs: [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rs]  # noqa: E731
    assert model_and_clock(resumed) == model_and_clock(full)   # train_seconds included: the same fake clock


def test_a_longer_budget_on_resume_gives_more_steps(tmp_path):
    run(tmp_path, name="r")
    resume = ck.read(ck.latest(tmp_path / "r"))
    _, result, m = run(tmp_path, "train.max_time=15s", name="r", resume=resume)
    assert result.step == 15 and m[-1]["train_seconds"] == 15.0


def test_max_steps_still_caps_a_budgeted_run(tmp_path):
    _, result, m = run(tmp_path, "train.max_steps=6", "train.warmup_steps=1", "train.max_time=1h")
    assert result.step == 6
    assert [r["lr"] for r in m] == pytest.approx([0.01 * lr_multiplier(k, 1, 6) for k in range(1, 7)], rel=1e-9)


# --------------------------------------------------------------------------- through the CLI
TINY = ["corpus.sources=[{path: builtin, max_documents: 80}]", "corpus.validation_fraction=0.1",
        "tokenizer.vocab_size=600", "data.max_seq_length=64", "data.dupe_factor=1",
        "model.hidden_size=64", "model.num_hidden_layers=2", "model.num_attention_heads=2",
        "model.intermediate_size=128", "train.batch_size=16", "train.warmup_steps=100", "train.max_steps=100000",
        "train.learning_rate=3e-3", "train.log_every=1", "train.eval_every=100000", "train.save_every=100000",
        "train.eval_batches=4", "train.max_time=6s"]


@pytest.mark.slow
def test_a_budgeted_pretrain_stops_on_time_and_says_so(tmp_path):
    """A 6-second budget through the real CLI. Whatever the machine's speed: every logged step
    but the last ended inside the budget and the last one past it (the run stops at the first
    step past the budget, so the step count is budget / step time, give or take the one step);
    the learning rate rises, then falls; the summary reports the training time and the stage
    time apart. Resuming the finished run does nothing."""
    sets = [x for s in (*TINY, f"output_dir={tmp_path / 'run'}") for x in ("--set", s)]
    res = run_cli("pretrain", "-r", "bert-tiny", *sets, cwd=tmp_path, env=ONE_THREAD)
    assert res.rc == 0, res.output
    assert "pretrain bert-tiny: done" in res.stdout and "of the 6s budget" in res.stdout
    assert "building stages:" in res.stdout and "not counted" in res.stdout
    m = read_metrics(tmp_path / "run" / "metrics.jsonl")
    seconds = [r["train_seconds"] for r in m]
    assert [r["step"] for r in m] == list(range(1, len(m) + 1))
    assert all(s < 6.0 for s in seconds[:-1]) and seconds[-1] >= 6.0
    assert seconds == sorted(seconds)
    lrs = [r["lr"] for r in m]
    top = lrs.index(max(lrs))
    assert lrs[:top + 1] == sorted(lrs[:top + 1]) and lrs[top:] == sorted(lrs[top:], reverse=True)
    state = ck.read(ck.latest(tmp_path / "run")).state.state_dict()
    assert state["step"] == len(m) and state["elapsed_s"] == seconds[-1]
    again = run_cli("pretrain", "-r", "bert-tiny", *sets, "--resume", "auto", cwd=tmp_path, env=ONE_THREAD)
    assert again.rc == 0 and "already complete" in again.stderr, again.output
    assert read_metrics(tmp_path / "run" / "metrics.jsonl") == m
    assert not any(k in TIMING_KEYS for k in ("loss", "lr")) and "train_seconds" in TIMING_KEYS
