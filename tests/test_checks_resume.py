"""Runs that go wrong and runs that resume: non-finite weights never become a checkpoint (final/
least of all), the trainer state is one TrainState schema, a resume refuses a tokenizer or data
stage rebuilt with other content (by sha256), and `--resume auto` falls back from a damaged
newest checkpoint to the previous complete one, setting the damaged one aside, not deleting it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import assert_user_error
from helpers.pretrain import finished_run, model_records, pretrain_cli, recipe_for
from train_standins import RowDataset, TinyModel, collate
from train_standins import hf_save_stub as _hf_save

from bertcli.core.errors import UserError
from bertcli.train import checkpoint as ck
from bertcli.train.loop import Trainer, TrainInputs
from bertcli.train.metrics import read_metrics
from bertcli.train.resume import prepare_run

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)


def train(run_dir: Path, *overrides, resume=None, model=None):
    torch.manual_seed(0)
    inputs = TrainInputs(recipe=recipe_for(run_dir, *overrides), model=model or TinyModel(dropout=0.0),
                         train_dataset=RowDataset(37), val_dataset=RowDataset(10, offset=1000), n_train=37, n_val=10,
                         collate=collate, hf_save=_hf_save, run_dir=run_dir, resume=resume,
                         inputs_sha256={"tokenizer_sha256": "t" * 64, "data_sha256": "d" * 64})
    return Trainer(inputs).fit()


# ---------------------------------------------------------------------------- non-finite weights
class PoisonedAt(TinyModel):
    """Weights that turn non-finite in the forward pass of update `step` (whatever the cause:
    an overflowing update, a bad kernel, a cosmic ray), with finite losses before."""

    # train.micro_batch_size auto (the default) measures the activations of two probe forward
    # passes (1 and 2 sequences, bertcli.train.memory.measure) before the first update
    PROBE_FORWARDS = 2

    def __init__(self, step: int, value: float):
        super().__init__(dropout=0.0)
        self.calls, self.step, self.value = 0, step + self.PROBE_FORWARDS, value

    def forward(self, *args, **kw):
        if self.training:
            self.calls += 1
            if self.calls == self.step:
                with torch.no_grad():
                    self.ff.weight[0, 0] = self.value
        return super().forward(*args, **kw)


@pytest.mark.parametrize("step,value", [(5, float("nan")), (7, float("inf")), (3, float("-inf"))])
def test_non_finite_weights_never_become_a_checkpoint_or_final(tmp_path, step, value):
    run_dir = tmp_path / "run"
    with pytest.raises(UserError) as info:
        train(run_dir, "train.max_bad_steps=100", model=PoisonedAt(step, value))
    good = [p.name for p in ck.list_checkpoints(run_dir)]
    last_good = (step - 1) // 2 * 2                       # saves every 2 steps, before the poisoned update
    assert good == [f"step-{s:07d}" for s in range(2, last_good + 1, 2)]
    assert not (run_dir / "final").exists()
    assert "weights are not finite" in info.value.what and "ff.weight" in info.value.what
    assert f"step-{last_good:07d}" in info.value.fix and "--resume auto" in info.value.fix
    from safetensors.torch import load_model

    restored = TinyModel()
    load_model(restored, str(ck.read(run_dir / "checkpoints" / good[-1]).path / "trainer_state" / "model.safetensors"))
    assert ck.nonfinite_tensors(restored) == []                 # the kept checkpoint is a good one
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():   # strict JSON all along
        json.loads(line, parse_constant=lambda t: pytest.fail(f"{t} in metrics.jsonl"))


def test_an_overflowing_learning_rate_stops_with_no_checkpoint_at_all(tmp_path):
    """A learning rate beyond float32 (1e39, finite as a float64) is refused when the recipe loads
    (train.learning_rate's upper bound); weights that turn non-finite in the very first update
    (what such a rate did) stop the run with no checkpoint at all, one message saying so."""
    run_dir = tmp_path / "run"
    with pytest.raises(UserError, match=r"train.learning_rate: must be <= 10.0, got 1e\+39"):
        train(run_dir, "train.learning_rate=1e39", "train.warmup_steps=0", "train.grad_clip=null")
    with pytest.raises(UserError, match="weights are not finite after step 2") as info:
        train(run_dir, "train.warmup_steps=0", "train.max_bad_steps=100", model=PoisonedAt(1, float("inf")))
    assert "no earlier checkpoint exists" in info.value.fix
    assert ck.list_checkpoints(run_dir) == [] and not (run_dir / "final").exists()


# ------------------------------------------------------------------------------------ TrainState
def test_train_state_is_one_schema_that_round_trips(tmp_path):
    run_dir = tmp_path / "run"
    train(run_dir)
    c = ck.read(ck.latest(run_dir), require=ck.TrainState.required_keys())
    assert isinstance(c.state, ck.TrainState) and c.state.step == 8 and c.state.consumed_samples == 64
    assert c.state.tokenizer_sha256 == "t" * 64 and c.state.data_sha256 == "d" * 64
    raw = json.loads((c.path / "trainer_state" / "state.json").read_text())
    assert {k: raw[k] for k in c.state.state_dict()} == c.state.state_dict()
    again = ck.TrainState.from_state_dict({**raw, "future_key": [1, 2]})
    assert again.extra == {"future_key": [1, 2]} and again.state_dict()["future_key"] == [1, 2]
    assert set(ck.TrainState.required_keys()) == {"step", "consumed_samples", "tokens", "scheduler", "interval_sums"}


# ------------------------------------------------------------------------ damaged newest checkpoint
def _truncate(p: Path):
    blob = p / "trainer_state" / "optimizer.safetensors"
    blob.write_bytes(blob.read_bytes()[:-7])


def _garble_header(p: Path):
    blob = p / "trainer_state" / "model.safetensors"
    data = bytearray(blob.read_bytes())
    data[8:16] = b"\xff" * 8                              # same size, unreadable header
    blob.write_bytes(bytes(data))


def _bad_json(p: Path):
    (p / "trainer_state" / "state.json").write_text("{not json")


def _lacks_keys(p: Path):
    f = p / "trainer_state" / "state.json"
    s = json.loads(f.read_text())
    del s["scheduler"]
    f.write_text(json.dumps(s))


def _no_recipe(p: Path):
    (p / "recipe.yaml").unlink()


DAMAGES = {"truncated": (_truncate, "missing or truncated"), "header": (_garble_header, "unreadable header"),
           "json": (_bad_json, "unreadable"), "keys": (_lacks_keys, "lacks scheduler"),
           "recipe": (_no_recipe, "recipe.yaml is missing")}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("full")
    torch.set_num_threads(1)
    train(root / "run")
    return root / "run"


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_resume_auto_falls_back_from_a_damaged_newest_checkpoint(tmp_path, full_run, damage, capfd):
    # a run killed after its step-6 checkpoint, whose step-6 checkpoint is then damaged
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    for s in (2, 4, 6):
        shutil.copytree(full_run / "checkpoints" / f"step-{s:07d}", run_dir / "checkpoints" / f"step-{s:07d}")
    lines = (full_run / "metrics.jsonl").read_text().splitlines()[:7]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    recipe_for(run_dir).save(run_dir)
    breaker, reason = DAMAGES[damage]
    newest = run_dir / "checkpoints" / "step-0000006"
    breaker(newest)

    chosen = prepare_run(recipe_for(run_dir), "auto", False)
    assert chosen.path == run_dir / "checkpoints" / "step-0000004"
    assert [(p, reason in why) for p, why in chosen.set_aside] == [(newest, True)]
    ck.set_aside_damaged(chosen)
    err = "".join(capfd.readouterr().err.split())             # the console wraps long lines
    for needle in ("step-0000006 is damaged", reason, "not deleted", "resuming from", "step-0000004"):
        assert "".join(needle.split()) in err, (needle, err)
    assert not newest.exists() and (run_dir / "checkpoints" / "damaged-step-0000006").is_dir()   # kept, aside

    train(run_dir, resume=chosen, model=TinyModel(dropout=0.0))
    assert model_records(run_dir) == model_records(full_run)         # bitwise the uninterrupted run
    assert (run_dir / "checkpoints" / "damaged-step-0000006").is_dir()  # pruning leaves it alone


def test_when_every_checkpoint_is_damaged_auto_says_so_and_deletes_nothing(tmp_path, full_run):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    for s in (2, 4):
        shutil.copytree(full_run / "checkpoints" / f"step-{s:07d}", run_dir / "checkpoints" / f"step-{s:07d}")
        _truncate(run_dir / "checkpoints" / f"step-{s:07d}")
    recipe_for(run_dir).save(run_dir)
    with pytest.raises(UserError, match="every checkpoint of the run is damaged") as info:
        prepare_run(recipe_for(run_dir), "auto", False)
    assert "step-0000004" in info.value.where and "--force" in info.value.fix
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-0000002", "step-0000004"]


def test_an_explicit_damaged_checkpoint_is_still_an_error(tmp_path, full_run):
    run_dir = tmp_path / "run"
    shutil.copytree(full_run, run_dir)
    _truncate(run_dir / "checkpoints" / "step-0000006")
    with pytest.raises(UserError, match="damaged.*missing or truncated"):
        prepare_run(recipe_for(run_dir), str(run_dir / "checkpoints" / "step-0000006"), False)


# -------------------------------------------------------------------- rebuilt tokenizer / data
@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    return finished_run(tmp_path_factory.mktemp("rebuilt"))


def _copy(cli_run: Path, tmp_path: Path) -> Path:
    """The run (stages included) copied; resumed with max_steps 6, it continues from final/."""
    shutil.copytree(cli_run / "run", tmp_path / "run")
    return tmp_path / "run"


def _saved_state(run: Path) -> dict:
    return json.loads((ck.latest(run) / "trainer_state" / "state.json").read_text())


def test_resume_with_the_same_stages_continues(cli_run, tmp_path):
    run = _copy(cli_run, tmp_path)
    r = pretrain_cli(cli_run / "corpus.txt", run, "--resume", "auto", steps=6)
    assert r.rc == 0, r.output
    assert "tokenizer: reused" in r.output and "data: reused" in r.output
    assert [x["step"] for x in read_metrics(run / "metrics.jsonl")] == list(range(1, 7))
    assert _saved_state(run)["data_sha256"] == _saved_state(cli_run / "run")["data_sha256"]


def test_resume_refuses_a_tokenizer_rebuilt_with_other_content(cli_run, tmp_path):
    run = _copy(cli_run, tmp_path)
    saved = _saved_state(run)
    assert len(saved["tokenizer_sha256"]) == 64 and len(saved["data_sha256"]) == 64
    tok = next(run.glob("tokenizer-*")) / "tokenizer.json"
    spec = json.loads(tok.read_text())
    vocab = spec["model"]["vocab"]
    a, b = sorted(k for k in vocab if not k.startswith("["))[:2]          # two pieces swap their ids
    vocab[a], vocab[b] = vocab[b], vocab[a]
    tok.write_text(json.dumps(spec))
    r = pretrain_cli(cli_run / "corpus.txt", run, "--resume", "auto", steps=6)
    assert_user_error(r, "rebuilt since the checkpoint", "get the original back")
    flat = "".join(r.output.split())
    assert f"tokenizer:thecheckpointwastrainedonsha256{saved['tokenizer_sha256']}" in flat
    assert "".join(str(tok).split()) in flat                              # names the file and its new hash


def test_resume_refuses_data_rebuilt_with_other_content(cli_run, tmp_path):
    """The corpus file replaced by one of the same size and time (the stage key does not see it),
    the data stage rebuilt from it: the row count may even agree, the content hash does not."""
    run = _copy(cli_run, tmp_path)
    saved = _saved_state(run)
    corpus = cli_run / "corpus.txt"
    original, st = corpus.read_text(), corpus.stat()
    try:
        corpus.write_text(original.replace("alpha", "omega"))
        os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
        for d in [*run.glob("corpus-*"), *run.glob("data-*")]:       # the cached documents too
            shutil.rmtree(d)
        r = pretrain_cli(corpus, run, "--resume", "auto", steps=6)
    finally:
        corpus.write_text(original)
        os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "tokenizer: reused" in r.output and "data: built" in r.output
    assert_user_error(r, "rebuilt since the checkpoint")
    flat = "".join(r.output.split())
    assert f"data:thecheckpointwastrainedonsha256{saved['data_sha256']}" in flat and "tokenizer:the" not in flat


@pytest.mark.parametrize("name", ["trackers.json", "metrics.jsonl", "wandb"])
@pytest.mark.parametrize("mode", [dict(resume=None, force=False), dict(resume=None, force=True),
                                  dict(resume="auto", force=False)])
def test_a_run_file_no_bertcli_run_wrote_is_kept_in_every_mode(tmp_path, name, mode):
    """A file (or folder) with a run file's name but no recipe.yaml beside it is the user's: a run
    writes recipe.yaml first. prepare_run refuses before any work, --force included, and the
    file is untouched."""
    from bertcli.train.resume import prepare_run

    mine = tmp_path / name
    if name == "wandb":
        mine.mkdir()
        (mine / "notes.txt").write_text("mine\n")
    else:
        mine.write_text("mine\n")
    with pytest.raises(UserError, match="but no recipe.yaml") as e:
        prepare_run(recipe_for(tmp_path), **mode)
    assert name in str(e.value) and str(tmp_path) in str(e.value)
    assert (mine / "notes.txt" if name == "wandb" else mine).read_text() == "mine\n"
