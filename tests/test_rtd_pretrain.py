"""`bertcli pretrain` with train.objective: rtd, in process: it trains (both losses fall into the
checkpoint), resumes bit for bit, and writes the discriminator and generator/ as checkpoints."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch
from conftest import ONE_THREAD, run_cli, write_documents
from helpers.pretrain import model_records, pretrain_cli

from bertcli.model.checkpoint import load_checkpoint, read_weights

RTD = ["--set", "train.objective=rtd", "--set", "data.masking=dynamic", "--set", "data.objective=none"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("rtd")
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    docs = [[" ".join(words[(d + s + k) % len(words)] for k in range(6 + s % 3)) + " ." for s in range(5)]
            for d in range(30)]
    write_documents(root / "corpus.txt", docs)
    whole = pretrain_cli(root / "corpus.txt", root / "whole", *RTD)
    assert whole.rc == 0, whole.output
    # as if killed after step 2's checkpoint: the later checkpoint and final/ gone
    shutil.copytree(root / "whole", root / "split")
    shutil.rmtree(root / "split" / "final")
    shutil.rmtree(root / "split" / "checkpoints" / "step-0000004")
    rest = pretrain_cli(root / "corpus.txt", root / "split", *RTD, "--resume", "auto")
    assert rest.rc == 0, rest.output
    return root


def test_rtd_resume_is_bitwise(runs):
    a, b = read_weights(runs / "whole" / "final"), read_weights(runs / "split" / "final")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    ga, gb = read_weights(runs / "whole" / "final" / "generator"), read_weights(runs / "split" / "final" / "generator")
    assert all(ga[k].equal(gb[k]) for k in ga)
    whole = model_records(runs / "whole")
    assert whole[-1] == model_records(runs / "split")[-1]
    last = [r for r in whole if "val_rtd_loss" in r][-1]     # the discriminator's figures are logged
    assert 0 < last["val_rtd_loss"] < 1 and 0.5 < last["val_rtd_acc"] <= 1
    assert last["val_loss"] == pytest.approx(last["val_mlm_loss"] + 50 * last["val_rtd_loss"])


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
