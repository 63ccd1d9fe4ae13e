"""Unit tests of the trainer's parts: LAMB, schedules, parameter groups, precision helpers,
the sampler/cursor, checkpoint I/O and metrics.jsonl handling."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from torch import nn
from train_standins import TinyModel

from bertcli.core.errors import UserError
from bertcli.train import checkpoint as ck
from bertcli.train.metrics import MetricsLog, read_metrics
from bertcli.train.optim import Lamb, build_optimizer, param_groups
from bertcli.train.precision import StepGuard, autocast, clip_and_check, make_grad_scaler, optimizer_step, resolve_device
from bertcli.train.sampler import EpochOrder, EvalBatchSampler, TrainBatchSampler, split_batch
from bertcli.train.schedule import build_scheduler, lr_multiplier


# ----------------------------------------------------------------------------------- LAMB
def test_lamb_matches_the_papers_formula_on_a_hand_computed_example():
    # One tensor x = [3, 4] (norm 5), gradient g = [0.1, -0.2], lr 0.1, b1 .9, b2 .99, eps 1e-6, wd .01.
    # Step 1 (bias-corrected): m^ = g, v^ = g^2, so m^/(sqrt(v^)+eps) = sign(g) * |g|/(|g|+eps)
    #   = [0.1/0.100001, -0.2/0.200001] = [0.99999000, -0.99999500];  r = that + 0.01 * x
    #   = [1.02999000, -0.95999500], ||r|| = sqrt(1.0608794 + 0.9215904) = 1.408002,
    #   trust = 5 / 1.408002 = 3.551131, x' = x - 0.1 * trust * r = [3 - 0.365762, 4 + 0.340907].
    x, g = [3.0, 4.0], [0.1, -0.2]
    r = [0.1 / (0.1 + 1e-6) + 0.03, -0.2 / (0.2 + 1e-6) + 0.04]
    trust = 5.0 / math.hypot(*r)
    expected = [xi - 0.1 * trust * ri for xi, ri in zip(x, r)]
    assert expected == pytest.approx([2.634238, 4.340907], abs=2e-6)  # the numbers worked by hand

    p = nn.Parameter(torch.tensor(x, dtype=torch.float64))
    opt = Lamb([{"params": [p], "weight_decay": 0.01}], lr=0.1, betas=(0.9, 0.99), eps=1e-6)
    p.grad = torch.tensor(g, dtype=torch.float64)
    opt.step()
    assert p.detach().tolist() == pytest.approx(expected, abs=1e-12)

    # Step 2 with another gradient, against the formula written out in plain floats.
    g2 = [-0.3, 0.05]
    m = [0.9 * (0.1 * gi) + 0.1 * hi for gi, hi in zip(g, g2)]
    v = [0.99 * (0.01 * gi * gi) + 0.01 * hi * hi for gi, hi in zip(g, g2)]
    x1 = p.detach().tolist()
    r2 = [(mi / (1 - 0.9 ** 2)) / (math.sqrt(vi / (1 - 0.99 ** 2)) + 1e-6) + 0.01 * xi for mi, vi, xi in zip(m, v, x1)]
    trust2 = math.hypot(*x1) / math.hypot(*r2)
    p.grad = torch.tensor(g2, dtype=torch.float64)
    opt.step()
    assert p.detach().tolist() == pytest.approx([xi - 0.1 * trust2 * ri for xi, ri in zip(x1, r2)], abs=1e-12)


def test_lamb_skips_layer_adaptation_for_the_no_decay_group_and_zero_weights():
    p = nn.Parameter(torch.zeros(3))
    opt = Lamb([{"params": [p], "weight_decay": 0.0, "trust_ratio": False}], lr=0.5)
    p.grad = torch.tensor([1.0, -2.0, 0.5])
    opt.step()
    # Adam step 1 is lr * sign(g) (up to eps) without a trust ratio
    assert p.detach().tolist() == pytest.approx([-0.5, 0.5, -0.5], abs=1e-5)


def test_param_groups_exclude_biases_and_layernorm_and_count_shared_weights_once():
    m = TinyModel()
    shared = nn.Sequential(m, nn.Linear(2, 2))
    shared.extra = m.ff  # the same module reachable twice (as ALBERT's shared layers)
    groups = param_groups(shared, 0.01)
    decay, no_decay = groups
    names = {id(p): n for n, p in shared.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    decay_names = sorted(names[id(p)] for p in decay["params"])
    no_decay_names = sorted(names[id(p)] for p in no_decay["params"])
    assert decay_names == ["0.emb.weight", "0.ff.weight", "0.pair.weight", "0.seg.weight", "1.weight"]
    assert no_decay_names == ["0.bias", "0.ff.bias", "0.norm.bias", "0.norm.weight", "0.pair.bias", "1.bias"]
    assert sum(len(g["params"]) for g in groups) == len(list(shared.parameters()))


def test_build_optimizer_adamw_is_torchs_adamw_update():
    torch.manual_seed(0)
    a, b = TinyModel(), TinyModel()
    b.load_state_dict(a.state_dict())
    opt = build_optimizer(a, "adamw", 1e-2, (0.9, 0.98), 1e-6, 0.1, "cpu")
    ref = torch.optim.AdamW(param_groups(b, 0.1), lr=1e-2, betas=(0.9, 0.98), eps=1e-6, foreach=False)
    for _ in range(3):
        for m in (a, b):
            for i, p in enumerate(m.parameters()):
                p.grad = torch.sin(torch.arange(p.numel(), dtype=torch.float32) + i).view_as(p)
        opt.step()
        ref.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    with pytest.raises(UserError):
        build_optimizer(a, "sgd", 1e-2, (0.9, 0.98), 1e-6, 0.1, "cpu")


# ------------------------------------------------------------------------------ schedules
@pytest.mark.parametrize("kind", ["linear", "polynomial", "cosine", "constant"])
def test_schedules_hit_their_stated_values(kind):
    kw = dict(warmup_steps=10, max_steps=110, kind=kind, power=2.0, min_lr_ratio=0.1)
    assert lr_multiplier(1, **kw) == pytest.approx(0.1)          # first update: peak / warmup
    assert lr_multiplier(5, **kw) == pytest.approx(0.5)
    assert lr_multiplier(10, **kw) == pytest.approx(1.0)         # end of warmup: the peak
    halfway = {"linear": 0.1 + 0.9 * 0.5, "polynomial": 0.1 + 0.9 * 0.25, "cosine": 0.1 + 0.9 * 0.5,
               "constant": 1.0}[kind]
    assert lr_multiplier(60, **kw) == pytest.approx(halfway)     # half of the decay
    assert lr_multiplier(110, **kw) == pytest.approx(1.0 if kind == "constant" else 0.1)  # last update
    assert lr_multiplier(500, **kw) == pytest.approx(1.0 if kind == "constant" else 0.1)  # past the end
    values = [lr_multiplier(s, **kw) for s in range(10, 111)]
    assert all(a >= b - 1e-12 for a, b in zip(values, values[1:]))  # never rises after warmup


def test_scheduler_drives_the_optimizer_with_lr_multiplier():
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=2.0)
    sched = build_scheduler(opt, warmup_steps=4, max_steps=12, kind="linear")
    seen = []
    for _ in range(12):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([2.0 * lr_multiplier(s, 4, 12, "linear") for s in range(1, 13)])
    assert seen[:4] == pytest.approx([0.5, 1.0, 1.5, 2.0]) and seen[-1] == pytest.approx(0.0)
    assert lr_multiplier(3, 0, 10) == pytest.approx(0.7)          # no warmup: decay from update 1


# ------------------------------------------------------------------------------ precision
def test_resolve_device_and_precision_errors():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(UserError, match="not a torch device"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="CUDA is not available"):
            resolve_device("cuda:0")
        with pytest.raises(UserError, match="fp16 needs CUDA"):
            autocast("fp16", torch.device("cpu"))
    with autocast("bf16", torch.device("cpu")):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast("fp32", torch.device("cpu")):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    assert not make_grad_scaler("fp32", torch.device("cpu")).is_enabled()


def test_clip_and_check_clips_to_max_norm_and_reports_non_finite():
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1))
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert clip_and_check([a, b], 1.0) == pytest.approx(5.0)
    assert torch.cat([a.grad, b.grad]).norm().item() == pytest.approx(1.0, rel=1e-5)
    a.grad = torch.tensor([float("nan"), 1.0])
    assert math.isnan(clip_and_check([a, b], 1.0))
    a.grad = torch.tensor([0.3, 0.4])
    b.grad = None
    assert clip_and_check([a, b], None) == pytest.approx(0.5) and a.grad.tolist() == pytest.approx([0.3, 0.4])


def test_step_guard_counts_and_stops_after_max_bad_steps():
    g = StepGuard(max_bad_steps=2)
    assert g.ok(1.0, 2.0)
    assert not g.ok(float("inf")) and not g.ok(float("nan"))
    assert g.bad_steps == 2
    with pytest.raises(UserError, match="diverged: 3 steps"):
        g.ok(float("nan"), step=7)



@pytest.mark.parametrize("scaled", [False, True])
def test_optimizer_step_skips_non_finite_steps_and_keeps_going(scaled):
    """Without a scaler the guard skips and counts a non-finite step; with one (fp16) the scaler
    itself skips it, and the next step unscales and applies normally (no "unscale_() has already
    been called" after a skipped step)."""
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=scaled)
    guard = StepGuard(max_bad_steps=5)
    for factor, applied in ((float("nan"), False), (2.0, True)):
        before = p.detach().clone()
        scaler.scale((p * factor).sum()).backward()
        norm = clip_and_check([p], 1.0, scaler, opt)
        assert optimizer_step(opt, scaler, guard, norm, step=1) is applied
        assert torch.equal(p.detach(), before) is not applied
        opt.zero_grad(set_to_none=True)
    assert guard.bad_steps == (0 if scaled else 1)


