"""Corpus readers, sentence splitting, the validation split, the Arrow stage and its errors."""

from __future__ import annotations

import gzip
import json
import random
import tracemalloc

import pytest
from conftest import assert_user_error, write_documents

from bertcli.config.recipe import load_recipe
from bertcli.config.sections import CorpusConfig, SourceConfig
from bertcli.core.errors import UserError
from bertcli.corpus import builtin as builtin_corpus
from bertcli.corpus.build import (
    build_corpus,
    corpus_info,
    doc_hash,
    documents,
    is_validation,
    load_corpus,
    resolve_sources,
    split_sentences,
)
from bertcli.corpus.readers import ReadStats, read_lines
from bertcli.tokenization.build import run_tokenize

DOCS = [["The first document starts here.", "It has two sentences."],
        ["A second document.", "Its second sentence.", "And a third one."],
        ["The third document has one sentence."]]


def read(*sources, **cfg) -> list[list[str]]:
    """Documents of a corpus config, straight from the readers (no Arrow)."""
    c = CorpusConfig(sources=[s if isinstance(s, SourceConfig) else SourceConfig(str(s)) for s in sources], **cfg)
    return list(documents(c, resolve_sources(c), ReadStats()))


def recipe(tmp_path, *overrides):
    return load_recipe("bert-tiny", [f"output_dir={tmp_path / 'run'}", *overrides])


# ------------------------------------------------------------------------------ sentences
@pytest.mark.parametrize("text, expected", [
    ("Dr. Smith went to Washington. He arrived at 3.30 p.m. on Monday. Did he stay? Yes!",
     ["Dr. Smith went to Washington.", "He arrived at 3.30 p.m. on Monday.", "Did he stay?", "Yes!"]),
    ("J. R. R. Tolkien wrote books, e.g. The Hobbit. Pi is about 3.14159. It never ends.",
     ["J. R. R. Tolkien wrote books, e.g. The Hobbit.", "Pi is about 3.14159.", "It never ends."]),
    ('He said "Stop." Then he left. version 2.0 is out. see the U.S. economy.',
     ['He said "Stop."', "Then he left. version 2.0 is out. see the U.S. economy."]),
    ("First paragraph without a period\n\nsecond paragraph\nwrapped over lines.",
     ["First paragraph without a period", "second paragraph wrapped over lines."]),
])
def test_english_sentences(text, expected):
    assert split_sentences(text) == expected


def test_chinese_and_mixed_sentences():
    assert split_sentences("我们今天去北京。天气很好！你呢？好的") == ["我们今天去北京。", "天气很好！", "你呢？", "好的"]
    assert split_sentences("他说：“走吧。”然后离开了。") == ["他说：“走吧。”", "然后离开了。"]
    assert split_sentences("BERT 很好用。It works well. 真的吗？") == ["BERT 很好用。", "It works well.", "真的吗？"]


def test_sentence_split_policy(tmp_path):
    f = tmp_path / "docs.txt"
    f.write_text("One sentence. Two sentence.\nThree here.\n", encoding="utf-8")
    layout = SourceConfig(str(f), layout="documents")
    assert read(layout) == [["One sentence.", "Two sentence."], ["Three here."]]
    assert read(layout, sentence_split="never") == [["One sentence. Two sentence."], ["Three here."]]
    # Google format keeps its lines unless asked to split them
    assert read(f) == [["One sentence. Two sentence.", "Three here."]]
    assert read(f, sentence_split="always") == [["One sentence.", "Two sentence.", "Three here."]]
    assert read(f, min_sentence_chars=12) == [["One sentence. Two sentence."]]


# -------------------------------------------------------------------------------- formats
def test_text_directory_glob_and_compressed(tmp_path):
    write_documents(tmp_path / "d" / "b.txt", DOCS[1:])
    write_documents(tmp_path / "d" / "a.txt", DOCS[:1])
    (tmp_path / "d" / ".hidden.txt").write_text("never read\n")
    assert read(tmp_path / "d") == DOCS  # sorted file order, hidden files skipped
    assert read(str(tmp_path / "d" / "*.txt")) == DOCS
    with gzip.open(tmp_path / "c.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\ufeffline one.\nline two.\n\n\nnext doc.\n")  # BOM and extra blank lines
    assert read(tmp_path / "c.txt.gz") == [["line one.", "line two."], ["next doc."]]


