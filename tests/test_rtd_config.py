"""train.objective: rtd: the recipe's refusals, the generator's default shape, and ELECTRA's masks
(85% [MASK] / 15% kept, no random token) with keyed sampling uniforms from the collator."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertcli.config.generator import GeneratorConfig, generator_shape
from bertcli.config.recipe import Recipe, resolve, validate
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
