"""bertcli.io: one table reader for every command. The same data in every format gives the same
records; a .tsv is read by one rule (tabs only, no quote processing) by fine-tuning, predict,
features, GLUE and the corpus alike; lines are bounded; encodings are detected or named."""

from __future__ import annotations

import ast
import csv
import gzip
import json
import tracemalloc
from pathlib import Path

import pytest

from bertcli.core.errors import UserError
from bertcli.io import tables
from bertcli.io.text import DEFAULT_MAX_LINE_BYTES, LineOptions, read_lines

ROWS = [
    {"text": "plain words", "label": "pos"},
    {"text": "a comma, inside", "label": "neg"},
    {"text": 'say "hi" there', "label": "pos"},
    {"text": "caf\xe9 \u4e2d\u6587 \U0001f600", "label": "neg"},
    {"text": "  spaces kept  ", "label": "pos"},
]


def write_all(d: Path, rows=ROWS) -> dict[str, Path]:
    """The same rows in every format the reader takes."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    d.mkdir(parents=True, exist_ok=True)
    out = {}
    with open(d / "t.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows([[r["text"], r["label"]] for r in rows])
    out["csv"] = d / "t.csv"
    (d / "t.tsv").write_text("text\tlabel\n" + "".join(f"{r['text']}\t{r['label']}\n" for r in rows), encoding="utf-8")
    out["tsv"] = d / "t.tsv"
    (d / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out["jsonl"] = d / "t.jsonl"
    (d / "array.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    out["json array"] = d / "array.json"
    (d / "wrapped.json").write_text(json.dumps({"version": 1, "data": rows}), encoding="utf-8")
    out["json object"] = d / "wrapped.json"
    (d / "lines.json").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out["json lines"] = d / "lines.json"
    pq.write_table(pa.Table.from_pylist(rows), d / "t.parquet")
    out["parquet"] = d / "t.parquet"
    with gzip.open(d / "t.csv.gz", "wb") as f:
        f.write((d / "t.csv").read_bytes())
    out["csv.gz"] = d / "t.csv.gz"
    (d / "bom.csv").write_bytes(b"\xef\xbb\xbf" + (d / "t.csv").read_bytes())
    out["csv utf-8 bom"] = d / "bom.csv"
    (d / "u16.jsonl").write_bytes((d / "t.jsonl").read_text(encoding="utf-8").encode("utf-16"))
    out["jsonl utf-16"] = d / "u16.jsonl"
    (d / "u16.tsv").write_bytes((d / "t.tsv").read_text(encoding="utf-8").encode("utf-16"))
    out["tsv utf-16"] = d / "u16.tsv"
    datasets.Dataset.from_list(rows).save_to_disk(str(d / "saved"))
    out["save_to_disk"] = d / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(d / "saved_dict"))
    out["save_to_disk dict"] = d / "saved_dict"
    return out


def test_every_format_gives_the_same_records(tmp_path):
    files = write_all(tmp_path)
    got = {kind: [(r["text"], r["label"]) for _, r in tables.open_table(p).records()] for kind, p in files.items()}
    want = [(r["text"], r["label"]) for r in ROWS]
    assert {k: v for k, v in got.items() if v != want} == {}
    names = {kind: tables.open_table(p).names() for kind, p in files.items()}
    assert all(n == ["text", "label"] for n in names.values()), names


def test_every_reader_of_the_package_gets_the_same_texts(tmp_path):
    """classify (training), predict's inputs, features and export --dev read each file alike."""
    from test_finetune_classify import _cfg

    from bertcli.export.dev import load_dev
    from bertcli.export.inputs import read_records
    from bertcli.finetune.classification.classify import load_classify
    from bertcli.serve.features import iter_texts

    want = [r["text"] for r in ROWS]
    for kind, p in write_all(tmp_path).items():
        if p.is_dir():
            continue
        train = load_classify(_cfg(), p, p, None)[1].train.text_a
        served = [r["text"] for _, r in read_records(p)]
        feats = [t for _, t in iter_texts(p, "text", None)]
        dev, gold, _ = load_dev(p, "classification", ("neg", "pos"))
        assert train == served == feats == [r["text"] for _, r in dev] == want, kind
        assert gold == [1, 0, 1, 0, 1], kind


