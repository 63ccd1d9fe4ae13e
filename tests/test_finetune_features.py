"""`bertcli features`: the chosen layers' hidden states equal transformers' `hidden_states` on
the same weights, combined and pooled as asked, in parquet and .npy, streamed in batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import ONE_THREAD, assert_user_error, run_cli
from finetune_fixtures import corpus_texts, tiny_checkpoint

from bertcli.serve.features import extract_features


def _reference(ckpt, texts, layers, combine, pool, max_len=128):
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModel.from_pretrained(ckpt).eval()
    out = []
    for t in texts:
        enc = tok(t, return_tensors="pt", truncation=True, max_length=max_len)
        with torch.no_grad():
            hs = model(**enc, output_hidden_states=True).hidden_states
        picked = [hs[i][0] for i in layers]
        x = (torch.cat(picked, -1) if combine == "concat"
             else torch.stack(picked).sum(0) / (len(picked) if combine == "mean" else 1))
        out.append(x[0] if pool == "cls" else x.mean(0) if pool == "mean" else x)
    return out


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"], ids=["bert", "albert"])
def test_features_match_transformers_hidden_states(tmp_path, kind):
    texts = corpus_texts(40, seed=3)
    ckpt = tiny_checkpoint(tmp_path / "ckpt", corpus_texts(), kind=kind, layers=3)
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    cases = [("-1,-2,-3,-4", "concat", "cls", "npy"), ("-1,0", "sum", "mean", "parquet"),
             ("-2,-1", "mean", "none", "parquet"), ("1", "concat", "none", "npy")]
    for layers, combine, pool, ext in cases:
        out = tmp_path / f"f-{combine}-{pool}.{ext}"
        # batch_size 7: several batches of different padded widths, streamed to the file
        summary = extract_features(ckpt, tmp_path / "in.txt", out, layers=layers, combine=combine, pool=pool,
                                   batch_size=7, device="cpu")
        chosen = [int(x) for x in layers.split(",")]
        ref = _reference(ckpt, texts, chosen, combine, pool)
        if ext == "npy":
            got = np.load(out)
            ids = (out.with_suffix(".ids.tsv")).read_text().splitlines()
            if pool == "none":
                assert len(ids) == len(got) and ids[0].split("\t")[:2] == ["0", "0"]
                got = np.split(got, np.cumsum([len(r) for r in ref])[:-1])
            else:
                assert ids == [str(i) for i in range(len(texts))]
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(out)
            assert table.column("id").to_pylist() == [str(i) for i in range(len(texts))]
            got = [np.asarray(x, dtype=np.float32) for x in table.column("features").to_pylist()]
            if pool == "none":
                assert [len(t) for t in table.column("tokens").to_pylist()] == [len(r) for r in ref]
        assert summary["texts"] == len(texts)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r.numpy(), atol=2e-5, rtol=0)


def test_features_cli_and_errors(tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "ckpt", corpus_texts(100))
    (tmp_path / "in.jsonl").write_text('{"key": "a", "body": "john met mary in paris"}\n{"key": "b", "body": "oslo"}\n')
    r = run_cli("features", "-c", ckpt, "--input", tmp_path / "in.jsonl", "--out", tmp_path / "f.npy",
                "--text-column", "body", "--id-column", "key", "--layers", "-1,-2", "--pooling", "mean", "--threads", "2",
                cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert "threads: 2 (--threads: 2)" in r.stderr          # the flag wins over OMP_NUM_THREADS
    assert np.load(tmp_path / "f.npy").shape == (2, 128)
    assert (tmp_path / "f.ids.tsv").read_text() == "a\nb\n"
    r = run_cli("features", "-c", ckpt, "--input", tmp_path / "in.jsonl", "--out", tmp_path / "g.npy",
                "--text-column", "text", cwd=tmp_path)
    assert_user_error(r, "no column 'text'", "body")
    r = run_cli("features", "-c", ckpt, "--input", tmp_path / "in.jsonl", "--out", tmp_path / "g.npy",
                "--text-column", "body", "--layers", "-1,5", cwd=tmp_path)
    assert_user_error(r, "layer 5 does not exist", "0..2")
    assert not (tmp_path / "g.npy").exists()
    assert not [p for p in tmp_path.glob(".g.npy*") if p.name != ".g.npy.lock"]   # the lock file is no output
