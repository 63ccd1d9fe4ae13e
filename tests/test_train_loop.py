"""The training loop on stand-ins (tests/train_standins.py): global-batch accounting under
gradient accumulation and data parallelism, exact resume, the non-finite guard."""

from __future__ import annotations

import gc
import os
import queue as queue_mod
import shutil
import socket

import pytest
import torch
import torch.multiprocessing as mp
from train_standins import RowDataset, TinyModel, collate
from train_standins import hf_save_stub as _hf_save

from bertcli.config.recipe import load_recipe
from bertcli.core.errors import Diverged, UserError
from bertcli.train import checkpoint as ck
from bertcli.train.distributed import Dist, init, shutdown
from bertcli.train.loop import Trainer, TrainInputs
from bertcli.train.metrics import TIMING_KEYS, read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)

BASE = ["train.max_steps=8", "train.warmup_steps=2", "train.batch_size=8", "train.learning_rate=0.01",
        "train.log_every=1", "train.eval_every=4", "train.eval_batches=2", "train.save_every=4",
        "train.num_workers=0", "train.tensorboard=false", "train.keep_last=5", "seed=3"]


def run(tmp_path, *overrides, dist=None, resume=None, dropout=0.1, name="run", model_seed=0, ff_weight=None):
    """`ff_weight`: a value every weight of the model's feed-forward layer is set to (1e38
    overflows its outputs to inf, as the weights of a diverging run do)."""
    recipe = load_recipe(None, BASE + list(overrides))
    torch.manual_seed(model_seed)
    model = TinyModel(dropout=dropout)
    if ff_weight is not None:
        with torch.no_grad():
            model.ff.weight.fill_(ff_weight)
    inputs = TrainInputs(recipe=recipe, model=model, train_dataset=RowDataset(37),
                         val_dataset=RowDataset(10, offset=1000), n_train=37, n_val=10, collate=collate,
                         hf_save=_hf_save, run_dir=tmp_path / name, dist=dist or Dist(), resume=resume)
    trainer = Trainer(inputs)
    result = trainer.fit()
    return trainer, result, read_metrics(tmp_path / name / "metrics.jsonl")