QUOTED = '"quoted" start'


def test_a_quoted_tsv_field_is_read_the_same_by_training_and_serving(tmp_path):
    """The bug of issue 19: predict read `"quoted" start` as `quoted start` (csv quoting) while
    fine-tuning kept the quotes. Now every reader keeps them: a .tsv has no quoting."""
    from test_finetune_classify import _cfg

    from bertcli.config.sections import CorpusConfig, SourceConfig
    from bertcli.corpus.readers import ReadStats, read_source, resolve
    from bertcli.export.inputs import read_records
    from bertcli.finetune.classification.classify import load_classify
    from bertcli.finetune.classification.glue import TASKS
    from bertcli.finetune.classification.glue_data import read_tsv_split
    from bertcli.serve.features import iter_texts

    texts = [QUOTED, 'mid "quote', '"whole"', '""', "tab\\tless"]
    p = tmp_path / "q.tsv"
    p.write_text("sentence\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(texts)), encoding="utf-8")
    cfg = _cfg("finetune.classify.text_column=sentence")
    trained = load_classify(cfg, p, p, None)[1].train.text_a
    served = [r["sentence"] for _, r in read_records(p)]
    featured = [t for _, t in iter_texts(p, "sentence", None)]
    glue = read_tsv_split(p, TASKS["sst2"], "train", "train").text_a
    src = SourceConfig(str(p), text_field="sentence")
    corpus = [d.text for d in read_source(resolve(src, 0), CorpusConfig(sources=[src]), ReadStats())]
    assert trained == served == featured == glue == corpus == texts

    # the same texts in a .csv, quoted by csv's standard rule, read back to the same strings
    c = tmp_path / "q.csv"
    with open(c, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["sentence", "label"]] + [[t, i % 2] for i, t in enumerate(texts)])
    assert '"""quoted"" start"' in c.read_text()
    assert load_classify(cfg, c, c, None)[1].train.text_a == [r["sentence"] for _, r in read_records(c)] == texts


def test_csv_quoting_spans_lines_and_commas(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text('text,label\n"two\nlines, one field",a\n"x ""y"" z",b\n', encoding="utf-8")
    recs = list(tables.open_table(p).records())
    assert [r["text"] for _, r in recs] == ["two\nlines, one field", 'x "y" z']
    assert [w for w, _ in recs] == [f"{p}:3", f"{p}:4"]           # where a row ends
    bad = tmp_path / "bad.csv"
    bad.write_text('text,label\n"open quote, a\n', encoding="utf-8")
    with pytest.raises(UserError) as e:
        list(tables.open_table(bad, LineOptions(max_line_bytes=4096)).records())
    assert "bad.csv" in e.value.where


def test_headers_naming_a_column_twice_are_refused_in_every_format(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.csv").write_text("text,text,label\na,b,c\n")
    (tmp_path / "a.tsv").write_text("text\tlabel\ttext\na\tb\tc\n")
    (tmp_path / "s.csv").write_text("text, text ,label\na,b,c\n")       # the same after stripping
    pq.write_table(pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])], names=["text", "text"]), tmp_path / "a.parquet")
    (tmp_path / "a.jsonl").write_text('{"text": "a", "text": "b"}\n')
    for name in ("a.csv", "a.tsv", "s.csv", "a.parquet", "a.jsonl"):
        with pytest.raises(UserError, match="'text' appears 2 times|key 'text' is given twice"):
            list(tables.open_table(tmp_path / name).records())