# -------------------------------------------------------------------------------- sampler
def test_epoch_order_covers_every_row_once_per_epoch_and_depends_on_seed():
    o = EpochOrder(10, seed=3)
    e0 = [o[p] for p in range(10)]
    e1 = [o[p] for p in range(10, 20)]
    assert sorted(i for _, i in e0) == list(range(10)) and {e for e, _ in e0} == {0}
    assert sorted(i for _, i in e1) == list(range(10)) and {e for e, _ in e1} == {1}
    assert [i for _, i in e0] != [i for _, i in e1]
    assert [EpochOrder(10, seed=4)[p] for p in range(10)] != e0


def test_train_sampler_shares_global_batches_between_processes_and_resumes_at_the_cursor():
    def take(it, n):
        return [next(it) for _ in range(n)]

    single = take(iter(TrainBatchSampler(7, 4, 2, 0, 1, seed=1)), 10)    # 5 steps, 2 micro-batches
    flat = [x for mb in single for x in mb]
    r0 = take(iter(TrainBatchSampler(7, 4, 1, 0, 2, seed=1)), 10)
    r1 = take(iter(TrainBatchSampler(7, 4, 1, 1, 2, seed=1)), 10)
    for s in range(5):  # global batch s = rank 0's two rows then rank 1's two rows
        assert flat[4 * s:4 * s + 4] == [r0[2 * s][0], r0[2 * s + 1][0], r1[2 * s][0], r1[2 * s + 1][0]]
    resumed = take(iter(TrainBatchSampler(7, 4, 2, 0, 1, seed=1, start_sample=8)), 6)
    assert resumed == single[4:]
    assert split_batch(8, 2, None) == (4, 4, 1) and split_batch(8, 2, 2) == (4, 2, 2)
    with pytest.raises(UserError, match="not divisible"):
        split_batch(6, 4, None)
    with pytest.raises(UserError, match="does not divide"):
        split_batch(8, 1, 3)


