"""`train.micro_batch_size: auto` (the default) and memory that cannot hold a batch: the largest
micro-batch that fits is picked from probe forward passes, the global batch is kept by
accumulation (same results), and a size or a model that cannot fit is one message before the
first step, naming the memory needed and available and the keys to change."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
import torch
from conftest import assert_user_error, run_cli
from train_standins import RowDataset, TinyModel, collate

from bertcli.config.recipe import load_recipe
from bertcli.core.errors import UserError
from bertcli.train import memory
from bertcli.train.loop import Trainer, TrainInputs
from bertcli.train.metrics import TIMING_KEYS, read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)

BASE = ["train.max_steps=6", "train.warmup_steps=2", "train.batch_size=8", "train.learning_rate=0.01",
        "train.log_every=1", "train.eval_every=3", "train.eval_batches=2", "train.save_every=6",
        "train.num_workers=0", "train.tensorboard=false", "seed=3", "data.max_seq_length=64"]


def trainer(tmp_path, name, *overrides, dropout=0.1):
    recipe = load_recipe(None, BASE + list(overrides))
    torch.manual_seed(0)
    return Trainer(TrainInputs(recipe=recipe, model=TinyModel(dropout=dropout), train_dataset=RowDataset(37),
                               val_dataset=RowDataset(10, offset=1000), n_train=37, n_val=10, collate=collate,
                               hf_save=lambda m, d: (d / "config.json").write_text("{}"), run_dir=tmp_path / name))


def records(t: Trainer):
    t.fit()
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(t.inp.run_dir / "metrics.jsonl")]


def squeeze(monkeypatch, sequences: float):
    """Make the device hold the static memory plus about `sequences` probe sequences."""
    real_plan = memory.plan

    def tight(local, static, per_seq, fixed, available, source, requested, length, **kw):
        room = int(static + memory.MARGIN * (fixed + per_seq * sequences)) + memory.RESERVE
        return real_plan(local, static, per_seq, fixed, room, "squeezed by the test", requested, length, **kw)
    monkeypatch.setattr(memory, "plan", tight)


def test_auto_is_the_default_and_with_room_runs_the_whole_batch_bitwise_as_explicit(tmp_path, capfd):
    auto = trainer(tmp_path, "auto")
    assert load_recipe(None).train.micro_batch_size == "auto" and (auto.micro, auto.accum) == (8, 1)
    assert "train.micro_batch_size auto: micro-batch 8 of 8 at 64 tokens" in "".join(capfd.readouterr().err.split("\n"))
    assert records(auto) == records(trainer(tmp_path, "explicit", "train.micro_batch_size=8"))


@pytest.mark.parametrize("room,picked", [(2.5, 2), (4.9, 4), (1.2, 1)])
def test_auto_picks_the_largest_divisor_that_fits_and_keeps_the_results(tmp_path, monkeypatch, room, picked):
    squeeze(monkeypatch, room)
    auto = trainer(tmp_path, "auto", dropout=0.0)
    assert (auto.micro, auto.accum) == (picked, 8 // picked)
    got = records(auto)
    monkeypatch.undo()
    assert got == records(trainer(tmp_path, "explicit", f"train.micro_batch_size={picked}", dropout=0.0))  # bitwise
    whole = records(trainer(tmp_path, "whole", "train.micro_batch_size=8", dropout=0.0))   # = one big batch
    for a, b in zip(got, whole):
        for k in ("loss", "mlm_acc", "pair_acc", "val_loss"):
            if k in a:
                assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), (a["step"], k)


def test_the_probe_does_not_change_what_training_draws(tmp_path):
    """The probe's forward passes run dropout: measure() puts the RNG back as it found it."""
    t = trainer(tmp_path, "probe")
    torch.manual_seed(5)
    state = torch.get_rng_state()
    per_seq, _ = memory.measure(lambda m: t._probe(m, 64), t.model)
    assert per_seq > 0 and torch.equal(torch.get_rng_state(), state)


def test_the_probe_grows_with_the_rows_as_activations_do(tmp_path):
    t = trainer(tmp_path, "grow")
    a, _ = memory.measure(lambda m: t._probe(m, 32), t.model)
    b, _ = memory.measure(lambda m: t._probe(m, 128), t.model)
    assert 3.0 < b / a < 5.0, (a, b)                  # TinyModel keeps [T, H] per layer: linear in T


def test_an_explicit_size_that_cannot_fit_is_one_message_before_the_first_step(tmp_path, monkeypatch):
    squeeze(monkeypatch, 2.5)
    with pytest.raises(UserError) as info:
        trainer(tmp_path, "big", "train.micro_batch_size=8")
    e = info.value
    assert "train.micro_batch_size 8 at 64 tokens needs about" in e.what and "are available (squeezed" in e.what
    assert "train.micro_batch_size: 2 (or auto) fits" in e.fix and "data.max_seq_length" in e.fix
    assert not (tmp_path / "big").exists()            # nothing was written


def test_a_model_that_cannot_fit_even_one_sequence_is_one_message(tmp_path, monkeypatch):
    squeeze(monkeypatch, 0.3)
    with pytest.raises(UserError, match="does not fit even at one sequence per micro-batch") as info:
        trainer(tmp_path, "huge")
    assert "model.hidden_size" in info.value.fix and "train.device" in info.value.fix


def test_cpu_memory_counts_meminfo_and_the_address_space_limit():
    code = ("import resource; from bertcli.train.memory import available_bytes; import torch; "
            "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY)); "
            "print(*available_bytes(torch.device('cpu')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) < 6 << 30
    free, source = memory.available_bytes(torch.device("cpu"))
    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        assert source == "MemAvailable" and free == memory._meminfo_available()


@pytest.fixture(scope="module")
def stage_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("stages")        # both CLI tests share the built stages


def _pretrain(tmp_path, cache, *sets):
    common = ["corpus.sources=[{path: builtin, max_documents: 20}]", "tokenizer.vocab_size=200",
              "data.max_seq_length=512", "model.max_position_embeddings=512", "train.max_steps=1",
              f"output_dir={tmp_path / 'run'}", f"cache_dir={cache}"]
    return run_cli("pretrain", "-r", "bert-tiny", *[x for s in (*common, *sets) for x in ("--set", s)],
                   cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})


def test_the_cli_refuses_an_impossible_micro_batch_before_training(tmp_path, stage_cache):
    r = _pretrain(tmp_path, stage_cache, "model.hidden_size=64", "model.num_hidden_layers=2",
                  "model.num_attention_heads=2", "model.intermediate_size=128",
                  "train.batch_size=131072", "train.micro_batch_size=131072")
    if r.rc == 0:
        pytest.skip("this machine holds 131072 x 512 tokens of activations")
    assert_user_error(r, "train.micro_batch_size 131072 at 512 tokens needs about", "are available (MemAvailable")
    assert "step 1" not in r.output and not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_model_too_big_to_build_is_refused_before_allocation(tmp_path, stage_cache):
    r = _pretrain(tmp_path, stage_cache, "model.hidden_size=32768", "model.num_hidden_layers=64",
                  "model.num_attention_heads=64", "model.intermediate_size=131072", "train.batch_size=4")
    assert_user_error(r, "the model does not fit", "parameters need", "model.hidden_size")
