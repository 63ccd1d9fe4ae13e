"""The data stage end to end (Python API): on-disk format, determinism across processes and
shard sizes, each objective, dynamic whole-word / n-gram rows, Chinese words via jieba."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import write_documents
from helpers.data import make_documents, recipe

from bertcli.data import PretrainCollator, PretrainDataset, load_data, run_build_data
from bertcli.tokenization.build import ensure_tokenizer
from bertcli.tokenization.load import load_tokenizer


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("data-build")
    return root, write_documents(root / "corpus.txt", make_documents(160, seed=1))


def columns(dd):
    return {s: dd[s].data.table for s in dd}


def test_nsp_static_format_and_determinism(corpus):
    root, path = corpus
    sets = ["data.max_seq_length=64", "data.dupe_factor=2", "data.max_predictions_per_seq=10"]
    r = recipe(root, path, *sets)
    res = run_build_data(r)
    assert not res.reused
    dd = load_data(res.path)
    info = json.loads((res.path / "build_info.json").read_text())
    tok = load_tokenizer(ensure_tokenizer(r).path)
    train = dd["train"]
    assert set(train.column_names) == {"input_ids", "token_type_ids", "pair_label", "masked_positions", "masked_ids"}
    assert info["train"]["instances"] == len(train) and info["train"]["copies"] == 2
    lengths = [len(x) for x in train["input_ids"]]  # every row, not a sample
    assert max(lengths) <= 64 and info["train"]["max_length"] == max(lengths)
    assert info["train"]["tokens"] == sum(lengths)
    special = np.array(sorted(tok.special_ids))
    n_masked = n_tokens = 0
    for row in train.select(range(0, len(train), 7)):
        ids, types = np.array(row["input_ids"]), np.array(row["token_type_ids"])
        assert len(ids) <= 64 and ids[0] == tok.cls_id and ids[-1] == tok.sep_id
        b0 = int(np.argmax(types))
        assert ids[b0 - 1] == tok.sep_id and (types[b0:] == 1).all() and (types[:b0] == 0).all()
        pos, orig = np.array(row["masked_positions"]), np.array(row["masked_ids"])
        assert len(pos) == min(10, max(1, round(len(ids) * 0.15)))
        assert not np.isin(orig, special).any() and (np.diff(pos) > 0).all()
        assert not np.isin(pos, [0, b0 - 1, len(ids) - 1]).any()
        n_masked += len(pos)
        n_tokens += len(ids)
    assert abs(info["train"]["masked_fraction"] - 0.15) < 0.02
    assert info["train"]["label_1"] == sum(train["pair_label"])
    # above one half: every chunk of a single sentence gets a random B (Google's rule), and at
    # 64 tokens many chunks hold one sentence (test_data_pairs checks the rule exactly)
    assert 0.45 < info["train"]["label_1_fraction"] < 0.75
    before = columns(dd)
    # same recipe and seed, other process count and shard size: the identical dataset
    again = run_build_data(recipe(root, path, *sets, "data.num_proc=2", "data.documents_per_shard=7"), force=True)
    assert again.path == res.path and not again.reused
    after = columns(load_data(again.path))
    for split in before:
        assert before[split].equals(after[split]), split
    # cached: a second call reuses it
    assert run_build_data(r).reused
    # another seed: other pairs and masks
    other = columns(load_data(run_build_data(recipe(root, path, *sets, "seed=7")).path))
    assert not other["train"].equals(before["train"])


def test_sop_dynamic_ngram_rows_and_collator(corpus):
    root, path = corpus
    r = recipe(root, path, "model.family=albert", "tokenizer.kind=unigram", "data.objective=sop",
               "data.masking=dynamic", "data.whole_word=true", "data.ngram=3", "data.max_seq_length=96",
               "data.dupe_factor=1")
    res = run_build_data(r)
    dd = load_data(res.path)
    train = dd["train"]
    assert set(train.column_names) == {"input_ids", "token_type_ids", "pair_label", "word_starts"}
    labels = np.array(train["pair_label"])
    assert abs(labels.mean() - 0.5) < 0.06
    tok = load_tokenizer(ensure_tokenizer(r).path)
    ds = PretrainDataset(train)
    col = PretrainCollator(tok, r.data, r.seed)
    rows = [ds[(0, i)] for i in range(min(len(ds), 256))]
    batch = col(rows)
    T = batch["input_ids"].shape[1]
    assert T % 8 == 0 and T <= 96
    pos = batch["mlm_positions"].numpy()
    for i, row in enumerate(rows):
        starts = np.asarray(row["word_starts"], bool)
        word = np.cumsum(starts)
        mine = pos[pos // T == i] % T
        assert not np.isin(np.asarray(row["input_ids"])[mine], list(tok.special_ids)).any()
        for w in np.unique(word[mine]):
            assert set(np.flatnonzero(word == w)) <= set(mine.tolist()), "partial word masked"
    # epoch 1 masks differ, epoch 0 again is identical
    assert np.array_equal(col(rows)["mlm_positions"].numpy(), pos)
    assert not np.array_equal(col([ds[(1, i)] for i in range(len(rows))])["mlm_positions"].numpy(), pos)


def test_packed_full_sentences_roberta(corpus):
    root, path = corpus
    r = recipe(root, path, "model.family=roberta", "tokenizer.kind=bpe", "tokenizer.lowercase=false",
               "data.objective=none", "data.masking=dynamic", "data.max_seq_length=128",
               "model.max_position_embeddings=130")
    res = run_build_data(r)
    info = json.loads((res.path / "build_info.json").read_text())
    dd = load_data(res.path)
    tok = load_tokenizer(ensure_tokenizer(r).path)
    assert set(dd["train"].column_names) == {"input_ids", "token_type_ids"}
    assert info["train"]["copies"] == 1  # dynamic masks: identical copies are not built
    ids = dd["train"]["input_ids"]
    assert max(map(len, ids)) <= 128 and all(x[0] == tok.cls_id and x[-1] == tok.sep_id for x in ids)
    separators = sum(x.count(tok.sep_id) - 1 for x in ids)
    # every corpus token exactly once, plus <s> </s> per row and one </s> per document boundary
    assert info["train"]["tokens"] == info["train"]["corpus_tokens"] + 2 * len(ids) + separators
    assert separators >= info["train"]["documents"] - len(ids)
    assert info["train"]["fill_ratio"] > 0.85
    assert abs(info["train"]["masked_fraction"] - 0.15) < 0.01


def test_chinese_whole_words_in_built_rows(tmp_path):
    jieba = pytest.importorskip("jieba")
    sents = ["我爱北京天安门", "今天天气很好", "我们在学习自然语言处理", "北京是中国的首都", "机器学习很有意思"]
    rng = np.random.default_rng(0)
    docs = [[sents[i] for i in rng.integers(0, len(sents), 6)] for _ in range(30)]
    path = write_documents(tmp_path / "zh.txt", docs)
    r = recipe(tmp_path, path, "data.masking=dynamic", "data.whole_word=true", "data.word_segmenter=jieba",
               "data.max_seq_length=64", "data.dupe_factor=1", "tokenizer.vocab_size=200")
    dd = load_data(run_build_data(r).path)
    tok = load_tokenizer(ensure_tokenizer(r).path)
    jieba_words = {w for s in sents for w in jieba.cut(s)}
    assert {"北京", "天安门", "自然语言"} <= jieba_words
    found = set()
    for row in dd["train"].select(range(min(40, len(dd["train"])))):
        ids, starts = row["input_ids"], row["word_starts"]
        cuts = [i for i, s in enumerate(starts) if s] + [len(ids)]
        for a, b in zip(cuts, cuts[1:]):
            # truncation may cut the words at a segment's edges: check the inner ones
            if ids[a] in tok.special_ids or ids[a - 1] in tok.special_ids or ids[b] in tok.special_ids:
                continue
            word = "".join(tok.tokenizer.id_to_token(i).lstrip("#") for i in ids[a:b])
            assert word in jieba_words, word
            found.add(word)
    assert {"北京", "天安门"} <= found


@pytest.mark.parametrize("sets", [
    ("tokenizer.kind=wordpiece",),
    ("model.family=roberta", "tokenizer.kind=bpe", "tokenizer.lowercase=false", "data.objective=none"),
    ("model.family=albert", "tokenizer.kind=unigram", "data.objective=sop"),
], ids=["wordpiece", "bpe", "unigram"])
def test_special_token_text_in_the_corpus_never_becomes_a_special_id(tmp_path, sets):
    """A literal "[SEP]", "</s>" or "<pad>" in a sentence is text: the rows hold special ids only
    where the builder put them ([CLS]/<s> first, separators at segment ends)."""
    literal = "[CLS] [SEP] [MASK] [PAD] <s> </s> <pad> <mask> <unk>".split()
    docs = make_documents(60, seed=4)
    rng = np.random.default_rng(0)
    docs = [[f"{s} {literal[int(rng.integers(len(literal)))]} {s}" for s in d] for d in docs]
    r = recipe(tmp_path, write_documents(tmp_path / "corpus.txt", docs), *sets, "data.max_seq_length=64",
               "data.masking=dynamic")
    tok = load_tokenizer(ensure_tokenizer(r).path)
    rows = load_data(run_build_data(r).path)["train"]["input_ids"]
    structural = {tok.cls_id, tok.sep_id}
    bad = {tok.pad_id, tok.mask_id} | (set(tok.special_ids) - structural - {tok.unk_id})
    assert len(rows) > 20
    for ids in rows:
        assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id and not bad & set(ids), ids
        assert ids.count(tok.cls_id) == 1
        if "data.objective=none" not in sets:      # [CLS] A [SEP] B [SEP]: exactly two separators
            assert ids.count(tok.sep_id) == 2, ids