def test_eval_sampler_is_fixed_and_sharded():
    full = list(EvalBatchSampler(10, 3, 0, 1, None))
    assert [len(b) for b in full] == [3, 3, 3, 1] and full[0] == [(0, 0), (0, 1), (0, 2)]
    assert list(EvalBatchSampler(10, 3, 0, 1, 6)) == full[:2]
    assert list(EvalBatchSampler(10, 3, 1, 2, None)) == [full[1], full[3]]


# ----------------------------------------------------------------------------- checkpoint
class _Recipe:
    def save(self, directory):
        (directory / "recipe.yaml").write_text("name: test\n")


def _hf_save(model, directory):
    (directory / "config.json").write_text("{}")


def test_checkpoint_round_trip_restores_model_optimizer_and_rng_exactly(tmp_path):
    torch.manual_seed(0)
    model = TinyModel()
    opt = build_optimizer(model, "lamb", 1e-2, (0.9, 0.999), 1e-6, 0.01, "cpu")
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    random.seed(5)
    np.random.seed(6)
    torch.manual_seed(7)
    rng = ck.capture_rng()
    path = ck.save(ck.step_dir(tmp_path, 3), model=model, hf_save=_hf_save, recipe=_Recipe(), optimizer=opt,
                   state={"step": 3, "consumed_samples": 12}, rng=[rng])
    assert path.name == "step-0000003" and (path / "config.json").is_file()
    expected = (torch.rand(3), np.random.rand(), random.random())

    fresh = TinyModel()
    fresh_opt = build_optimizer(fresh, "lamb", 1e-2, (0.9, 0.999), 1e-6, 0.01, "cpu")
    c = ck.read(path)
    assert c.step == 3 and c.state.consumed_samples == 12
    rngs = ck.restore(c, fresh, fresh_opt)
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)
    sa, sb = opt.state_dict(), fresh_opt.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for i in sa["state"]:
        for k in sa["state"][i]:
            assert torch.equal(sa["state"][i][k], sb["state"][i][k])
    ck.restore_rng(rngs[0])
    again = (torch.rand(3), np.random.rand(), random.random())
    assert torch.equal(expected[0], again[0]) and expected[1:] == again[1:]
    # no pickle: every file is JSON or safetensors
    for f in (path / "trainer_state").iterdir():
        assert f.suffix in (".json", ".safetensors")


