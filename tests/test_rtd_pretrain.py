"""`bertcli pretrain` with train.objective: rtd, in process: it trains (both losses fall into the
checkpoint), resumes bit for bit at a phase boundary and under a time budget, equals itself run
as two DDP processes, and writes the discriminator and generator/ as checkpoints."""

from __future__ import annotations

import csv
import json
import shutil
import signal

import pytest
import torch
from conftest import ONE_THREAD, finish, popen_cli, run_cli, wait_paused, write_documents
from helpers.ddp import torchrun
from helpers.pretrain import CLI_TINY, model_records, pretrain_cli

from bertcli.config.recipe import load_recipe
from bertcli.model.checkpoint import load_checkpoint, read_weights
from bertcli.train.loop import Trainer
from bertcli.train.metrics import read_metrics
from bertcli.train.phases import budget_multiplier

RTD = ["--set", "train.objective=rtd", "--set", "data.masking=dynamic", "--set", "data.objective=none",
       "--set", "model.hidden_dropout_prob=0", "--set", "model.attention_probs_dropout_prob=0"]
# Two phases of 2 steps, 16 then 32 tokens: the step-2 checkpoint is the phase boundary.
PHASES = ["--set", "train.phases=[{steps: 2, data: {max_seq_length: 16, max_predictions_per_seq: 3}}, {steps: 2}]"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("rtd")
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    docs = [[" ".join(words[(d + s + k) % len(words)] for k in range(6 + s % 3)) + " ." for s in range(5)]
            for d in range(30)]
    write_documents(root / "corpus.txt", docs)
    whole = pretrain_cli(root / "corpus.txt", root / "whole", *RTD, *PHASES)
    assert whole.rc == 0, whole.output
    # as if killed after step 2's checkpoint (the phase boundary): the later checkpoint and final/ gone
    shutil.copytree(root / "whole", root / "split")
    shutil.rmtree(root / "split" / "final")
    shutil.rmtree(root / "split" / "checkpoints" / "step-0000004")
    rest = pretrain_cli(root / "corpus.txt", root / "split", *RTD, *PHASES, "--resume", "auto")
    assert rest.rc == 0, rest.output
    return root


def test_rtd_resume_at_the_phase_boundary_is_bitwise(runs):
    a, b = read_weights(runs / "whole" / "final"), read_weights(runs / "split" / "final")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    ga, gb = read_weights(runs / "whole" / "final" / "generator"), read_weights(runs / "split" / "final" / "generator")
    assert all(ga[k].equal(gb[k]) for k in ga)
    whole = model_records(runs / "whole")
    assert whole[-1] == model_records(runs / "split")[-1]
    assert [r["phase"] for r in whole if "loss" in r] == ["phase1"] * 2 + ["phase2"] * 2
    last = [r for r in whole if "val_rtd_loss" in r][-1]     # the discriminator's figures are logged
    assert 0 < last["val_rtd_loss"] < 1 and 0.5 < last["val_rtd_acc"] <= 1
    assert last["val_loss"] == pytest.approx(last["val_mlm_loss"] + 50 * last["val_rtd_loss"])


def test_sigkill_mid_phase_two_then_resume_is_bitwise(runs):
    """A real kill -9: the run is held before step 4 (after the step-2 checkpoint at the phase
    boundary and step 3 logged), killed, and resumed with --resume auto. Every model metric of
    every step, the discriminator and the generator equal the uninterrupted run's bit for bit
    (the generator's samples are keyed per (seed, step, row), so the replayed step 3 draws the
    same replacements)."""
    out = runs / "killed"
    sets = [*CLI_TINY, f"corpus.sources=[{runs / 'corpus.txt'}]", f"output_dir={out}", "train.max_steps=4"]
    args = ["pretrain", "-r", "bert-tiny", *[x for s in sets for x in ("--set", s)], *RTD, *PHASES]
    proc = popen_cli(*args, cwd=runs, pause="train-step-4", env=ONE_THREAD)
    wait_paused(proc)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl") if "loss" in r] == [1, 2, 3]
    proc.send_signal(signal.SIGKILL)
    assert finish(proc).rc == -signal.SIGKILL
    assert not (out / "final").exists() and (out / "checkpoints" / "step-0000002").is_dir()
    rest = pretrain_cli(runs / "corpus.txt", out, *RTD, *PHASES, "--resume", "auto")
    assert rest.rc == 0, rest.output
    assert "resuming from" in rest.stderr, rest.stderr
    assert model_records(out) == model_records(runs / "whole")
    for sub in ("final", "final/generator"):
        a, b = read_weights(runs / "whole" / sub), read_weights(out / sub)
        assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a), sub


