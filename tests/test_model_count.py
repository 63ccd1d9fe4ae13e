"""Parameter counts of every shipped recipe equal transformers' models of the same config (and
the figures of README.md's recipe table), counted on the meta device."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from bertcli.config.model import encoder_config
from bertcli.config.recipe import load_recipe, shipped_recipes
from bertcli.model.count import DEFAULT_PAD, parameter_counts
from bertcli.model.hf import to_hf_config

DESIGN = {"bert-base": 110_106_428, "bert-large": 336_226_108, "roberta-base": 124_697_433,
          "albert-base": 11_813_810, "albert-large": 17_847_474, "albert-xlarge": 59_021_490,
          "albert-xxlarge": 223_158_450, "modernbert-base": 149_655_232, "modernbert-large": 395_881_664}


def transformers_count(recipe) -> int:
    cfg = encoder_config(recipe.model, recipe.tokenizer.vocab_size, DEFAULT_PAD[recipe.model.family])
    keys = to_hf_config(cfg, "pretraining")
    arch = keys.pop("architectures")[0]
    config = tf.AutoConfig.for_model(keys.pop("model_type"), **keys)
    with torch.device("meta"):
        model = getattr(tf, arch)(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", shipped_recipes())
def test_parameter_counts_equal_transformers(name):
    recipe = load_recipe(name)
    counts = parameter_counts(recipe.model, recipe.tokenizer.vocab_size)
    assert counts["total"] == transformers_count(recipe)
    if name in DESIGN:
        assert counts["total"] == DESIGN[name]
    assert counts["total"] == counts["embeddings"] + counts["encoder"] + counts["heads"]
    if recipe.model.sharing == "all":
        L, G = recipe.model.num_hidden_layers, recipe.model.num_hidden_groups
        assert counts["encoder_effective"] == counts["encoder"] * L // G
    else:
        assert counts["encoder_effective"] == counts["encoder"]


def test_all_design_figures_are_shipped():
    assert set(DESIGN) <= set(shipped_recipes())


def module_counts(model_cfg, vocab: int) -> dict[str, int]:
    """The groups of parameter_counts, summed over bertcli's own modules built on the meta device."""
    from bertcli.model.heads import PreTrainingModel

    cfg = encoder_config(model_cfg, vocab, DEFAULT_PAD[model_cfg.family])
    with torch.device("meta"):
        model = PreTrainingModel(cfg)

    def n(m):
        return 0 if m is None else sum(p.numel() for p in m.parameters())

    enc = model.encoder
    encoder = n(enc.attention) + n(enc.ffn) + n(enc.final_norm)
    effective = sum(n(enc.attention[a]) + n(enc.ffn[f]) for a, f in enc.layer_plan) + n(enc.final_norm)
    return {"total": n(model), "embeddings": n(enc.embeddings) + n(enc.proj), "encoder": encoder,
            "heads": n(enc.pooler) + n(model.mlm) + n(model.pair), "encoder_effective": effective,
            "total_effective": n(model) - encoder + effective}


@pytest.mark.parametrize("name", shipped_recipes())
def test_counted_without_torch_equals_the_modules(name):
    """parameter_counts reads only the configuration (so `info` needs no torch); every group
    equals the real modules' for every shipped recipe and for shared / factorized variants."""
    recipe = load_recipe(name)
    m = recipe.model
    variants = [m]
    if m.num_hidden_layers <= 12 and m.hidden_size <= 768:
        import dataclasses

        variants += [dataclasses.replace(m, sharing=s, num_hidden_groups=g, embedding_size=e)
                     for s, g, e in (("all", 1, 128), ("attention", 2, None), ("ffn", 3, None))
                     if m.num_hidden_layers % g == 0]
    for v in variants:
        assert parameter_counts(v, recipe.tokenizer.vocab_size) == module_counts(v, recipe.tokenizer.vocab_size), v