def test_jsonl_json_csv_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = ["Alpha one. Alpha two.", "Beta only.", "Gamma has\n\nparagraphs."]
    expected = [["Alpha one.", "Alpha two."], ["Beta only."], ["Gamma has", "paragraphs."]]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(texts))
                                      + "\n" + json.dumps({"id": 9, "body": None}) + "\n")
    assert read(SourceConfig(str(tmp_path / "a.jsonl"), text_field="body")) == expected
    (tmp_path / "arr.json").write_text(json.dumps([{"text": t} for t in texts], indent=1))
    assert read(tmp_path / "arr.json") == expected
    (tmp_path / "obj.json").write_text(json.dumps({"version": 1, "data": [{"text": t} for t in texts]}))
    assert read(tmp_path / "obj.json") == expected
    # a list of strings is taken as the document's sentences, unsplit
    (tmp_path / "s.json").write_text("\n".join(json.dumps({"text": d}) for d in DOCS))
    assert read(tmp_path / "s.json") == DOCS
    with open(tmp_path / "t.csv", "w", encoding="utf-8", newline="") as f:
        f.write('label,text\n1,"Alpha one. Alpha two."\n0,Beta only.\n2,"Gamma has\n\nparagraphs."\n')
    assert read(tmp_path / "t.csv") == expected
    pq.write_table(pa.table({"text": texts, "n": [1, 2, 3]}), tmp_path / "t.parquet", row_group_size=2)
    assert read(tmp_path / "t.parquet") == expected


def test_max_documents_and_saved_dataset(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"text": ["Saved one.", "Saved two.", "Saved three."]}).save_to_disk(
        str(tmp_path / "saved"))
    src = SourceConfig(str(tmp_path / "saved"), max_documents=2)
    assert read(src) == [["Saved one."], ["Saved two."]]