def test_rtd_final_holds_discriminator_and_generator(runs):
    final = runs / "whole" / "final"
    disc, _ = load_checkpoint(final, "classification", num_labels=2)
    gen = load_checkpoint(final / "generator")[0]
    assert disc.config.hidden_size == 32 and gen.config.hidden_size == 16
    d, g = read_weights(final), read_weights(final / "generator")
    word = [k for k in d if k.endswith("word_embeddings.weight")][0]
    assert d[word].equal(g[word])          # one shared table, written in both
    card = (final / "README.md").read_text()   # the card says what the directory is, and how transformers loads it
    assert "pipeline_tag: feature-extraction" in card and "AutoModelForPreTraining.from_pretrained" in card


def test_finetune_classify_reads_the_rtd_discriminator(runs):
    """`bertcli finetune classify` of an RTD final/: the discriminator's encoder, not the generator's."""
    words = "alpha beta gamma delta epsilon zeta".split()
    with open(runs / "train.csv", "w", newline="") as f:
        csv.writer(f).writerows([("text", "label"), *((f"{words[i % 6]} {words[(i * 5) % 6]}", "ab"[i % 2])
                                                       for i in range(24))])
    out = runs / "tuned"
    r = run_cli("finetune", "classify", "-c", runs / "whole" / "final", "--train", runs / "train.csv",
                "--dev", runs / "train.csv", "-o", out, "--set", "finetune.classify.epochs=1",
                "--set", "finetune.classify.batch_size=8", "--set", "finetune.classify.max_seq_length=16",
                cwd=runs, env=ONE_THREAD)
    assert r.rc == 0, r.output
    res = json.loads((out / "results.json").read_text())
    assert res["data"]["train"] == 24 and res["steps"] == 3
    tuned = read_weights(out)   # the fine-tuned encoder has the discriminator's width (32), not the generator's (16)
    assert next(v for k, v in tuned.items() if k.endswith("word_embeddings.weight")).shape[1] == 32
    assert next(v for k, v in tuned.items() if k.endswith("layer.0.output.dense.weight")).shape == (32, 64)
    # an ElectraForSequenceClassification (dense -> gelu -> out_proj): transformers gives bertcli's logits
    transformers = pytest.importorskip("transformers")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["ElectraForSequenceClassification"]
    ours = load_checkpoint(out, "classification")[0]
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    ids = torch.tensor([[2, 7, 9, 11, 3], [2, 8, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        torch.testing.assert_close(theirs(input_ids=ids, attention_mask=mask).logits, ours(ids, mask),
                                   atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("with_generator", [True, False], ids=["disc+gen", "disc-only"])
def test_rtd_continues_from_an_rtd_checkpoint(runs, with_generator):
    """--init-from an RTD final/: the discriminator (encoder + RTD head) is restored, and the
    generator too when generator/ is there (else it starts fresh at the configured shape). A
    learning rate of 1e-30 leaves the weights where they started, so final/ shows the start."""
    src = runs / "whole" / "final"
    if not with_generator:   # the discriminator alone, as transformers saves it (ElectraForPreTraining)
        transformers = pytest.importorskip("transformers")
        src = runs / "disc-only"
        transformers.AutoModelForPreTraining.from_pretrained(runs / "whole" / "final").save_pretrained(src)
        transformers.AutoTokenizer.from_pretrained(runs / "whole" / "final").save_pretrained(src)
    out = runs / f"continued-{with_generator}"
    r = run_cli("pretrain", "-r", "continue-tiny", "--init-from", src, *RTD, "--set", f"corpus.sources=[{runs / 'corpus.txt'}]",
                "--set", f"output_dir={out}", "--set", "train.max_steps=1", "--set", "train.learning_rate=1e-30",
                "--set", "train.batch_size=4", "--set", "train.eval_batches=1", "--set", "data.max_seq_length=32",
                cwd=runs, env=ONE_THREAD)
    assert r.rc == 0, r.output
    a, b = read_weights(src), read_weights(out / "final")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)   # RTD head included
    ga, gb = read_weights(runs / "whole" / "final" / "generator"), read_weights(out / "final" / "generator")
    # the shared embeddings are the discriminator's; key biases get no gradient (softmax ignores them): 0 in both
    same = [torch.allclose(ga[k], gb[k], atol=1e-6) for k in ga if "embeddings" not in k and not k.endswith("key.bias")]
    assert all(same) if with_generator else not any(same)


def test_evaluate_and_fill_mask_of_an_rtd_run_use_its_generator(runs):
    """evaluate: the MLM figures of final/ are those of final/generator, plus the discriminator's
    accuracy and AUC on the generator's replacements; fill-mask answers with the generator."""
    final = runs / "whole" / "final"

    def evaluate(checkpoint):
        r = run_cli("evaluate", "-c", checkpoint, "--corpus", runs / "corpus.txt", "--cache", runs / "eval-cache",
                    "--pppl-rows", "2", "--max-seq-length", "32", "--json", cwd=runs, env=ONE_THREAD)
        assert r.rc == 0, r.output
        return json.loads(r.stdout)

    rtd, gen = evaluate(final), evaluate(final / "generator")
    assert rtd["generator"] == str(final / "generator") and "generator" not in gen
    a, b = rtd["corpora"][0], gen["corpora"][0]
    for key in ("masked", "mlm_loss", "mlm_acc", "pseudo_perplexity"):
        assert a[key] == b[key], key
    assert "rtd_acc" not in b and 0 < a["replaced"] < 1 and 0 <= a["rtd_acc"] <= 1 and 0 <= a["rtd_auc"] <= 1
    fills = [json.loads(run_cli("fill-mask", "-c", d, "alpha [MASK] gamma", "--json", cwd=runs, env=ONE_THREAD).stdout)
             for d in (final, final / "generator")]
    assert fills[0] == fills[1]


def test_roc_auc_is_the_pairwise_probability():
    from bertcli.serve.evaluate import roc_auc

    g = torch.Generator().manual_seed(0)
    score = torch.randint(0, 6, (40,), generator=g).float()     # many ties
    label = torch.rand(40, generator=g) < 0.3
    pos, neg = score[label], score[~label]
    pairs = (pos[:, None] > neg[None]).double() + 0.5 * (pos[:, None] == neg[None]).double()
    assert roc_auc(score, label) == pytest.approx(pairs.mean().item(), abs=1e-12)
    assert roc_auc(score, torch.zeros(40, dtype=torch.bool)) is None


def test_two_process_rtd_equals_one_process(runs):
    """The same two-phase run under torchrun, 2 processes x 2 rows of the global batch of 4: the
    masks and the generator's samples are keyed per row and the losses are means over the global
    batch, so the records and the weights equal the one-process run's up to float32 sums taken in
    another order (as the MLM test in test_train_loop: rel 1e-5 on metrics, 1e-4 on weights)."""
    sets = [*CLI_TINY, f"corpus.sources=[{runs / 'corpus.txt'}]", f"output_dir={runs / 'ddp'}", "train.max_steps=4"]
    r = torchrun("-m", "bertcli", "pretrain", "-r", "bert-tiny", *[x for s in sets for x in ("--set", s)],
                 *RTD, *PHASES, cwd=runs)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    one, two = model_records(runs / "whole"), model_records(runs / "ddp")
    assert [r["step"] for r in one] == [r["step"] for r in two] and len(one) >= 4
    for r1, r2 in zip(one, two):
        for k in ("loss", "mlm_loss", "rtd_loss", "rtd_acc", "mlm_acc", "val_loss", "val_rtd_loss", "val_rtd_acc"):
            if k in r1:
                assert r1[k] == pytest.approx(r2[k], rel=1e-5, abs=1e-6), (r1["step"], k)
    for sub in ("", "generator"):
        a, b = read_weights(runs / "whole" / "final" / sub), read_weights(runs / "ddp" / "final" / sub)
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)


class FakeClock:
    """Each reading 1 s after the previous: the trainer reads it when training starts and after
    every update, so update k ends at k seconds of training (test_budget.py's clock)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_rtd_under_a_time_budget_stops_on_time_and_resumes_bitwise(runs, monkeypatch):
    """train.max_time 3s with max_steps far away, on a fake clock: the run stops after update 3
    with the learning rate laid out over the budget; resumed from its step-2 checkpoint (2 s
    spent), it does the one update left and ends with the same weights and records."""
    plain = Trainer.__init__

    def with_fake_clock(self, inputs):
        plain(self, inputs)
        self.clock = FakeClock()

    monkeypatch.setattr(Trainer, "__init__", with_fake_clock)
    budget = [*RTD, "--set", "train.max_time=3s", "--set", "train.warmup_steps=1"]
    full = pretrain_cli(runs / "corpus.txt", runs / "budget", *budget, steps=1000)
    assert full.rc == 0, full.output
    m = model_records(runs / "budget")
    steps = [r for r in read_metrics(runs / "budget" / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3] and [r["train_seconds"] for r in steps] == [1.0, 2.0, 3.0]
    t = load_recipe(str(runs / "budget" / "recipe.yaml")).train
    expected = [t.learning_rate * budget_multiplier(t, max(k / 1000, (k - 1) / 3)) for k in (1, 2, 3)]
    assert [r["lr"] for r in steps] == pytest.approx(expected, rel=1e-9)
    shutil.copytree(runs / "budget", runs / "budget-split")
    shutil.rmtree(runs / "budget-split" / "final")
    for ck in (runs / "budget-split" / "checkpoints").iterdir():
        if ck.name != "step-0000002":
            shutil.rmtree(ck)
    rest = pretrain_cli(runs / "corpus.txt", runs / "budget-split", *budget, "--resume", "auto", steps=1000)
    assert rest.rc == 0, rest.output
    a, b = read_weights(runs / "budget" / "final"), read_weights(runs / "budget-split" / "final")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    assert model_records(runs / "budget-split")[-1] == m[-1]
