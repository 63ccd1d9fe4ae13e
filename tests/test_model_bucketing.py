"""Row bucketing: the unpadded token count N and the masked count M are rounded up so that the
tensor shapes repeat from batch to batch (bertcli.train.heap says why), without changing any
output at a real position, the loss, or the accuracy."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from helpers.models import PAD, VOCAB, randomize, tiny_section

from bertcli.config.model import encoder_config
from bertcli.model.encoder import bucketed, bucketed_keep, make_layout
from bertcli.model.heads import PreTrainingModel
from bertcli.train.loop import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)


def _batch(family: str, g: torch.Generator, B: int = 16, T: int = 40, share: float = 0.15) -> dict:
    """Right-padded rows of random lengths 2..T; `share` of the real tokens masked."""
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    ids = torch.randint(5, VOCAB, (B, T), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()            # [B, T]
    ids[mask == 0] = PAD[family]
    real = mask.view(-1).nonzero().squeeze(1)
    k = max(1, int(share * len(real)))
    positions = real[torch.randperm(len(real), generator=g)[:k]].sort().values
    return dict(input_ids=ids, attention_mask=mask, mlm_positions=positions,
                mlm_labels=torch.randint(5, VOCAB, (k,), generator=g))


def test_rows_are_rounded_up_so_few_distinct_shapes_occur():
    g = torch.Generator().manual_seed(0)
    reals, rows = set(), set()
    for _ in range(60):
        mask = _batch("bert", g, B=64)["attention_mask"]                   # ~1,300 real tokens: a step of 32
        layout = make_layout(mask, *mask.shape, unpad=True)
        real = int(mask.sum())
        n = mask.numel() if layout.index is None else len(layout.index)
        reals.add(real)
        rows.add(n)
        assert n == min(bucketed(real), mask.numel())
        if layout.index is not None:
            flat = mask.view(-1).bool()
            assert flat[layout.index].sum() == real                       # every real token is a row
            assert bool((layout.index[1:] > layout.index[:-1]).all())     # ascending, no repeats
            assert bool((layout.index.index_select(0, layout.rows.index_select(0, flat.nonzero().squeeze(1)))
                         == flat.nonzero().squeeze(1)).all())             # rows maps each real token to itself
    assert len(reals) >= 30 and len(rows) <= len(reals) / 3, (len(reals), len(rows))
    # rounding: to a power-of-two step of about n/32..n/64, never below n
    assert [bucketed(n) for n in (1, 17, 63, 64, 101, 1000, 4100, 10000)] == [1, 17, 63, 64, 102, 1008, 4224, 10240]


def test_an_all_padding_sequence_lends_no_rows():
    """Its rows would attend to nothing (NaN): only padding of sequences with a real token is carried."""
    mask = torch.zeros(3, 200, dtype=torch.long)
    mask[0, :150] = 1
    layout = make_layout(mask, 3, 200, unpad=True)
    assert len(layout.index) == bucketed(150) == 152 and bool((layout.index < 200).all())


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "modernbert"])
def test_bucketed_outputs_equal_the_unbucketed_ones_at_real_positions(family):
    torch.manual_seed(0)
    model = PreTrainingModel(encoder_config(tiny_section(family), VOCAB, PAD[family])).eval()
    randomize(model, 1)
    g = torch.Generator().manual_seed(2)
    ms = set()
    for _ in range(4):
        b = _batch(family, g, share=0.4)                                      # M > 64: rounded up
        args = (b["input_ids"], b["attention_mask"], None, b["mlm_positions"])
        with torch.no_grad():
            model.encoder.unpad, model.sparse_last_layer = True, True
            out = model(*args)
            enc = model.encoder(*args[:3])
            last = model.encoder(*args[:3], keep=b["mlm_positions"])        # the sparse last layer
            model.encoder.unpad, model.sparse_last_layer = False, False        # every position a row
            ref = model(*args)
            ref_enc = model.encoder(*args[:3])
        M = len(b["mlm_positions"])
        assert out.mlm_rows.shape == (bucketed(M), VOCAB) and out.mlm_logits.shape == (M, VOCAB)
        assert out.mlm_logits.data_ptr() == out.mlm_rows.data_ptr()            # a view: no copy
        ms.add(out.mlm_rows.shape[0])
        assert last.hidden.shape[0] == bucketed(M)                            # its rows are rounded up too
        assert (last.at(b["mlm_positions"]) - ref_enc.at(b["mlm_positions"])).abs().max() < 1e-5
        assert (out.mlm_logits - ref.mlm_logits).abs().max() < 1e-5
        if out.pair_logits is not None:
            assert (out.pair_logits - ref.pair_logits).abs().max() < 1e-5
        real = b["attention_mask"].bool()
        assert enc.hidden.shape[0] == bucketed(int(real.sum()))               # padding carried as rows
        hidden = enc.padded()
        assert (hidden[real] - ref_enc.padded()[real]).abs().max() < 1e-5
        assert bool((hidden[~real] == 0).all())                               # and zero at padding

        # the loss and accuracy read the bucketed rows, with the extra ones left out
        model.encoder.unpad, model.sparse_last_layer = True, True
        fake = SimpleNamespace(autocast=contextlib.nullcontext, pair=False, objective=None)   # MLM
        mlm_sum, mlm_correct, _, _, labels = Trainer._losses(fake, model, b)
        assert labels.numel() == M
        want = F.cross_entropy(ref.mlm_logits, b["mlm_labels"], reduction="sum")
        assert abs(mlm_sum.item() - want.item()) < 1e-4 * max(1.0, want.item())
        assert mlm_correct.item() == (ref.mlm_logits.argmax(-1) == b["mlm_labels"]).sum().item()


def test_the_sparse_last_layer_gets_extra_real_positions_where_sequences_have_fewest():
    g = torch.Generator().manual_seed(3)
    checked = 0
    for _ in range(20):
        b = _batch("bert", g, B=8, T=40, share=0.3)
        mask = b["attention_mask"]
        layout = make_layout(mask, *mask.shape, unpad=True)
        keep = b["mlm_positions"]
        got = bucketed_keep(keep, layout)
        assert torch.equal(got[:len(keep)], keep) and len(got) == min(bucketed(len(keep)), int(mask.sum()))
        assert len(set(got.tolist())) == len(got)                               # distinct
        assert bool(mask.view(-1)[got].all())                                   # real tokens only
        per_seq = lambda p: torch.bincount(p // 40, minlength=8)                # noqa: E731
        top = int(per_seq(keep).max())
        room = int((mask.sum(1).clamp(max=top) - per_seq(keep)).sum())         # free slots below the top
        if room >= len(got) - len(keep):
            assert int(per_seq(got).max()) == top                               # Q unchanged
            checked += 1
    assert checked >= 10