def test_rows_of_the_wrong_width_are_an_error_or_counted(tmp_path):
    p = tmp_path / "w.tsv"
    p.write_text("a\tb\n1\t2\n1\t2\t3\n4\t5\n")
    with pytest.raises(UserError, match="3 tab-separated fields where the header has 2") as e:
        list(tables.open_table(p).records())
    assert e.value.where == f"{p}:3"
    skipped = []
    assert [r["a"] for _, r in tables.open_table(p, on_bad_width=skipped.append).records()] == ["1", "4"]
    assert skipped == [f"{p}:3"]


@pytest.mark.parametrize("kind", ["tsv", "csv", "jsonl", "txt"])
def test_a_long_line_is_refused_after_reading_at_most_the_bound(tmp_path, kind):
    """A 50 MB line stops at max_line_bytes: it never reaches a tokenizer and memory stays bounded."""
    from bertcli.export.inputs import read_records

    p = tmp_path / f"big.{kind}"
    head = {"tsv": b"text\tlabel\n", "csv": b"text,label\n", "jsonl": b"", "txt": b""}[kind]
    with open(p, "wb") as f:
        f.write(head + {"tsv": b"short\tx", "csv": b"short,x", "jsonl": b'{"text": "short"}', "txt": b"short"}[kind] + b"\n")
        for _ in range(50):
            f.write(b"y" * (1 << 20))
        f.write(b"\n")
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match=r"longer than corpus.max_line_bytes \(16,777,216 bytes\)") as e:
            list(read_records(p))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.where == f"{p}:{3 if head else 2}"
    assert peak < 3 * DEFAULT_MAX_LINE_BYTES, peak


def test_the_bound_is_the_corpus_default():
    from bertcli.config.sections import CorpusConfig

    assert CorpusConfig().max_line_bytes == DEFAULT_MAX_LINE_BYTES


def test_utf16_without_a_bom_is_not_guessed(tmp_path):
    p = tmp_path / "le.txt"
    p.write_bytes("caf\xe9\n".encode("utf-16-le"))
    with pytest.raises(UserError, match="NUL byte at byte offset 1 .*UTF-16-LE without a byte-order mark"):
        list(read_lines(p))
    assert [t for _, t in read_lines(p, LineOptions(encoding="utf-16-le"))] == ["caf\xe9"]


def test_one_dataset_where_a_datasetdict_is_needed_is_one_message(tmp_path):
    import datasets

    datasets.Dataset.from_list([{"text": "a"}]).save_to_disk(str(tmp_path / "one"))
    with pytest.raises(UserError, match="holds one dataset, not a DatasetDict") as e:
        tables.saved_splits(tmp_path / "one")
    assert "save_to_disk" in e.value.fix
    # ...and it is said in one place only: GLUE, NER and SQuAD no longer carry a copy
    pkg = Path(__file__).resolve().parents[1] / "bertcli"
    holders = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py") if "not a DatasetDict" in p.read_text()]
    assert holders == ["io/tables.py"], holders


def test_the_io_package_imports_only_the_base():
    """bertcli.io is a base layer: from bertcli it imports errors and hub (itself errors only)."""
    root = Path(__file__).resolve().parents[1] / "bertcli" / "io"
    found = set()
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bertcli"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("bertcli"))
    io_modules = {"bertcli.io.text", "bertcli.io.records", "bertcli.io.tables"}
    assert found - {"bertcli.core.errors", "bertcli.core.hub"} <= io_modules, found


def test_a_hub_name_goes_through_load_dataset(tmp_path, monkeypatch):
    """The hub path is real `datasets.load_dataset` code; tested on a local folder (no network)."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    d = tmp_path / "local"
    d.mkdir()
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    table = tables.hub_table(str(d), None, "train", where="--hub", local_hint="use local files")
    assert [(r["text"], r["label"]) for _, r in table.records()] == [(r["text"], r["label"]) for r in ROWS]
    assert list(tables.hub_splits(str(d))) == ["train"]
