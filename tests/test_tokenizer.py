"""The tokenizer stage: the three kinds, transformers compatibility, load_tokenizer, cache, errors."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from conftest import assert_user_error, write_documents

from bertcli.config.recipe import load_recipe
from bertcli.core.errors import UserError
from bertcli.tokenization.build import ensure_tokenizer, run_tokenize
from bertcli.tokenization.load import SPECIAL_TOKENS, load_tokenizer
from bertcli.tokenization.train import new_tokenizer

WORDS = ("the model reads a sentence and predicts masked words from their context while training on "
         "large corpora of English text with subword units such as pieces prefixes suffixes").split()
ZH = ["我们今天去北京看看天安门。", "这个模型可以预测被遮住的词语！", "天气很好，我们去公园散步吧？", "中文句子没有空格。"]
TEXTS = ["The Model reads, predicts: WORDS!", "Résumé of café naïve pieces", "我们今天去北京。天气很好",
         "a [MASK] here and <mask> there", "``quoted'' text  with   spaces", "zzqx unknownish Übung 漢字"]


def corpus(path):
    rng = random.Random(7)
    docs = []
    for _ in range(150):
        doc = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 15))).capitalize() + "."
               for _ in range(rng.randint(2, 5))]
        docs.append(doc + [rng.choice(ZH)])
    return write_documents(path, docs)


def tiny(tmp, kind, *extra):
    sets = {"wordpiece": "bert", "bpe": "roberta", "unigram": "albert"}
    case = ["tokenizer.lowercase=false"] if kind == "bpe" else []
    return load_recipe("bert-tiny", [f"output_dir={tmp / 'run'}", f"corpus.sources=[{tmp / 'c.txt'}]",
                                     "corpus.validation_fraction=0.1", f"tokenizer.kind={kind}",
                                     f"tokenizer.special_tokens={sets[kind]}", "tokenizer.vocab_size=300",
                                     "tokenizer.min_frequency=1", *case, *extra])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tok")
    corpus(tmp / "c.txt")
    return {kind: run_tokenize(tiny(tmp, kind)) for kind in ("wordpiece", "bpe", "unigram")}


@pytest.mark.parametrize("kind, hf_class, files", [
    ("wordpiece", "BertTokenizer", {"vocab.txt"}),
    ("bpe", "RobertaTokenizer", set()),
    ("unigram", "AlbertTokenizer", set()),
])
def test_autotokenizer_encodes_exactly_like_tokenizers(trained, kind, hf_class, files):
    from transformers import AutoTokenizer

    result = trained[kind]
    names = {p.name for p in result.path.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} | files <= names
    assert ("vocab.txt" in names) == (kind == "wordpiece")
    info = load_tokenizer(result.path)
    hf = AutoTokenizer.from_pretrained(str(result.path))
    assert type(hf).__name__ == hf_class
    assert info.kind == kind and 100 < info.vocab_size == len(hf) <= 300
    for a, b in itertools.chain(((t, None) for t in TEXTS), itertools.product(TEXTS[:3], TEXTS[2:])):
        ours = info.tokenizer.encode(a, b) if b else info.tokenizer.encode(a)
        theirs = hf(a, b, return_token_type_ids=True) if b else hf(a, return_token_type_ids=True)
        assert ours.ids == theirs["input_ids"], (a, b, ours.tokens, hf.convert_ids_to_tokens(theirs["input_ids"]))
        assert ours.type_ids == theirs["token_type_ids"], (a, b)
    # the family's template and ids
    pair = info.tokenizer.encode("the model", "中文")
    if kind == "bpe":
        assert pair.tokens[0] == "<s>" and pair.tokens.count("</s>") == 3  # <s> A </s></s> B </s>
    else:
        assert pair.tokens[0] == "[CLS]" and pair.tokens.count("[SEP]") == 2
        assert pair.type_ids == [0] * (pair.tokens.index("[SEP]") + 1) + [1] * (len(pair.ids) - pair.tokens.index("[SEP]") - 1)
    # special tokens take the contract's first ids; the Chinese text is known, not UNK
    expected = list(SPECIAL_TOKENS[{"wordpiece": "bert", "bpe": "roberta", "unigram": "albert"}[kind]].values())
    assert [info.tokenizer.id_to_token(i) for i in range(5)] == expected
    assert info.special_ids == frozenset(range(5))
    assert info.unk_id not in info.tokenizer.encode(ZH[0], add_special_tokens=False).ids


def test_contract_ids_and_summary(trained):
    bert, roberta, albert = (load_tokenizer(trained[k].path) for k in ("wordpiece", "bpe", "unigram"))
    assert (bert.pad_id, bert.unk_id, bert.cls_id, bert.sep_id, bert.mask_id) == (0, 1, 2, 3, 4)
    assert (roberta.cls_id, roberta.pad_id, roberta.sep_id, roberta.unk_id, roberta.mask_id) == (0, 1, 2, 3, 4)
    assert (albert.pad_id, albert.unk_id, albert.cls_id, albert.sep_id, albert.mask_id) == (0, 1, 2, 3, 4)
    rows = dict(trained["wordpiece"].summary)
    assert set(rows) >= {"documents", "sentences", "characters", "vocab size", "validation UNK rate",
                         "avg tokens per word", "seconds", "reused"}
    assert rows["documents"] == 150 and rows["reused"] is False
    info = json.loads((trained["wordpiece"].path / "tokenizer_info.json").read_text())
    # a 300-token vocabulary on this corpus: few unknowns, words mostly whole
    assert info["eval_unk_rate"] < 0.01 and 1.0 <= info["eval_tokens_per_word"] < 2.0


def test_normalization_per_kind():
    r = load_recipe("bert-tiny", ["tokenizer.kind=wordpiece", "tokenizer.lowercase=true"])
    assert new_tokenizer(r.tokenizer).normalizer.normalize_str("Café 北京") == "cafe  北  京 "
    r = load_recipe("bert-tiny", ["tokenizer.lowercase=false", "tokenizer.strip_accents=false"])
    assert new_tokenizer(r.tokenizer).normalizer.normalize_str("Café") == "Café"
    r = load_recipe("roberta-tiny")
    assert new_tokenizer(r.tokenizer).normalizer is None  # byte-level BPE keeps the text as it is
    r = load_recipe("albert-tiny")
    assert new_tokenizer(r.tokenizer).normalizer.normalize_str("``Café''") == '"cafe"'


def test_load_tokenizer_reads_transformers_directories(tmp_path):
    from transformers import AlbertTokenizer, BertTokenizer, RobertaTokenizer

    bert_vocab = {t: i for i, t in enumerate(["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])}
    BertTokenizer(vocab=bert_vocab).save_pretrained(str(tmp_path / "bert"))
    info = load_tokenizer(tmp_path / "bert")
    assert (info.kind, info.pad_id, info.unk_id, info.cls_id, info.sep_id, info.mask_id) == ("wordpiece", 0, 2, 3, 4, 5)
    assert info.tokenizer.encode("a b").ids == [3, 6, 7, 4]
    rob_vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "a", "b", "Ġb", "<mask>"])}
    RobertaTokenizer(vocab=rob_vocab, merges=[]).save_pretrained(str(tmp_path / "roberta"))
    info = load_tokenizer(tmp_path / "roberta")
    assert (info.kind, info.cls_id, info.pad_id, info.sep_id, info.mask_id) == ("bpe", 0, 1, 2, 7)
    alb_vocab = [("<pad>", 0.0), ("<unk>", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[MASK]", 0.0), ("▁a", -1.0)]
    AlbertTokenizer(vocab=alb_vocab).save_pretrained(str(tmp_path / "albert"))
    info = load_tokenizer(tmp_path / "albert")
    assert (info.kind, info.pad_id, info.unk_id, info.cls_id, info.sep_id, info.mask_id) == ("unigram", 0, 1, 2, 3, 4)
    assert info.special_ids >= {0, 1, 2, 3, 4}


def test_cache_reuse_and_force(cli, tmp_path, monkeypatch):
    corpus(tmp_path / "c.txt")
    overrides = ["corpus.sources=[c.txt]", "tokenizer.vocab_size=200"]
    args = ["tokenize", "-r", "bert-tiny", *(x for o in overrides for x in ("--set", o))]
    monkeypatch.chdir(tmp_path)
    assert not run_tokenize(load_recipe("bert-tiny", overrides)).reused  # the first build, in-process
    runs = tmp_path / "runs" / "bert-tiny"
    (path,) = runs.glob("tokenizer-*")
    stamp = (path / "tokenizer.json").stat().st_mtime_ns
    second = cli(*args)
    assert second.rc == 0 and "tokenizer (reused)" in second.stdout, second.output
    assert "training" not in second.stderr and "reading corpus" not in second.stderr
    assert (path / "tokenizer.json").stat().st_mtime_ns == stamp
    forced = cli(*args, "--force")
    assert forced.rc == 0 and "tokenizer (built)" in forced.stdout, forced.output
    assert "training wordpiece tokenizer" in forced.stderr
    assert (path / "tokenizer.json").stat().st_mtime_ns != stamp
    # ensure_tokenizer reuses the same directory; another vocabulary size is another cache entry
    # sharing the corpus; editing the corpus file invalidates both
    again = ensure_tokenizer(load_recipe("bert-tiny", overrides))
    assert again.reused and again.path.resolve() == path.resolve()
    assert not run_tokenize(load_recipe("bert-tiny", overrides[:1] + ["tokenizer.vocab_size=150"])).reused
    assert len(list(runs.glob("tokenizer-*"))) == 2 and len(list(runs.glob("corpus-*"))) == 1
    with open(tmp_path / "c.txt", "a", encoding="utf-8") as f:
        f.write("\nOne more document.\n")
    assert not ensure_tokenizer(load_recipe("bert-tiny", overrides)).reused
    assert len(list(runs.glob("corpus-*"))) == 2


def test_vocab_smaller_than_alphabet_is_refused_before_training(cli, tmp_path, monkeypatch):
    corpus(tmp_path / "c.txt")
    r = cli("tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[c.txt]", "--set", "tokenizer.vocab_size=40")
    assert_user_error(r, "tokenizer.vocab_size 40 is smaller than the", "special tokens",
                      "where: bert-tiny.yaml (shipped)", "set tokenizer.vocab_size to at least")
    assert "training" not in r.stderr
    need = int(r.stderr.split("smaller than the ")[1].split()[0])
    monkeypatch.chdir(tmp_path)
    # the bound is the trainer's: one token less fails, the bound itself trains to about that size
    # (## continuations are an estimate for WordPiece, so allow a few)
    trained = run_tokenize(load_recipe("bert-tiny", ["corpus.sources=[c.txt]", f"tokenizer.vocab_size={need}"]))
    assert need <= load_tokenizer(trained.path).vocab_size <= need + 5
    with pytest.raises(UserError, match="(?s)the 256 byte values of byte-level BPE.*at least 261"):
        run_tokenize(load_recipe("roberta-tiny", ["corpus.sources=[c.txt]", "tokenizer.vocab_size=200"]))
    with pytest.raises(UserError, match=r"\+ `▁`"):
        run_tokenize(load_recipe("albert-tiny", ["corpus.sources=[c.txt]", "tokenizer.vocab_size=40"]))


def test_sample_documents_limits_training_not_the_corpus(tmp_path):
    corpus(tmp_path / "c.txt")
    with open(tmp_path / "c.txt", "a", encoding="utf-8") as f:  # a word only the last documents have
        f.write("".join(f"\nZebrafishology number {i}. Zebrafishology again.\n" for i in range(5)))
    sampled = run_tokenize(tiny(tmp_path, "wordpiece", "tokenizer.sample_documents=20"))
    info = json.loads((sampled.path / "tokenizer_info.json").read_text())
    assert info["trained_on_documents"] == 20 and info["documents"] == 155
    whole = run_tokenize(tiny(tmp_path, "wordpiece"))
    assert "zebrafishology" in load_tokenizer(whole.path).tokenizer.get_vocab()
    assert "zebrafishology" not in load_tokenizer(sampled.path).tokenizer.get_vocab()


def test_iter_encoded_matches_encode_in_corpus_order(trained):
    import datasets

    from bertcli.tokenization.train import iter_encoded

    info = load_tokenizer(trained["bpe"].path)
    corpus_dir = json.loads((trained["bpe"].path / "tokenizer_info.json").read_text())["corpus"]
    ds = datasets.load_from_disk(corpus_dir)["train"].select(range(30))
    sentences = [s for doc in ds["sentences"] for s in doc]
    encoded = [e for batch in iter_encoded(info.tokenizer, ds, batch_documents=7) for e in batch]
    assert [e.ids for e in encoded] == [info.tokenizer.encode(s, add_special_tokens=False).ids for s in sentences]
    assert info.tokenizer.encode("the model").tokens[0] == "<s>"  # the caller's tokenizer is untouched

