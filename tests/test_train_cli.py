"""`bertcli pretrain` end to end through the real CLI, on tiny models and a slice of the
built-in corpus: one run per family (NSP, SOP, MLM-only), transformers loading the final
checkpoint, learning above the most-frequent-token baseline, kill-and-resume equality, errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
from conftest import ONE_THREAD, assert_user_error, finish, popen_cli, run_cli, wait_paused, write_documents
from helpers.recipes import TINY

from bertcli.config.recipe import load_recipe
from bertcli.core.errors import UserError
from bertcli.train.metrics import TIMING_KEYS, read_metrics
from bertcli.train.resume import prepare_run

pytestmark = pytest.mark.slow

FAMILY = {"bert": ("bert-tiny", []), "albert": ("albert-tiny", ["model.embedding_size=32", "train.learning_rate=3e-2"]),
          "roberta": ("roberta-tiny", [])}


def pretrain(recipe: str, out: Path, *sets: str, cache: Path | None = None, extra=()):
    args = ["pretrain", "--recipe", recipe, *[x for s in (*TINY, *sets) for x in ("--set", s)],
            "--set", f"output_dir={out}"]
    if cache is not None:
        args += ["--set", f"cache_dir={cache}"]
    return run_cli(*args, *extra, cwd=out.parent, env=ONE_THREAD)


def model_records(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(path)]


def counting_corpus(path: Path) -> Path:
    """Documents whose masked words follow from their context ("... counts four five six ...")."""
    import random

    words = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
             "fifteen sixteen seventeen eighteen nineteen twenty").split()
    rng = random.Random(0)
    docs = []
    for _ in range(300):
        doc = []
        for _ in range(rng.randint(4, 8)):
            a, n = rng.randint(0, 12), rng.randint(4, 8)
            doc.append(f"the {rng.choice(['red', 'green', 'blue', 'black'])} list counts "
                       f"{' '.join(words[a:a + n])} and stops at {words[a + n - 1]} .")
        docs.append(doc)
    return write_documents(path, docs)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pretrain")


@pytest.fixture(scope="module")
def bert_sets(work) -> list[str]:
    """The BERT runs train on text whose masked words follow from context, so that 40 steps
    already show learning beyond the most-frequent-token baseline."""
    return [f"corpus.sources=[{counting_corpus(work / 'counting.txt')}]", "tokenizer.vocab_size=200"]


@pytest.fixture(scope="module")
def bert_run(work, bert_sets):
    out = work / "bert"
    res = pretrain("bert-tiny", out, *bert_sets, cache=work / "cache")
    assert res.rc == 0, res.output
    return out, res


# ------------------------------------------------------------------------------ families
def _assert_learns(records: list[dict], pair: bool):
    assert [r["step"] for r in records] == list(range(1, 41))
    first = sum(r["loss"] for r in records[:5]) / 5
    last = sum(r["loss"] for r in records[-5:]) / 5
    assert last < first - 0.5, (first, last)
    for r in records:
        assert (r["pair_acc"] is not None) == pair and (r["pair_loss"] is not None) == pair
        assert r["loss"] == pytest.approx(r["mlm_loss"] + (r["pair_loss"] or 0.0))
    assert "val_loss" in records[19] and "val_loss" in records[39] and "val_loss" not in records[20]


def test_bert_pretrain_nsp_runs_all_stages_and_learns(bert_run):
    out, res = bert_run
    assert "tokenizer: built" in res.stderr and "data: built" in res.stderr
    _assert_learns(read_metrics(out / "metrics.jsonl"), pair=True)
    assert "pretrain bert-tiny: done" in res.stdout and str(out / "final") in res.stdout
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == ["step-0000030", "step-0000040"]               # bert-tiny keeps the last 2
    # final/ is the model to load and share: no optimizer, no second copy of the weights
    assert not (out / "final" / "trainer_state").exists() and (out / "final" / "model.safetensors").is_file()
    state = json.loads((out / "checkpoints" / "step-0000040" / "trainer_state" / "state.json").read_text())
    assert state["step"] == 40 and state["consumed_samples"] == 40 * 16


def test_validation_accuracy_beats_the_most_frequent_token_baseline(bert_run):
    """40 steps predict the masked words far better than always guessing the validation set's
    most frequent masked token (about 2x here; the quickstart's numbers on real text are in
    README.md's quickstart summary)."""
    out, res = bert_run
    final = read_metrics(out / "metrics.jsonl")[-1]
    assert final["val_mlm_acc"] > final["val_mlm_majority_acc"] + 0.05, final
    assert f"(most-frequent-token baseline {final['val_mlm_majority_acc']:.4f})" in res.stdout


@pytest.mark.parametrize("family", ["albert", "roberta"])
def test_albert_sop_and_roberta_mlm_only_learn(work, family):
    recipe, sets = FAMILY[family]
    out = work / family
    res = pretrain(recipe, out, *sets)
    assert res.rc == 0, res.output
    _assert_learns(read_metrics(out / "metrics.jsonl"), pair=family == "albert")


def test_final_checkpoint_loads_in_transformers_with_the_same_logits(bert_run):
    import transformers

    from bertcli.model import load_checkpoint

    final = bert_run[0] / "final"
    ours, _ = load_checkpoint(final)
    theirs = transformers.AutoModelForPreTraining.from_pretrained(final)
    tok = transformers.AutoTokenizer.from_pretrained(final)
    enc = tok(["the module returns a list of [MASK] values", "errors are raised when"],
              ["it is called twice", "the file is missing"], padding=True, return_tensors="pt")
    ours.eval(), theirs.eval()
    with torch.no_grad():
        o = ours(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
        t = theirs(**enc)
    keep = enc["attention_mask"].bool()
    torch.testing.assert_close(o.mlm_logits[keep], t.prediction_logits[keep], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(o.pair_logits, t.seq_relationship_logits, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------- resume
def _popen(recipe, out, cache, sets, *extra, pause: str):
    args = ["pretrain", "--recipe", recipe, *[x for s in (*TINY, *sets) for x in ("--set", s)],
            "--set", f"output_dir={out}", "--set", f"cache_dir={cache}", *extra]
    return popen_cli(*args, cwd=out.parent, pause=pause, env=ONE_THREAD)


def test_sigkill_then_resume_auto_gives_bitwise_the_same_metrics(work, bert_run, bert_sets):
    """The run is held before step 13 (after the step-10 checkpoint and two more logged steps)
    and killed -9 there; resumed, it is held before step 23 and its process group gets SIGTERM
    (it finishes step 23, saves and exits 143); resumed again, it runs to the end. Every model
    metric of every step equals the uninterrupted run's, float for float. The test holds the
    process at each point (bertcli/core/testhooks.py), so no machine is too fast or too slow for it."""
    reference = model_records(bert_run[0] / "metrics.jsonl")
    out = work / "killed"
    out.mkdir()
    proc = _popen("bert-tiny", out, work / "cache", bert_sets, pause="train-step-13")
    wait_paused(proc)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == list(range(1, 13))
    proc.send_signal(signal.SIGKILL)
    res = finish(proc)
    assert res.rc == -signal.SIGKILL
    assert "tokenizer: reused" in res.stderr and "data: reused" in res.stderr, res.stderr
    assert not (out / "final").exists() and (out / "checkpoints" / "step-0000010").is_dir()

    proc = _popen("bert-tiny", out, work / "cache", bert_sets, "--resume", "auto", pause="train-step-23")
    wait_paused(proc)
    os.killpg(proc.pid, signal.SIGTERM)                    # the whole group: main process and workers
    res = finish(proc)
    assert res.rc == 128 + signal.SIGTERM, res.output
    assert "resuming from" in res.stderr and "stopped by signal at step 23" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    state = json.loads((out / "checkpoints" / "step-0000023" / "trainer_state" / "state.json").read_text())
    assert state["step"] == 23

    res = pretrain("bert-tiny", out, *bert_sets, cache=work / "cache", extra=["--resume", "auto"])
    assert res.rc == 0, res.output
    assert "step 23" in res.stderr
    assert model_records(out / "metrics.jsonl") == reference


# --------------------------------------------------------------------------------- errors
def test_an_output_directory_holding_another_run_is_refused_untouched(work, bert_run, bert_sets):
    out = bert_run[0]
    before = (out / "metrics.jsonl").read_bytes()
    res = pretrain("bert-tiny", out, *bert_sets, "train.learning_rate=1e-3", cache=work / "cache")
    assert_user_error(res, "another recipe", "train.learning_rate: 0.003 -> 0.001", "--force")
    assert (out / "metrics.jsonl").read_bytes() == before


def test_resume_refuses_a_changed_model_and_a_damaged_checkpoint(work, bert_run, bert_sets):
    out = bert_run[0]
    res = pretrain("bert-tiny", work / "other", *bert_sets, "model.intermediate_size=96", cache=work / "cache",
                   extra=["--resume", str(out / "checkpoints" / "step-0000040")])
    assert_user_error(res, "model changed since the checkpoint", "model.intermediate_size: 128 -> 96")
    damaged = work / "damaged"
    shutil.copytree(out / "checkpoints" / "step-0000040", damaged)
    blob = damaged / "trainer_state" / "model.safetensors"
    blob.write_bytes(blob.read_bytes()[:100])
    res = pretrain("bert-tiny", work / "other", *bert_sets, cache=work / "cache", extra=["--resume", str(damaged)])
    assert_user_error(res, "damaged", "model.safetensors")
    assert not (work / "other").exists()


def test_prepare_run_refusals(work, bert_run, bert_sets):
    """The other refusals, through the function the CLI calls (no extra process start)."""
    out = bert_run[0]
    recipe = load_recipe("bert-tiny", [*TINY, *bert_sets, f"output_dir={out}", f"cache_dir={work / 'cache'}"])
    with pytest.raises(UserError, match="already holds this recipe's run"):
        prepare_run(recipe, None, False)
    with pytest.raises(UserError, match="contradict"):
        prepare_run(recipe, "auto", True)
    with pytest.raises(UserError, match="not a bertcli training checkpoint"):
        prepare_run(recipe, str(work / "cache"), False)           # a directory without trainer state
    assert prepare_run(recipe, "auto", False).path == out / "checkpoints" / "step-0000040"
    with pytest.raises(UserError, match="final/ holds the model and tokenizer only"):
        prepare_run(recipe, str(out / "final"), False)
    assert prepare_run(recipe, None, True) is None                 # --force: start over
    longer = load_recipe("bert-tiny", [*TINY, *bert_sets, f"output_dir={out}", "train.max_steps=60"])
    assert prepare_run(longer, "auto", False).step == 40          # a longer run may continue
    other_data = load_recipe("bert-tiny", [*TINY, *bert_sets, f"output_dir={out}", "data.dupe_factor=2"])
    with pytest.raises(UserError, match="other data: data.dupe_factor"):
        prepare_run(other_data, "auto", False)
