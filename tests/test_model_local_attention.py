"""ModernBERT's local layers skip the blocks outside the window (bertcli.model.local_attention):
the same outputs and gradients as the window applied as a mask over full attention, to fp32
tolerance, with padding, odd lengths and lengths that are not a multiple of the window; and the
same as transformers' ModernBERT at a length where the chunking is used."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import transformers as tf
from helpers.hf import TOL, hf_config
from helpers.models import PAD, batch, randomize

from bertcli.model import load_checkpoint
from bertcli.model.local_attention import banded, banded_attention
from bertcli.model.positions import window_mask

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)

FP32 = dict(atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("T,w,lengths", [(300, 32, (300, 123, 40, 1)), (130, 16, (130, 97)), (97, 7, (97, 50, 8)),
                                         (41, 4, (41, 41)), (64, 5, None),
                                         (128, 8, (128, 100))])  # T a multiple of the chunk: no fill
def test_chunked_window_equals_the_masked_window_forward_and_backward(T, w, lengths):
    g = torch.Generator().manual_seed(T * w)
    B = 2 if lengths is None else len(lengths)
    # [B, A, T, D] views of [B, T, A, D], as the model's are (non-contiguous)
    q, k, v = (torch.randn(B, T, 3, 8, generator=g).requires_grad_().transpose(1, 2) for _ in range(3))
    real = torch.ones(B, T, dtype=torch.bool) if lengths is None else \
        torch.arange(T)[None] < torch.tensor(lengths)[:, None]                        # [B, T]
    pad = None if lengths is None else real[:, None, None, :]
    chunks = banded(T, w, pad, q.device)
    assert chunks is not None and chunks.chunks == -(-T // (2 * w))
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(T, w, pad, q.device))
    out = banded_attention(q, k, v, chunks)
    assert out.shape == ref.shape and torch.isfinite(out).all()   # padded rows too: never empty
    sel = real[:, None, :, None].expand_as(ref)
    torch.testing.assert_close(out[sel], ref[sel], **FP32)
    up = torch.randn(ref.shape, generator=g) * sel                # what reads only the real rows
    for a, b in zip(torch.autograd.grad(out, (q, k, v), up), torch.autograd.grad(ref, (q, k, v), up)):
        torch.testing.assert_close(a, b, **FP32)


def test_no_chunking_where_it_would_not_skip_anything():
    assert banded(32, 4, None, torch.device("cpu")) is None       # T <= 8w: the mask is as cheap
    assert banded(33, 4, None, torch.device("cpu")) is not None


def _long_batch(longest: int = 37):
    # rows longer than 8 x the window (+-4), odd lengths, padding
    return batch("modernbert", lengths=(longest, 29, 13), seed=3, n_masked=12)


def test_the_model_gives_the_masked_windows_outputs_and_gradients(tmp_path):
    """Whole ModernBERT (unpadded rows, padding carried as rows, the sparse last layer), training
    mode: loss and every parameter's gradient equal with the window blocks skipped or masked."""
    torch.manual_seed(0)
    hf = tf.ModernBertForMaskedLM(hf_config("modernbert")).eval()
    randomize(hf, 1)
    hf.save_pretrained(tmp_path)
    b = _long_batch(40)   # a multiple of the chunk (8): the path with no fill (the unit test has both)
    results = []
    for skip in (True, False):
        ours, _ = load_checkpoint(tmp_path)
        ours.train()
        ours.encoder.window_blocks = skip
        out = ours(**b)
        hidden = ours.encoder(b["input_ids"], b["attention_mask"]).padded()
        loss = out.mlm_logits.logsumexp(-1).sum() + hidden.square().sum()
        loss.backward()
        results.append((out.mlm_logits, hidden, {n: p.grad for n, p in ours.named_parameters()}))
    (la, ha, ga), (lb, hb, gb) = results
    real = b["attention_mask"].bool()
    torch.testing.assert_close(la, lb, **FP32)
    torch.testing.assert_close(ha[real], hb[real], **FP32)
    assert ga.keys() == gb.keys()
    for n in ga:  # fp32 rounding, relative to the largest gradient of the tensor (sums of ~100 terms)
        torch.testing.assert_close(ga[n], gb[n], atol=1e-5 * float(gb[n].abs().max()), rtol=1e-5, msg=n)


def test_chunked_local_layers_match_transformers(tmp_path):
    torch.manual_seed(0)
    hf = tf.ModernBertForMaskedLM(hf_config("modernbert")).eval()
    randomize(hf, 2)
    hf.save_pretrained(tmp_path)
    ours, _ = load_checkpoint(tmp_path)
    ours.eval()
    b = _long_batch()
    x = {k: b[k] for k in ("input_ids", "attention_mask")}
    assert banded(37, ours.config.window, None, torch.device("cpu")) is not None
    with torch.no_grad():
        theirs = hf.model(**x).last_hidden_state
        mine = ours.encoder(**x).padded()
    real = b["attention_mask"].bool()
    torch.testing.assert_close(mine[real], theirs[real], **TOL)
    assert PAD["modernbert"] == ours.config.pad_token_id
