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