def strip(records):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def test_accumulation_equals_one_big_batch(tmp_path):
    t1, _, m1 = run(tmp_path, "train.micro_batch_size=8", dropout=0.0, name="a")
    t2, _, m2 = run(tmp_path, "train.micro_batch_size=2", dropout=0.0, name="b")
    for r1, r2 in zip(m1, m2):
        for k in ("loss", "mlm_acc", "pair_acc", "val_loss"):
            if k in r1:
                assert r1[k] == pytest.approx(r2[k], rel=1e-5, abs=1e-6), (r1["step"], k)
    for p, q in zip(t1.model.parameters(), t2.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_loss_falls_and_records_have_the_documented_fields(tmp_path):
    _, result, m = run(tmp_path, "train.max_steps=40", "train.eval_every=40", "train.save_every=40")
    assert result.step == 40 and (tmp_path / "run" / "checkpoints" / "step-0000040" / "trainer_state" / "state.json").is_file()
    assert {"step", "loss", "mlm_loss", "mlm_acc", "pair_loss", "pair_acc", "lr", "tokens_per_s"} <= set(m[0])
    assert m[-1]["step"] == 40 and "val_mlm_acc" in m[-1] and "val_mlm_majority_acc" in m[-1]
    first, last = sum(r["loss"] for r in m[:5]) / 5, sum(r["loss"] for r in m[-5:]) / 5
    assert last < first - 0.3, (first, last)


def test_resume_from_a_checkpoint_continues_bitwise(tmp_path):
    _, _, full = run(tmp_path, name="full")
    # a second run that only has the step-4 checkpoint and the metrics written up to a kill at step 6
    part = tmp_path / "part"
    (part / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "full" / "checkpoints" / "step-0000004", part / "checkpoints" / "step-0000004")
    lines = (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()[:6]
    (part / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    resume = ck.read(ck.latest(part))
    _, result, resumed = run(tmp_path, name="part", resume=resume, model_seed=99)
    assert result.step == 8
    assert strip(resumed) == strip(full)              # bitwise: floats compared with ==
    assert [r["step"] for r in resumed] == list(range(1, 9))


def test_resume_with_more_steps_follows_the_new_schedule(tmp_path):
    """max_steps may grow on resume: from the first update after the checkpoint, the learning
    rate is the new schedule's (linear decay to 0 at step 12, not 8)."""
    from bertcli.train.schedule import lr_multiplier

    run(tmp_path, name="short")
    longer = tmp_path / "longer" / "checkpoints"
    longer.mkdir(parents=True)
    shutil.copytree(tmp_path / "short" / "checkpoints" / "step-0000004", longer / "step-0000004")
    resume = ck.read(longer / "step-0000004")
    _, result, m = run(tmp_path, "train.max_steps=12", name="longer", resume=resume)
    assert result.step == 12
    lrs = {r["step"]: r["lr"] for r in m if r["step"] > 4}
    assert lrs == pytest.approx({s: 0.01 * lr_multiplier(s, 2, 12) for s in range(5, 13)}, rel=1e-6)


def test_a_state_json_without_the_resume_keys_is_damaged(tmp_path):
    import json

    run(tmp_path, name="r")
    path = tmp_path / "r" / "checkpoints" / "step-0000004"
    f = path / "trainer_state" / "state.json"
    state = json.loads(f.read_text())
    del state["consumed_samples"], state["scheduler"]
    f.write_text(json.dumps(state))
    from bertcli.train.loop import STATE_KEYS

    with pytest.raises(UserError, match="damaged.*lacks consumed_samples, scheduler"):
        ck.read(path, require=STATE_KEYS)


def test_non_finite_steps_are_skipped_counted_and_stop_the_run(tmp_path):
    with pytest.raises(Diverged, match="diverged"):
        run(tmp_path, "train.grad_clip=null", "train.max_bad_steps=1", "train.max_steps=20", ff_weight=1e38)


def test_a_model_whose_outputs_are_not_finite_is_not_saved_as_the_result(tmp_path):
    """Every step skipped (fewer than max_bad_steps), the run reaches its end with a model that
    computes inf and NaN (from finite weights): the check before the final save reports it as
    diverged, naming the learning rate, and no final/ is written (the step's resumable state is)."""
    with pytest.raises(Diverged, match=r"(?s)pretraining diverged at learning rate 0.01: .*not finite.*train.learning_rate"):
        run(tmp_path, "train.max_bad_steps=100", "train.save_every=100", "train.eval_every=100", ff_weight=1e38)
    assert not (tmp_path / "run" / "final").exists()
    assert [p.name for p in ck.list_checkpoints(tmp_path / "run")] == ["step-0000008"]


# ------------------------------------------------------------------------------ DDP
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank, world, port, tmp_path, queue):
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    d = init("cpu")
    try:
        trainer, _, m = run(tmp_path, "train.report_to=[tensorboard]", dist=d, dropout=0.0, name="ddp")
        queue.put((rank, m, [p.detach().tolist() for p in trainer.model.parameters()]))
        del trainer    # as run_pretrain's caller drops it; its DDP wrapper lives on in a reference cycle
    finally:
        shutdown()
    # shutdown collected the wrapper (and with it the reducer holding the group) before leaving the
    # group, so nothing of gloo is left for the interpreter's teardown, which once aborted a finished
    # worker with exit -6; the worker exits normally and the test asserts exit code 0
    queue.put((f"live DDP after shutdown, rank {rank}", sum(isinstance(o, DDP) for o in gc.get_objects()), None))
    queue.close()
    queue.join_thread()


def test_two_process_gloo_ddp_matches_one_process(tmp_path):
    """Same global batch of 8: 2 processes x 4 rows vs 1 process x 8 rows. Tolerance: float32
    sums in another order, rel 1e-5 on the logged metrics and 1e-4 on the weights after 8 steps."""
    single, _, m1 = run(tmp_path, dropout=0.0, name="single")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_ddp_worker, args=(r, 2, port, tmp_path, queue)) for r in range(2)]
    for p in procs:
        p.start()
    got = {}
    while len(got) < 2 * len(procs):  # no deadline: wait while the workers live, fail when one died
        try:
            r, m, w = queue.get(timeout=1)
            got[r] = (m, w)
        except queue_mod.Empty:
            assert all(p.is_alive() or p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert [got[f"live DDP after shutdown, rank {r}"][0] for r in range(2)] == [0, 0]
    m2, weights = got[0]
    assert len(m2) == len(m1) == 8
    for r1, r2 in zip(m1, m2):
        for k in ("loss", "mlm_acc", "pair_acc", "val_loss", "val_mlm_acc"):
            if k in r1:
                assert r1[k] == pytest.approx(r2[k], rel=1e-5, abs=1e-6), (r1["step"], k)
    for p, q in zip(single.model.parameters(), weights):
        torch.testing.assert_close(p.detach(), torch.tensor(q), rtol=1e-4, atol=1e-5)
    assert weights == got[1][1]                             # ranks hold identical weights
    # train.report_to: only rank 0 logs (both ranks share the run directory): one event file, each step once
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [events] = list((tmp_path / "ddp" / "tensorboard").glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events))
    acc.Reload()
    assert [(e.step, round(e.value, 5)) for e in acc.Scalars("train/loss")] == [(r["step"], round(r["loss"], 5)) for r in m2]
