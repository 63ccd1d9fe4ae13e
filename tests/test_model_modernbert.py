"""ModernBERT beyond the per-family equivalence cases: the sliding window really matters at the
tested length, mean pooling and the per-token heads match transformers both ways, the recipes'
rules, the warmup-stable-decay schedule, and one end-to-end run through the real CLI
(pretrain -> transformers loads it -> finetune glue -> transformers loads the classifier)."""

from __future__ import annotations

import json
import math

import pytest
import torch
import transformers as tf
from conftest import ONE_THREAD, run_cli_process
from helpers.glue import write_tasks
from helpers.hf import TOL, hf_config
from helpers.models import PAD, VOCAB, batch, randomize, tiny_section

from bertcli.config.recipe import load_recipe
from bertcli.core.errors import UserError
from bertcli.model import build_model, load_checkpoint, save_checkpoint
from bertcli.train.schedule import lr_multiplier

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)


def _inputs(seed: int) -> dict:
    b = batch("modernbert", seed=seed)
    return {k: b[k] for k in ("input_ids", "attention_mask")}


def test_the_window_and_the_thetas_change_the_outputs_at_the_tested_length(tmp_path):
    """The equivalence cases would pass vacuously if neither side used the window: at 12 tokens
    and a window of 8 (+-4), making every layer global, or giving the local layers the global
    theta, changes the logits."""
    torch.manual_seed(0)
    hf = tf.ModernBertForMaskedLM(hf_config("modernbert")).eval()
    randomize(hf, 1)
    hf.save_pretrained(tmp_path)
    ours, _ = load_checkpoint(tmp_path)
    b = batch("modernbert")
    with torch.no_grad():
        base = ours(**b).mlm_logits
        for change in (dict(local_attention=0), dict(local_rope_theta=160000.0)):
            other = build_model_like(ours, **change)
            assert (other(**b).mlm_logits - base).abs().max() > 1e-2, change


def build_model_like(model, **changes):
    from bertcli.model.heads import PreTrainingModel

    other = PreTrainingModel(model.config.replace(**changes)).eval()
    other.load_state_dict(model.state_dict())
    return other


def test_mean_pooling_classifier_matches_transformers_both_ways(tmp_path):
    torch.manual_seed(0)
    x = _inputs(4)
    hf = tf.ModernBertForSequenceClassification(hf_config("modernbert", num_labels=3, classifier_pooling="mean")).eval()
    randomize(hf, 5)
    hf.save_pretrained(tmp_path / "hf")
    ours, report = load_checkpoint(tmp_path / "hf", head="classification")
    assert report.fresh == [] and ours.config.classifier_pooling == "mean"
    with torch.no_grad():
        torch.testing.assert_close(ours(**x), hf(**x).logits, **TOL)
        cls = build_model_like_classifier(ours, classifier_pooling="cls")
        assert (cls(**x) - ours(**x)).abs().max() > 1e-3     # the pooling is not ignored

    mine = build_model(tiny_section("modernbert", classifier_pooling="mean"), VOCAB, PAD["modernbert"],
                       head="classification", num_labels=2).eval()
    randomize(mine, 6)
    save_checkpoint(mine, tmp_path / "ours")
    back = tf.AutoModelForSequenceClassification.from_pretrained(tmp_path / "ours").eval()
    assert back.config.classifier_pooling == "mean"
    with torch.no_grad():
        torch.testing.assert_close(mine(**x), back(**x).logits, **TOL)


def build_model_like_classifier(model, **changes):
    from bertcli.model.heads import SequenceClassifier

    other = SequenceClassifier(model.config.replace(**changes)).eval()
    other.load_state_dict(model.state_dict())
    return other


@pytest.mark.parametrize("head,cls", [("token", tf.ModernBertForTokenClassification),
                                      ("qa", tf.ModernBertForQuestionAnswering)])
