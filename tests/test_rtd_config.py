"""train.objective: rtd: the recipe's refusals, the generator's default shape, and ELECTRA's masks
(85% [MASK] / 15% kept, no random token) with keyed sampling uniforms from the collator."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertcli.config.generator import GeneratorConfig, generator_shape
from bertcli.config.recipe import Recipe, load_recipe, resolve, validate
from bertcli.config.sections import DataConfig
from bertcli.core.errors import UserError
from bertcli.data.collator import PretrainCollator

V, MASK, SPECIAL = 500, 4, 5


def _recipe(**data) -> Recipe:
    r = Recipe()
    r.train.objective = "rtd"
    r.data.objective, r.data.masking = "none", "dynamic"
    for k, v in data.items():
        setattr(r.data, k, v)
    resolve(r)
    return r


@pytest.mark.parametrize("data, words", [({"objective": "nsp"}, "sentence-pair"),
                                         ({"masking": "static"}, "data.masking: dynamic")])
def test_rtd_refuses_pair_tasks_and_static_masks(data, words):
    validate(_recipe())                                  # the accepted combination
    with pytest.raises(UserError) as e:
        validate(_recipe(**data))
    assert words in str(e.value)


def test_generator_defaults_to_a_quarter_of_the_width():
    assert generator_shape(GeneratorConfig(), 256, 12, 4) == (64, 12, 1, 256)     # ELECTRA-Small's generator
    assert generator_shape(GeneratorConfig(), 768, 12, 12) == (192, 12, 3, 768)
    assert generator_shape(GeneratorConfig(hidden_size=48, num_attention_heads=2), 64, 2, 4)[:3] == (48, 2, 2)


@pytest.mark.parametrize("name, shape, generator, lr, batch, steps, seq, predictions", [
    ("electra-small", (12, 256, 4, 1024), (64, 12, 1, 256), 5e-4, 128, 1_000_000, 128, 19),
    ("electra-base", (12, 768, 12, 3072), (256, 12, 4, 1024), 2e-4, 256, 766_000, 512, 79),
])
def test_electra_recipes_carry_the_papers_settings(name, shape, generator, lr, batch, steps, seq, predictions):
    """Clark et al. 2020, table 6: the discriminator's shape, the generator a quarter (small) or a
    third (base) of its hidden size, FFN and heads; lr, batch, steps, 10k warmup, 15% masks."""
    r = load_recipe(name)
    m, t = r.model, r.train
    assert (m.num_hidden_layers, m.hidden_size, m.num_attention_heads, m.intermediate_size) == shape
    g = m.generator
    assert (g.hidden_size, g.num_hidden_layers, g.num_attention_heads, g.intermediate_size) == generator
    assert (t.objective, t.learning_rate, t.batch_size, t.max_steps, t.warmup_steps) == ("rtd", lr, batch, steps, 10_000)
    assert (t.eps, t.weight_decay, r.data.mlm_probability, r.data.masking) == (1e-6, 0.01, 0.15, "dynamic")
    assert (r.data.max_seq_length, r.data.max_predictions_per_seq) == (seq, predictions)


def _rows(n: int, seed: int) -> list[dict]:
    g = np.random.default_rng(seed)
    return [{"input_ids": np.concatenate([[2], g.integers(SPECIAL, V, 100), [3]]), "epoch": 0, "index": i}
            for i in range(n)]


def test_collator_masks_as_electra_and_keys_uniforms_per_row():
    tok = SimpleNamespace(vocab_size=V, mask_id=MASK, pad_id=0, special_ids=frozenset(range(SPECIAL)))
    cfg = DataConfig(masking="dynamic", objective="none", max_predictions_per_seq=100, mlm_probability=0.15)
    col = PretrainCollator(tok, cfg, seed=1, rtd=True)
    rows = _rows(300, 0)
    b = col(rows)
    at = b["input_ids"].view(-1)[b["mlm_positions"]]
    masked = (at == MASK).float().mean().item()
    assert 0.82 < masked < 0.88                                     # 85% [MASK] ...
    assert torch.equal(at[at != MASK], b["mlm_labels"][at != MASK])  # ... the rest kept, none random
    u = b["rtd_uniform"]
    assert u.shape == b["mlm_labels"].shape and 0 <= u.min() and u.max() < 1
    # row 7 alone gives its uniforms of the whole batch: keyed by (seed, epoch, row), not by batch
    alone = col([rows[7]])
    first = (b["mlm_positions"] // b["input_ids"].shape[1] < 7).sum()
    assert torch.equal(alone["rtd_uniform"], u[first:first + len(alone["rtd_uniform"])])
    assert not torch.equal(PretrainCollator(tok, cfg, seed=2, rtd=True)([rows[7]])["rtd_uniform"][:3],
                           alone["rtd_uniform"][:3])
    assert "rtd_uniform" not in PretrainCollator(tok, cfg, seed=1)(rows[:4])