def test_damaged_or_foreign_checkpoints_are_user_errors(tmp_path):
    model = TinyModel()
    opt = build_optimizer(model, "adamw", 1e-2, (0.9, 0.999), 1e-6, 0.01, "cpu")
    path = ck.save(ck.step_dir(tmp_path, 1), model=model, hf_save=_hf_save, recipe=_Recipe(), optimizer=opt,
                   state={"step": 1}, rng=[ck.capture_rng()])
    with pytest.raises(UserError, match="no such checkpoint"):
        ck.read(tmp_path / "nope")
    with pytest.raises(UserError, match="state.json is missing"):
        ck.read(tmp_path)                                   # a directory without trainer state
    blob = path / "trainer_state" / "optimizer.safetensors"
    blob.write_bytes(blob.read_bytes()[:-10])
    with pytest.raises(UserError, match="missing or truncated"):
        ck.read(path)
    path2 = ck.save(ck.step_dir(tmp_path, 2), model=model, hf_save=_hf_save, recipe=_Recipe(), optimizer=opt,
                    state={"step": 2}, rng=[ck.capture_rng()])
    other = TinyModel(pair=False)                          # another model: weights do not fit
    with pytest.raises(UserError, match="do not fit"):
        ck.restore(ck.read(path2), other, build_optimizer(other, "adamw", 1e-2, (0.9, 0.999), 1e-6, 0.01, "cpu"))
    (path2 / "trainer_state" / "state.json").write_text("{not json")
    with pytest.raises(UserError, match="unreadable"):
        ck.read(path2)


def test_latest_and_prune(tmp_path):
    model = TinyModel()
    opt = build_optimizer(model, "adamw", 1e-2, (0.9, 0.999), 1e-6, 0.01, "cpu")
    save = lambda p, s: ck.save(p, model=model, hf_save=_hf_save, recipe=_Recipe(), optimizer=opt,  # noqa: E731
                                state={"step": s}, rng=[ck.capture_rng()])
    assert ck.latest(tmp_path) is None
    for s in (2, 4, 6):
        save(ck.step_dir(tmp_path, s), s)
    (tmp_path / "checkpoints" / ".step-0000008.tmp-1-2").mkdir()   # a save killed half-way
    assert ck.latest(tmp_path).name == "step-0000006"
    save(tmp_path / "final", 6)
    assert ck.latest(tmp_path).name == "final"
    ck.prune(tmp_path, keep_last=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-0000004", "step-0000006"]


# -------------------------------------------------------------------------------- metrics
def test_metrics_log_truncates_after_the_resumed_step_and_skips_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for s in (10, 20, 30):
        log.write({"step": s, "loss": s / 10})
    log.close()
    with open(path, "a") as f:
        f.write('{"step": 40, "lo')                        # SIGKILL in the middle of a line
    assert [r["step"] for r in read_metrics(path)] == [10, 20, 30]
    log = MetricsLog(path, resume_step=20)
    log.write({"step": 30, "loss": 9.0})
    log.close()
    assert [(r["step"], r["loss"]) for r in read_metrics(path)] == [(10, 1.0), (20, 2.0), (30, 9.0)]
    assert json.loads(path.read_text().splitlines()[0]) == {"step": 10, "loss": 1.0}