def test_per_token_heads_match_transformers_both_ways(tmp_path, head, cls):
    torch.manual_seed(0)
    x = _inputs(7)
    real = x["attention_mask"].bool()
    labels = 2 if head == "qa" else 5
    hf = cls(hf_config("modernbert", num_labels=labels)).eval()
    randomize(hf, 3)
    hf.save_pretrained(tmp_path / "hf")
    ours, report = load_checkpoint(tmp_path / "hf", head=head)
    assert report.fresh == [] and report.unused == []

    def outputs(model, hf_side):
        with torch.no_grad():
            out = model(**x)
        if head == "token":
            return out.logits[real] if hf_side else out[real]
        start, end = (out.start_logits, out.end_logits) if hf_side else out
        return torch.stack([start[real], end[real]])

    torch.testing.assert_close(outputs(ours, False), outputs(hf, True), **TOL)
    randomize(ours, 4)
    save_checkpoint(ours, tmp_path / "ours")
    auto = tf.AutoModelForTokenClassification if head == "token" else tf.AutoModelForQuestionAnswering
    back = auto.from_pretrained(tmp_path / "ours").eval()
    assert type(back) is cls
    torch.testing.assert_close(outputs(ours, False), outputs(back, True), **TOL)


# ---------------------------------------------------------------------------------- recipes
def test_recipes_carry_the_papers_settings():
    base, large = load_recipe("modernbert-base"), load_recipe("modernbert-large")
    for r, (L, H, A, I) in ((base, (22, 768, 12, 1152)), (large, (28, 1024, 16, 2624))):  # noqa: E741 (the paper's letters)
        m = r.model
        assert (m.num_hidden_layers, m.hidden_size, m.num_attention_heads, m.intermediate_size) == (L, H, A, I)
        assert (m.local_attention, m.global_attn_every_n_layers) == (128, 3)
        assert (m.global_rope_theta, m.local_rope_theta) == (160000.0, 10000.0)
        assert m.norm == "pre" and r.tokenizer.vocab_size == 50368 and r.tokenizer.kind == "bpe"
        assert r.tokenizer.special_tokens == "modernbert"
        assert r.data.objective == "none" and r.data.mlm_probability == 0.3 and r.train.schedule == "wsd"


@pytest.mark.parametrize("overrides, needle", [
    (["model.local_attention=64"], "the bert family attends globally in every layer"),
    (["model.family=modernbert", "tokenizer.kind=bpe"], "needs a sentence-pair head"),
])
def test_recipe_rules(overrides, needle):
    with pytest.raises(UserError) as e:
        load_recipe("bert-tiny", overrides)
    assert needle in str(e.value)


def test_wsd_warms_up_holds_then_decays_as_one_minus_sqrt():
    kw = dict(warmup_steps=10, max_steps=110, kind="wsd", min_lr_ratio=0.1, decay_fraction=0.2)
    assert lr_multiplier(5, **kw) == pytest.approx(0.5)
    assert [lr_multiplier(s, **kw) for s in (10, 50, 88)] == pytest.approx([1.0] * 3)  # stable until step 88
    # decay over the last 22 steps (20% of 110), from step 88: 1 - sqrt(progress)
    assert lr_multiplier(99, **kw) == pytest.approx(0.1 + 0.9 * (1 - math.sqrt(0.5)))
    assert lr_multiplier(110, **kw) == pytest.approx(0.1) and lr_multiplier(500, **kw) == pytest.approx(0.1)
    values = [lr_multiplier(s, **kw) for s in range(10, 111)]
    assert all(a >= b - 1e-12 for a, b in zip(values, values[1:]))
    # a decay longer than the run after warmup starts right after the warmup
    assert lr_multiplier(11, 10, 20, "wsd", decay_fraction=1.0) == pytest.approx(1 - math.sqrt(0.1))


# ------------------------------------------------------------------------------ end to end
TINY = ["corpus.sources=[{path: builtin, max_documents: 80}]", "corpus.validation_fraction=0.1",
        "tokenizer.vocab_size=600", "data.max_seq_length=64", "model.local_attention=32",
        "train.batch_size=16", "train.max_steps=60", "train.warmup_steps=6", "train.learning_rate=3e-3",
        "train.log_every=1", "train.eval_every=30", "train.save_every=30", "train.eval_batches=8"]