def test_hub_loader_on_a_local_dataset_folder(tmp_path, monkeypatch):
    """`format: hub` runs the real datasets.load_dataset; here on a folder of JSON lines files."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "train.jsonl").write_text("".join(json.dumps({"content": f"Row {i} text. Second."}) + "\n"
                                                          for i in range(3)))
    src = SourceConfig(str(tmp_path / "repo"), format="hub", text_field="content", split="train")
    assert read(src) == [[f"Row {i} text.", "Second."] for i in range(3)]
    with pytest.raises(UserError, match="no field 'text'.*content"):
        read(SourceConfig(str(tmp_path / "repo"), format="hub"))


def test_builtin_prefix_is_small_prose():
    docs = read(SourceConfig("builtin", max_documents=5))
    assert len(docs) == 5
    sentences = [s for d in docs for s in d]
    assert len(sentences) > 50
    assert not any(s.startswith((">>>", "...")) for s in sentences)


def test_builtin_whole_corpus(tmp_path):
    """The one test that reads the whole built-in corpus: size, cleanliness, determinism."""
    r = recipe(tmp_path)
    result = build_corpus(r)
    info = corpus_info(result.path)
    chars = info["train"]["characters"] + info["validation"]["characters"]
    docs = info["train"]["documents"] + info["validation"]["documents"]
    assert 1.4e6 < chars < 3e6, chars  # "about 2 MB of English prose"
    assert docs > 400
    dd = load_corpus(r)
    sample = [s for row in list(dd["train"].select(range(0, len(dd["train"]), 7))["sentences"]) for s in row]
    ends = sum(s[-1] in ".!?\"')" for s in sample) / len(sample)
    assert ends > 0.95, ends
    assert not any(">>>" in s or s.startswith("def ") for s in sample)
    # deterministic: a second reading gives the same first documents, and the same split
    again = read(SourceConfig("builtin", max_documents=100))
    train_again = [d for d in again if not is_validation(d, r.corpus.validation_fraction)]
    assert list(dd["train"].select(range(len(train_again)))["sentences"]) == train_again
    assert result.path == build_corpus(r).path and build_corpus(r).reused
    assert builtin_corpus.fingerprint()["python"] in json.dumps(resolve_sources(r.corpus)[0].fingerprint())


# ---------------------------------------------------------------------- validation split
def test_validation_split_is_deterministic_and_has_the_right_size():
    rng = random.Random(0)
    docs = [[f"Document {i} sentence {j} {rng.random()}." for j in range(3)] for i in range(4000)]
    val = {tuple(d) for d in docs if is_validation(d, 0.1)}
    # binomial(4000, 0.1): mean 400, sd 19; allow 4 sd
    assert abs(len(val) - 400) < 76
    shuffled = docs[:]
    rng.shuffle(shuffled)
    assert {tuple(d) for d in shuffled if is_validation(d, 0.1)} == val  # order does not matter
    assert 0 <= min(doc_hash(d) for d in docs) < 0.01 and 0.99 < max(doc_hash(d) for d in docs) < 1


def test_split_stage_small_corpus_gets_both_splits(tmp_path):
    write_documents(tmp_path / "c.txt", DOCS)
    r = recipe(tmp_path, f"corpus.sources=[{tmp_path / 'c.txt'}]", "corpus.validation_fraction=0.001")
    dd = load_corpus(r)
    assert len(dd["validation"]) == 1 and len(dd["train"]) == 2
    assert sorted(list(dd["train"]["sentences"]) + list(dd["validation"]["sentences"])) == sorted(DOCS)
    info = corpus_info(build_corpus(r).path)
    assert info["validation"] == {"documents": 1, "sentences": len(dd["validation"][0]["sentences"]),
                                  "characters": sum(map(len, dd["validation"][0]["sentences"]))}
    # adding a source does not move documents between splits
    write_documents(tmp_path / "more.txt", [[f"Extra document {i}."] for i in range(200)])
    r2 = recipe(tmp_path, f"corpus.sources=[{tmp_path / 'c.txt'}, {tmp_path / 'more.txt'}]",
                "corpus.validation_fraction=0.1")
    dd2 = load_corpus(r2)
    val2 = {tuple(s) for s in dd2["validation"]["sentences"]}
    assert val2 == {tuple(d) for d in DOCS + [[f"Extra document {i}."] for i in range(200)] if is_validation(d, 0.1)}



def test_a_single_document_always_trains(tmp_path):
    """One document (e.g. a text file without blank lines) whose hash falls in the validation
    fraction still lands in train: the tokenizer never trains on an empty split."""
    doc = next(d for d in ([f"Sentence number {i}."] for i in range(100)) if is_validation(d, 0.5))
    write_documents(tmp_path / "one.txt", [doc])
    dd = load_corpus(recipe(tmp_path, f"corpus.sources=[{tmp_path / 'one.txt'}]", "corpus.validation_fraction=0.5"))
    assert list(dd["train"]["sentences"]) == [doc] and len(dd["validation"]) == 0


# -------------------------------------------------------------------------------- errors
def test_missing_file_and_empty_glob(cli):
    assert_user_error(cli("tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[nowhere/corpus.txt]"),
                      "nowhere/corpus.txt", "corpus.sources[0]")
    assert_user_error(cli("tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[builtin, 'shards/*.txt']"),
                      "'shards/*.txt' matches no files", "corpus.sources[1]")


def test_empty_corpus(cli, tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n   \n")
    assert_user_error(cli("tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[empty.txt]"),
                      "the corpus is empty", "empty.txt")


def test_non_utf8_error_and_replace_skip(cli, tmp_path):
    lines = [b"Good line one.", b"caf\xe9 latin-1 here.", b"", b"Good again.", b"\xff\xfe bad twice."]
    (tmp_path / "latin.txt").write_bytes(b"\n".join(lines) + b"\n")
    r = cli("tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[latin.txt]")
    assert_user_error(r, "2 lines of latin.txt are not valid UTF-8", "line 2, 5", "latin.txt:2", "iconv",
                      "encoding_errors: replace")
    replace = recipe(tmp_path, f"corpus.sources=[{tmp_path / 'latin.txt'}]", "corpus.encoding_errors=replace",
                     "tokenizer.vocab_size=100")
    result = build_corpus(replace)
    assert dict(result.summary)["non-UTF-8 lines"].startswith("2 replaced, 0 skipped (first: ")
    # and `bertcli tokenize` shows it with its own summary
    assert dict(run_tokenize(replace).summary)["non-UTF-8 lines"] == dict(result.summary)["non-UTF-8 lines"]
    info = corpus_info(result.path)
    assert info["encoding"]["replaced_lines"] == 2 and info["encoding"]["first_bad"][0].endswith("latin.txt:2")
    assert info["train"]["characters"] + info["validation"]["characters"] == sum(
        len(line.decode("utf-8", "replace")) for line in lines)
    cfg = CorpusConfig(sources=[SourceConfig(str(tmp_path / "latin.txt"))], encoding_errors="skip")
    stats = ReadStats()
    assert list(documents(cfg, resolve_sources(cfg), stats)) == [["Good line one."], ["Good again."]]
    assert stats.skipped_lines == 2
    # one JSON document cannot drop a line: with replace or skip its bad bytes are replaced, counted
    (tmp_path / "bad.json").write_bytes(b'[{"text": "Fine one. Caf\xe9 here."}, {"text": "Two."}]')
    for mode in ("replace", "skip"):
        cfg = CorpusConfig(sources=[SourceConfig(str(tmp_path / "bad.json"))], encoding_errors=mode)
        stats = ReadStats()
        docs = list(documents(cfg, resolve_sources(cfg), stats))
        assert docs[0] == ["Fine one.", "Caf\ufffd here."] and stats.replaced_lines == 1, (mode, docs)
        assert stats.first_bad[0].endswith("bad.json: byte offset 24")


def test_giant_line_is_refused_quickly_and_in_bounded_memory(cli, tmp_path):
    big = tmp_path / "one-line.txt"
    with open(big, "wb") as f:
        f.write(b"Short first line.\n")
        chunk = b"word " * (1 << 20)  # 5 MB
        for _ in range(10):  # a 50 MB line
            f.write(chunk)
    assert_user_error(cli("tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[one-line.txt]"),
                      "line 2 is longer than corpus.max_line_bytes (16,777,216 bytes)", "one-line.txt:2")
    cfg = CorpusConfig(max_line_bytes=1 << 20)
    tracemalloc.start()
    with pytest.raises(UserError, match="line 2 is longer"):
        for _ in read_lines(big, cfg, ReadStats()):
            pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 << 20, peak  # read at most about max_line_bytes, never the 50 MB line


def test_missing_text_field_names_the_columns(cli, tmp_path):
    (tmp_path / "c.jsonl").write_text(json.dumps({"title": "t", "body": "Some text here."}) + "\n")
    assert_user_error(cli("tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[c.jsonl]"),
                      "no field 'text'", "title, body", "c.jsonl:1", "corpus.sources[0].text_field")


def test_hub_dataset_offline_fails_fast(cli):
    r = cli("tokenize", "-r", "bert-tiny", "--set",
            "corpus.sources=[{path: bertcli-tests/no-such-corpus, format: hub}]",
            env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert_user_error(r, "cannot load the `datasets` dataset 'bertcli-tests/no-such-corpus'",
                      "offline mode is on", "corpus.sources[0]")
    # a bare name that is no local path is taken for a hub name; a path-like one is a missing file
    assert resolve_sources(CorpusConfig(sources=[SourceConfig("owner/corpus")]))[0].kind == "hub"
    with pytest.raises(UserError, match="no such file"):
        resolve_sources(CorpusConfig(sources=[SourceConfig("owner/corpus.jsonl")]))
