"""A two-phase pretraining run through the real CLI (recipe bert-tiny-2phase, shrunk): 45 steps
at 64 tokens, then 5 at 128, in one run. The boundary in metrics.jsonl, the rows each phase
trained on, the 128-token data built only when phase 2 starts, and SIGKILLs at the boundary and
inside phase 2 that resume bitwise."""

from __future__ import annotations

import json
import re
import shutil
import signal
from pathlib import Path

import pytest
from conftest import ONE_THREAD, finish, popen_cli, run_cli, wait_paused

from bertcli.train import checkpoint as ck
from bertcli.train.metrics import TIMING_KEYS, read_metrics
from bertcli.train.schedule import lr_multiplier

pytestmark = pytest.mark.slow

# The recipe's phases are 0.9 / 0.1 of max_steps: 45 + 5 steps of 16 rows.
SMALL = ["corpus.sources=[{path: builtin, max_documents: 80}]", "corpus.validation_fraction=0.1",
         "tokenizer.vocab_size=600", "data.dupe_factor=1", "model.hidden_size=64", "model.intermediate_size=128",
         "train.batch_size=16", "train.max_steps=50", "train.warmup_steps=4", "train.learning_rate=3e-3",
         "train.log_every=1", "train.eval_every=25", "train.save_every=3", "train.eval_batches=4"]


def args(out: Path, cache: Path, *extra: str) -> list[str]:
    sets = [*SMALL, f"output_dir={out}", f"cache_dir={cache}"]
    return ["pretrain", "-r", "bert-tiny-2phase", *[x for s in sets for x in ("--set", s)], *extra]


def model_records(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(path)]


def data_stages(cache: Path) -> dict[int, Path]:
    """The cache's complete data stages by their max_seq_length."""
    import yaml

    out = {}
    for p in cache.glob("data-*"):
        if (p / "recipe.yaml").is_file():
            out[yaml.safe_load((p / "recipe.yaml").read_text())["data"]["max_seq_length"]] = p
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("phases")


@pytest.fixture(scope="module")
def reference(work):
    out = work / "ref"
    res = run_cli(*args(out, work / "cache"), cwd=work, env=ONE_THREAD)
    assert res.rc == 0, res.output
    return out, res


def test_one_run_two_phases_boundary_and_row_lengths(reference, work):
    out, res = reference
    m = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in m] == list(range(1, 51))
    assert [r["phase"] for r in m] == ["short"] * 45 + ["long"] * 5
    # rows the phases trained on: at most 64 tokens, then longer ones (NSP pairs aim at 128)
    assert all(r["tokens_per_seq"] <= 64 for r in m[:45])
    assert all(r["tokens_per_seq"] > 64 for r in m[45:]), [r["tokens_per_seq"] for r in m[45:]]
    # one schedule through the boundary (the recipe's phases set none of their own)
    assert [r["lr"] for r in m] == pytest.approx([3e-3 * lr_multiplier(s, 4, 50) for s in range(1, 51)], rel=1e-9)
    assert "val_loss" in m[24] and "val_loss" in m[44] and "val_loss" in m[49]   # eval_every 25 + phase end
    # each phase's data is its own stage, keyed by its settings, and holds rows of its length
    from datasets import load_from_disk

    stages = data_stages(work / "cache")
    assert set(stages) == {64, 128}
    lengths = {n: max(len(x) for x in load_from_disk(str(p))["train"]["input_ids"]) for n, p in stages.items()}
    assert lengths[64] <= 64 and 64 < lengths[128] <= 128, lengths
    # the 128-token data was built when phase 2 started, after phase 1's last step
    assert res.stderr.index("data long: built") > res.stderr.index("step 45/50"), res.stderr
    assert "phase short" in res.stdout and "steps 46-50, 128 tokens" in res.stdout
    final = ck.read(ck.latest(out)).state.state_dict()
    assert (final["phase_name"], final["phase_start"], final["phase_samples"]) == ("long", 45, 5 * 16)


def test_sigkill_at_the_boundary_and_in_phase_two_resume_bitwise(reference, work):
    """Held before step 46 (phase 1 done, its end checkpointed, phase 2's data not built) and
    killed -9; resumed, it builds phase 2's data, is held before step 50 (step-48 checkpoint
    inside phase 2) and killed -9 again; resumed again, it finishes. Every model metric of every
    step equals the uninterrupted run's, float for float."""
    reference_records = model_records(reference[0] / "metrics.jsonl")
    out, cache = work / "killed", work / "killed-cache"
    # the reference run's tokenizer and phase-1 data (the same stages it would build), not its
    # phase-2 data: this run builds that itself when it gets there
    for p in (work / "cache").iterdir():
        if p.name.startswith(("corpus-", "tokenizer-")) or p == data_stages(work / "cache")[64]:
            shutil.copytree(p, cache / p.name)
    proc = popen_cli(*args(out, cache), cwd=work, pause="train-step-46", env=ONE_THREAD)
    wait_paused(proc)
    assert set(data_stages(cache)) == {64}                # the 128-token data is not built yet
    boundary = ck.read(out / "checkpoints" / "step-0000045").state.state_dict()
    assert (boundary["phase_name"], boundary["phase_samples"]) == ("short", 45 * 16)
    proc.send_signal(signal.SIGKILL)
    assert finish(proc).rc == -signal.SIGKILL

    proc = popen_cli(*args(out, cache, "--resume", "auto"), cwd=work, pause="train-step-50", env=ONE_THREAD)
    wait_paused(proc)
    assert set(data_stages(cache)) == {64, 128}
    inside = ck.read(out / "checkpoints" / "step-0000048").state.state_dict()
    assert (inside["phase_name"], inside["phase_start"], inside["phase_samples"]) == ("long", 45, 3 * 16)
    proc.send_signal(signal.SIGKILL)
    res = finish(proc)
    assert "resuming from" in res.stderr and "step 45" in res.stderr and "data long: built" in res.stderr, res.stderr

    res = run_cli(*args(out, cache, "--resume", "auto"), cwd=work, env=ONE_THREAD)
    assert res.rc == 0, res.output
    assert re.search(r"resuming from .*step-0000048 \(step 48", res.stderr), res.stderr
    assert model_records(out / "metrics.jsonl") == reference_records


def test_build_data_builds_the_first_phase_or_all_phases(reference, work):
    cache = work / "bd-cache"
    for p in (work / "cache").iterdir():                   # the tokenizer is not what this tests
        if p.name.startswith(("corpus-", "tokenizer-")):
            shutil.copytree(p, cache / p.name)
    sets = [x for s in [*SMALL, f"output_dir={work / 'bd'}", f"cache_dir={cache}"] for x in ("--set", s)]
    res = run_cli("build-data", "-r", "bert-tiny-2phase", *sets, cwd=work, env=ONE_THREAD)
    assert res.rc == 0, res.output
    assert "data short (built)" in res.stdout and "long" not in res.stdout
    assert set(data_stages(cache)) == {64}
    res = run_cli("build-data", "-r", "bert-tiny-2phase", *sets, "--all-phases", cwd=work, env=ONE_THREAD)
    assert res.rc == 0, res.output
    assert "data short (reused)" in res.stdout and "data long (built)" in res.stdout
    assert set(data_stages(cache)) == {64, 128}
    info = json.loads((data_stages(cache)[128] / "build_info.json").read_text())
    assert info                                            # a complete stage with its counts