@pytest.mark.slow
def test_pretrain_then_finetune_glue_through_the_cli(tmp_path, one_thread):
    run = tmp_path / "run"
    sets = [x for s in TINY for x in ("--set", s)]
    r = run_cli_process("pretrain", "--recipe", "modernbert-tiny", *sets, "--set", f"output_dir={run}", cwd=tmp_path,
                env=ONE_THREAD)
    assert r.rc == 0, r.output
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in records if "loss" in x]
    assert sum(x["loss"] for x in train[-5:]) / 5 < sum(x["loss"] for x in train[:5]) / 5 - 0.5
    assert all(x["pair_loss"] is None for x in train)
    final = run / "final"
    config = json.loads((final / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["architectures"] == ["ModernBertForMaskedLM"]

    # transformers reads the directory as its own: same tokens, same logits on a padded batch
    tok = tf.AutoTokenizer.from_pretrained(final)
    texts = ["The module returns a list of strings, one for each line of the file it reads.", "Short."]
    enc = tok(texts, padding=True, return_tensors="pt")
    assert "token_type_ids" not in enc
    hf = tf.AutoModelForMaskedLM.from_pretrained(final).eval()
    ours, _ = load_checkpoint(final)
    with torch.no_grad():
        torch.testing.assert_close(ours(enc["input_ids"], enc["attention_mask"]).mlm_logits[enc["attention_mask"].bool()],
                                   hf(**enc).logits[enc["attention_mask"].bool()], **TOL)

    # `bertcli finetune glue` on the checkpoint; the saved classifier loads in transformers
    data = write_tasks(tmp_path / "glue", n_sst=320)
    out = tmp_path / "ft"
    r = run_cli_process("finetune", "glue", "--checkpoint", final, "--tasks", "sst2", "--data-dir", data, "--out", out,
                "--set", "finetune.learning_rate=1e-3", "--set", "finetune.batch_size=16",
                "--set", "finetune.max_seq_length=64", "--set", "finetune.epochs=3", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    results = json.loads((out / "sst2" / "results.json").read_text())
    assert results["dev"]["dev"]["accuracy"] >= 0.9, results["history"]
    best = next(p.parent for p in (out / "sst2").rglob("config.json"))
    clf = tf.AutoModelForSequenceClassification.from_pretrained(best).eval()
    assert type(clf).__name__ == "ModernBertForSequenceClassification"
    mine, _ = load_checkpoint(best, head="classification")
    with torch.no_grad():
        torch.testing.assert_close(mine(enc["input_ids"], enc["attention_mask"]), clf(**enc).logits, **TOL)


def test_a_transformers_4_hub_config_is_read_as_modernbert_base(tmp_path):
    """answerdotai/ModernBERT-base's config.json as written by transformers 4 (no layer_types or
    rope_parameters: the pattern and thetas as plain keys) describes the 149,655,232-parameter model."""
    from bertcli.config.checkpoint import read_config
    from bertcli.model.heads import PreTrainingModel

    hub = {"architectures": ["ModernBertForMaskedLM"], "attention_bias": False, "attention_dropout": 0.0,
           "bos_token_id": 50281, "classifier_activation": "gelu", "classifier_bias": False,
           "classifier_dropout": 0.0, "classifier_pooling": "mean", "cls_token_id": 50281, "decoder_bias": True,
           "deterministic_flash_attn": False, "embedding_dropout": 0.0, "eos_token_id": 50282,
           "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0, "gradient_checkpointing": False,
           "hidden_activation": "gelu", "hidden_size": 768, "initializer_cutoff_factor": 2.0,
           "initializer_range": 0.02, "intermediate_size": 1152, "layer_norm_eps": 1e-05, "local_attention": 128,
           "local_rope_theta": 10000.0, "max_position_embeddings": 8192, "mlp_bias": False, "mlp_dropout": 0.0,
           "model_type": "modernbert", "norm_bias": False, "norm_eps": 1e-05, "num_attention_heads": 12,
           "num_hidden_layers": 22, "pad_token_id": 50283, "position_embedding_type": "absolute",
           "reference_compile": True, "sep_token_id": 50282, "sparse_pred_ignore_index": -100,
           "sparse_prediction": False, "torch_dtype": "float32", "transformers_version": "4.47.0.dev0",
           "vocab_size": 50368}
    (tmp_path / "config.json").write_text(json.dumps(hub))
    c = read_config(tmp_path)
    assert (c.family, c.norm, c.local_attention, c.window, c.classifier_pooling) == ("modernbert", "pre", 128, 64, "mean")
    assert (c.global_rope_theta, c.local_rope_theta) == (160000.0, 10000.0)
    assert [c.is_global(i) for i in range(6)] == [True, False, False, True, False, False]
    with torch.device("meta"):
        assert sum(p.numel() for p in PreTrainingModel(c).parameters()) == 149_655_232
    hub["norm_bias"] = True
    (tmp_path / "config.json").write_text(json.dumps(hub))
    with pytest.raises(UserError, match="norm_bias True is not supported"):
        read_config(tmp_path)
