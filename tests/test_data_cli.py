"""`bertcli build-data` through the real CLI: the summary, the cache, and bad input (exit 2,
one clear message, no traceback)."""

from __future__ import annotations

from conftest import assert_user_error, write_documents
from helpers.data import make_documents

BASE = ("--recipe", "bert-tiny", "--set", "tokenizer.vocab_size=300", "--set", "data.dupe_factor=1",
        "--set", "data.num_proc=1")


def build(cli, corpus, *extra, **kw):
    return cli("build-data", *BASE, "--set", f"corpus.sources=[{corpus}]", *extra, **kw)


def test_build_data_summary_then_cache(cli, tmp_path):
    corpus = write_documents(tmp_path / "c.txt", make_documents(30, seed=2))
    first = build(cli, corpus)
    assert first.rc == 0, first.output
    for key in ("documents", "instances", "tokens", "fill ratio", "masked fraction", "pair labels", "seconds"):
        assert key in first.stdout, first.stdout
    assert "data (built)" in first.stdout
    second = build(cli, corpus)  # (--force is exercised through the Python API in test_data_build)
    assert second.rc == 0 and "data (reused)" in second.stdout, second.output


def test_one_sentence_documents_with_nsp(cli, tmp_path):
    corpus = write_documents(tmp_path / "c.txt", [[s] for d in make_documents(12, seed=3) for s in d])
    res = build(cli, corpus)
    assert_user_error(res, "has a single sentence", "0 documents have 2 or more", "layout: documents",
                      "data.objective: none")


def test_corpus_too_small_for_nsp(cli, tmp_path):
    # two documents: the corpus stage keeps one for validation, one is left for training
    corpus = write_documents(tmp_path / "c.txt", [["alpha beta gamma.", "delta epsilon."],
                                                  ["zeta eta theta.", "iota kappa."]])
    res = build(cli, corpus)
    assert_user_error(res, "too small for NSP", "1 training document", "another document")


def test_max_seq_length_above_positions(cli, tmp_path):
    corpus = write_documents(tmp_path / "c.txt", make_documents(10, seed=4))
    res = build(cli, corpus, "--set", "data.max_seq_length=1024")
    assert_user_error(res, "data.max_seq_length 1024", "512 positions", "max_position_embeddings")


def test_tokenizer_does_not_match_model_vocab(cli, tmp_path):
    corpus = write_documents(tmp_path / "c.txt", make_documents(12, seed=5))
    res = build(cli, corpus, "--set", "tokenizer.vocab_size=5000", "--set", "model.vocab_size=5000")
    assert_user_error(res, "model.vocab_size is 5,000", "leave model.vocab_size unset")


def test_jieba_missing(cli, tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "jieba.py").write_text("raise ImportError('no jieba here')\n")
    corpus = write_documents(tmp_path / "c.txt", make_documents(10, seed=6))
    res = build(cli, corpus, "--set", "data.whole_word=true", "--set", "data.word_segmenter=jieba",
                env={"PYTHONPATH": str(fake)})
    assert_user_error(res, "jieba package is not installed", "pip install")


def test_tokenizer_with_other_special_tokens_or_kind():
    """A tokenizer directory that is not what the recipe describes (e.g. replaced by hand)."""
    from types import SimpleNamespace

    import pytest

    from bertcli.config.recipe import load_recipe
    from bertcli.core.errors import UserError
    from bertcli.data.checks import check_tokenizer

    r = load_recipe("bert-tiny")
    roberta_tokens = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}
    tok = SimpleNamespace(path="tok", kind="wordpiece", tokens=roberta_tokens, vocab_size=8192,
                          mask_id=4, pad_id=1, cls_id=0, sep_id=2)
    with pytest.raises(UserError, match=r"special tokens differ .*cls: <s> \(recipe: \[CLS\]\)"):
        check_tokenizer(r, tok)
    with pytest.raises(UserError, match="is bpe, the recipe asks for tokenizer.kind wordpiece"):
        check_tokenizer(r, SimpleNamespace(**{**vars(tok), "kind": "bpe"}))
