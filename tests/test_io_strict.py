"""Strict reading through the CLI (issue 20, sections 2 and 3): every bad input below is exit 2
with one message naming the file, the place (line, row, field) and the fix, no traceback, and
every file that was there before is still there byte for byte.

Most cases run the CLI's own entry point in this process (`bertcli.cli.main`, the same parse and
the same error rendering, without a Python start per case); one case per class runs the real
`python -m bertcli` as a user would. Each case is one row of a table, so the count per class is
the number of rows (see CASES_PER_CLASS at the end).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ONE_THREAD, assert_user_error, cli_state_restored, run_cli
from finetune_fixtures import tiny_checkpoint

from bertcli.core import console


# ------------------------------------------------------------------------------ helpers
def snapshot(d: Path) -> dict[str, bytes]:
    """Every file under `d`, but the empty `.<out>.lock` files that the output lock leaves beside
    an output (bertcli/core/locks.py: a free lock is an empty file, never a result)."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".lock") and p.stat().st_size == 0)}


@pytest.fixture
def main(tmp_path, monkeypatch, capsys):
    """`main(*args, needles=...)`: run the CLI in-process in tmp_path and assert a user error."""
    from bertcli.cli import main as cli_main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(console.err, "width", 4000)

    def run(*args, needles=()):
        before = snapshot(tmp_path)
        capsys.readouterr()
        with cli_state_restored(), pytest.raises(SystemExit) as e:
            cli_main([str(a) for a in args])
        out = capsys.readouterr()
        text = out.out + out.err
        assert e.value.code == 2, text
        assert "Traceback" not in text and text.count("error:") == 1, text
        for needle in needles:
            assert needle in text, f"{needle!r} not in:\n{text}"
        assert snapshot(tmp_path) == before, "an input file changed, or a file was written"
        return text
    return run


def fake_checkpoint(d: Path) -> Path:
    """Never loaded: the data files are checked before any model is."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text('{"model_type": "bert"}')
    (d / "tokenizer.json").write_text("{}")
    return d


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


GOOD = [{"text": "good film", "label": "pos"}, {"text": "bad film", "label": "neg"}]


def classify(tmp_path, train: Path, dev: Path | None = None, *extra):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    dev = dev or jsonl(tmp_path / "dev.jsonl", GOOD)
    return ("finetune", "classify", "-c", ckpt, "--train", train, "--dev", dev, "-o", tmp_path / "out", *extra)


# ------------------------------------------------------------------------------ classify records
# (file name, content writer, needles): each a row that must not train
def _write(kind, rows):
    def make(path: Path) -> Path:
        if kind == "jsonl":
            return jsonl(path, rows)
        if kind == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table(rows), path)
            return path
        path.write_bytes(rows if isinstance(rows, bytes) else rows.encode("utf-8"))
        return path
    return make


RECORD_CASES = {
    "no label": ("train.jsonl", _write("jsonl", GOOD + [{"text": "meh"}]), ["no column 'label'", "train.jsonl:3"]),
    "no text": ("train.jsonl", _write("jsonl", [{"label": "pos"}] + GOOD), ["no column 'text'", "train.jsonl:1"]),
    "null text": ("train.jsonl", _write("jsonl", GOOD + [{"text": None, "label": "pos"}]),
                  ["field 'text' is null", "train.jsonl:3"]),
    "parquet null text": ("train.parquet", _write("parquet", {"text": ["a", None, "c"], "label": ["x", "y", "x"]}),
                          ["field 'text' is null", "train.parquet row 1"]),
    "text array": ("train.jsonl", _write("jsonl", GOOD + [{"text": ["a", "b"], "label": "pos"}]),
                   ["field 'text' is an array", "train.jsonl:3", "one JSON string"]),
    "text number": ("train.jsonl", _write("jsonl", [{"text": 7, "label": "pos"}] + GOOD),
                    ["field 'text' is an integer", "train.jsonl:1"]),
    "label object": ("train.jsonl", _write("jsonl", GOOD + [{"text": "x", "label": {"name": "neg"}}]),
                     ["field 'label' is an object", "train.jsonl:3", "not labels"]),
    "label list": ("train.jsonl", _write("jsonl", GOOD + [{"text": "x", "label": [1.0, 2.0]}]),
                   ["field 'label' is an array", "train.jsonl:3"]),
    "label boolean": ("train.jsonl", _write("jsonl", GOOD + [{"text": "x", "label": True}]),
                      ["field 'label' is a boolean", "train.jsonl:3"]),
    "label null": ("train.jsonl", _write("jsonl", GOOD + [{"text": "x", "label": None}]),
                   ["field 'label' is null", "train.jsonl:3"]),
    "label fraction": ("train.jsonl", _write("jsonl", GOOD + [{"text": "x", "label": 1.5}]),
                       ["label 1.5 is a fractional number", "train.jsonl:3", "--regression"]),
    "csv text,text,label": ("train.csv", _write("csv", "text,text,label\na,b,pos\nc,d,neg\n"),
                            ["'text' appears 2 times", "train.csv:1"]),
    "tsv duplicate": ("train.tsv", _write("tsv", "label\ttext\tlabel\npos\ta\tx\n"),
                      ["'label' appears 2 times", "train.tsv:1"]),
    "parquet duplicate": ("train.parquet", None, ["'text' appears 2 times", "train.parquet"]),
    "jsonl key twice": ("train.jsonl", _write("jsonl", GOOD + ['{"text": "a", "text": "b", "label": "pos"}']),
                        ["key 'text' is given twice", "train.jsonl:3"]),
    "one class": ("train.jsonl", _write("jsonl", [{"text": "a", "label": "pos"}, {"text": "b", "label": "pos"}]),
                  ["1 class ('pos')", "train.jsonl", "at least two classes"]),
    "csv short row": ("train.csv", _write("csv", "text,label\na,pos\nb\n"),
                      ["1 fields where the header has 2", "train.csv:3"]),
    "not an object": ("train.jsonl", _write("jsonl", GOOD + ['["a", "pos"]']),
                      ["expected a JSON object, got an array", "train.jsonl:3"]),
}


def _duplicate_parquet(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_arrays([pa.array(["a", "b"]), pa.array(["c", "d"]), pa.array(["x", "y"])],
                                        names=["text", "text", "label"]), path)
    return path


@pytest.mark.parametrize("case", list(RECORD_CASES))
def test_classify_refuses_what_it_cannot_read_exactly(main, tmp_path, case):
    name, make, needles = RECORD_CASES[case]
    train = (_duplicate_parquet if make is None else make)(tmp_path / name)
    main(*classify(tmp_path, train), needles=needles)


def test_regression_labels_must_be_finite_numbers(main, tmp_path):
    for i, (label, needle) in enumerate([("NaN", "not a finite number"), ('"inf"', "not a finite number"),
                                         ('"big"', "'big' is not a number"), ("[3]", "field 'label' is an array")]):
        train = tmp_path / f"reg{i}.jsonl"
        train.write_text(f'{{"text": "a", "label": 1.5}}\n{{"text": "b", "label": {label}}}\n')
        main(*classify(tmp_path, train, None, "--regression"), needles=[needle, f"reg{i}.jsonl:2"])


def test_one_case_through_the_real_cli(tmp_path):
    train = jsonl(tmp_path / "train.jsonl", GOOD + [{"text": ["a", "b"], "label": "pos"}])
    args = classify(tmp_path, train)
    before = snapshot(tmp_path)
    assert_user_error(run_cli(*args, cwd=tmp_path, env=ONE_THREAD), "field 'text' is an array", "train.jsonl:3")
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------ NER
def ner_dir(tmp_path: Path, train_rows: list, name: str = "train.jsonl") -> Path:
    d = tmp_path / "ner"
    d.mkdir()
    good = [{"tokens": ["John", "lives"], "ner_tags": ["B-PER", "O"]}]
    if name.endswith(".jsonl"):
        jsonl(d / name, train_rows)
        jsonl(d / "dev.jsonl", good)
    else:
        (d / name).write_text(train_rows)
        (d / "valid.txt").write_text("John B-PER\nlives O\n")
    return d


NER_CASES = {
    "tokens a string": ([{"tokens": "john", "ner_tags": "OOOO"}], ["field 'tokens' is a string", "train.jsonl:1",
                                                                  "a string is not split"]),
    "tokens a number": ([{"tokens": 5, "ner_tags": ["O"]}], ["field 'tokens' is an integer", "train.jsonl:1"]),
    "tags a string": ([{"tokens": ["a", "b"], "ner_tags": "OO"}], ["field 'ner_tags' is a string", "train.jsonl:1"]),
    "token not a string": ([{"tokens": ["a", 3], "ner_tags": ["O", "O"]}],
                           ["item 1 of field 'tokens' is an integer", "train.jsonl:1"]),
    "lengths differ": ([{"tokens": ["John", "x"], "ner_tags": ["B-PER", "O"]}, {"tokens": ["a", "b"], "ner_tags": ["O"]}],
                       ["2 tokens but 1 tags", "train.jsonl:2"]),
    "tags null": ([{"tokens": ["a"], "ner_tags": None}], ["field 'ner_tags' is null", "train.jsonl:1"]),
    "no tags": ([{"tokens": ["a"]}], ["no column 'ner_tags'", "train.jsonl:1"]),
    "tag a list": ([{"tokens": ["a"], "ner_tags": [["O"]]}], ["holds an array", "train.jsonl:1"]),
    "only O": ([{"tokens": ["a", "b"], "ner_tags": ["O", "O"]}] * 3, ["no entity tag", "train.jsonl", "every one of its 6"]),
}


@pytest.mark.parametrize("case", list(NER_CASES))
def test_ner_refuses_what_it_cannot_read_exactly(main, tmp_path, case):
    rows, needles = NER_CASES[case]
    d = ner_dir(tmp_path, rows)
    main("finetune", "ner", "-c", fake_checkpoint(tmp_path / "ckpt"), "-d", d, "-o", tmp_path / "out", needles=needles)


def test_ner_conll_with_only_o_tags_is_refused(main, tmp_path):
    d = ner_dir(tmp_path, "a O\nb O\n\nc O\n", name="train.txt")
    main("finetune", "ner", "-c", fake_checkpoint(tmp_path / "ckpt"), "-d", d, needles=["no entity tag", "train.txt"])


def test_ner_string_tokens_through_the_real_cli(tmp_path):
    d = ner_dir(tmp_path, [{"tokens": "john", "ner_tags": "OOOO"}])
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    before = snapshot(tmp_path)
    r = run_cli("finetune", "ner", "-c", ckpt, "-d", d, cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, "field 'tokens' is a string", "train.jsonl:1")
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------ SQuAD
CONTEXT = "Paris is the capital of France."


def squad_dir(tmp_path: Path, qas: list, version: str = "1.1") -> Path:
    d = tmp_path / "squad"
    d.mkdir()
    good = [{"id": "g1", "question": "what is paris", "answers": [{"text": "Paris", "answer_start": 0}]}]
    v2 = version == "2.0"
    if v2:
        good.append({"id": "g2", "question": "who?", "answers": [], "is_impossible": True})
    for name, q in ((f"train-v{version}.json", qas), (f"dev-v{version}.json", good)):
        doc = {"version": f"v{version}", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": q}]}]}
        (d / name).write_text(json.dumps(doc))
    return d


def _q(qid, start, text="France.", **kw):
    return {"id": qid, "question": "where", "answers": [{"text": text, "answer_start": start}], **kw}


SQUAD_CASES = {
    # -31 slices to "Paris" through Python's negative indexing: it must not count as a match
    "negative start": ([_q("a", -31, "Paris")], "1.1", ["answer_start -31 is outside its context", "train-v1.1.json"]),
    "start past the end": ([_q("a", len(CONTEXT), text="")], "1.1", ["outside its context"]),
    "start far out": ([_q("a", 10_000)], "1.1", ["answer_start 10000 is outside its context"]),
    "start does not match": ([_q("a", 3)], "1.1", ["does not point at its answer text"]),
    "start a string": ([_q("a", "24")], "1.1", ["answer_start is a str, expected a int"]),
    "ids shared": ([_q("dup", 24) for _ in range(6)], "1.1", ["question id 'dup' is given twice"]),
    "is_impossible a string": ([_q("a", 24, is_impossible="false"), _q("b", 0, "Paris", is_impossible=True)],
                               "2.0", ["field 'is_impossible' is a string", "true or false, without quotes"]),
    "is_impossible an int": ([_q("a", 24, is_impossible=0)], "2.0", ["field 'is_impossible' is an integer"]),
}


@pytest.mark.parametrize("case", list(SQUAD_CASES))
def test_squad_refuses_what_it_cannot_read_exactly(main, tmp_path, case):
    qas, version, needles = SQUAD_CASES[case]
    d = squad_dir(tmp_path, qas, version)
    extra = ("--squad-version", "2") if version == "2.0" else ()
    main("finetune", "squad", "-c", fake_checkpoint(tmp_path / "ckpt"), "-d", d, "-o", tmp_path / "out", *extra,
         needles=needles)


def test_squad_negative_start_through_the_real_cli(tmp_path):
    d = squad_dir(tmp_path, [_q("a", -31, "Paris")])
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    before = snapshot(tmp_path)
    r = run_cli("finetune", "squad", "-c", ckpt, "-d", d, cwd=tmp_path, env=ONE_THREAD)
    assert_user_error(r, "answer_start -31 is outside its context", "train-v1.1.json")
    assert snapshot(tmp_path) == before


def test_squad_ids_are_unique_in_the_datasets_layout_too(tmp_path):
    import datasets

    from bertcli.core.errors import UserError
    from bertcli.tasks.qa.data import load_squad

    row = {"id": "x", "title": "t", "context": CONTEXT, "question": "q",
           "answers": {"text": ["Paris"], "answer_start": [0]}}
    datasets.DatasetDict({"train": datasets.Dataset.from_list([row, row]),
                          "validation": datasets.Dataset.from_list([row])}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(UserError, match="question id 'x' is given twice") as e:
        load_squad(tmp_path / "dd")
    assert "[train] row 1" in e.value.where


# ------------------------------------------------------------------------------ encodings
LATIN1 = "text,label\ncaf\xe9 au lait,pos\nbad film,neg\n".encode("latin1")


def test_latin1_is_one_message_with_offset_and_fix(main, tmp_path):
    train = tmp_path / "train.csv"
    train.write_bytes(LATIN1)
    text = main(*classify(tmp_path, train),
                needles=["train.csv", "not valid UTF-8", "0xe9", "byte offset 14 ", "train.csv:2", "iconv -f latin1 -t utf-8",
                         "--encoding"])
    assert LATIN1.index(b"\xe9") == 14, text


def test_latin1_jsonl_ner_squad_and_txt_predict_are_one_message(main, tmp_path):
    d = tmp_path / "ner"
    d.mkdir()
    (d / "train.jsonl").write_bytes('{"tokens": ["Z\xfcrich"], "ner_tags": ["B-LOC"]}\n'.encode("latin1"))
    (d / "dev.jsonl").write_text('{"tokens": ["Bern"], "ner_tags": ["B-LOC"]}\n')
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    offset = (d / "train.jsonl").read_bytes().index(b"\xfc")
    main("finetune", "ner", "-c", ckpt, "-d", d, needles=["train.jsonl:1", "0xfc", f"byte offset {offset} ", "iconv"])
    conll = tmp_path / "conll"
    conll.mkdir()
    (conll / "train.txt").write_bytes("M\xfcller B-PER\n".encode("latin1"))
    (conll / "valid.txt").write_text("Bern B-LOC\n")
    main("finetune", "ner", "-c", ckpt, "-d", conll, needles=["train.txt:1", "0xfc", "byte offset 1 ", "--encoding"])
    s = squad_dir(tmp_path, [_q("a", 24)])
    raw = (s / "train-v1.1.json").read_text().replace("where", "w\xe9re")
    (s / "train-v1.1.json").write_bytes(raw.encode("latin1"))
    main("finetune", "squad", "-c", ckpt, "-d", s, needles=["train-v1.1.json", "0xe9", "byte offset", "iconv"])


@pytest.mark.parametrize("command", ["classify", "ner", "features", "predict"])
def test_every_reading_command_takes_encoding_and_checks_the_name(main, tmp_path, command):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    train = jsonl(tmp_path / "train.jsonl", GOOD)
    args = {"classify": classify(tmp_path, train),
            "ner": ("finetune", "ner", "-c", ckpt, "-d", ner_dir(tmp_path, [{"tokens": ["A"], "ner_tags": ["B-PER"]}])),
            "features": ("features", "-c", ckpt, "-i", train, "-o", tmp_path / "f.parquet"),
            "predict": ("predict", "-c", ckpt, "-i", train)}[command]
    main(*args, "--encoding", "latin-99", needles=["unknown text encoding 'latin-99'", "utf-8, latin1"])


def test_encoding_flag_utf16_and_boms_read_the_same_records(tmp_path):
    from helpers.recipes import classify_config

    from bertcli.finetune.classification.classify import load_classify

    text = "text,label\ncaf\xe9 au lait,pos\nna\xefve film,neg\n"
    files = {"latin1.csv": (text.encode("latin1"), "latin1"), "utf8.csv": (text.encode("utf-8"), None),
             "bom.csv": (b"\xef\xbb\xbf" + text.encode("utf-8"), None),
             "utf16le.csv": (text.encode("utf-16"), None),                     # BOM + little endian
             "utf16be.csv": (b"\xfe\xff" + text.encode("utf-16-be"), None),
             "cp1252.csv": (text.encode("cp1252"), "cp1252")}
    seen = set()
    for name, (data, enc) in files.items():
        (tmp_path / name).write_bytes(data)
        spec, d = load_classify(classify_config(), tmp_path / name, tmp_path / name, None, encoding=enc)
        seen.add((tuple(d.train.text_a), tuple(spec.labels)))
    assert seen == {(("caf\xe9 au lait", "na\xefve film"), ("neg", "pos"))}, seen


# ------------------------------------------------------------------------------ field size
def test_a_50_mb_field_is_one_message_not_a_csv_error(main, tmp_path):
    big = tmp_path / "train.csv"
    with open(big, "wb") as f:            # one quoted field of 50 MB on one line
        f.write(b'text,label\n"' + b"x" * (50 << 20) + b'",pos\nb,neg\n')
    main(*classify(tmp_path, big), needles=["train.csv:2", "longer than corpus.max_line_bytes (16,777,216 bytes)"])
    spans = tmp_path / "spans.csv"        # the same size spread over short lines inside one quoted field
    with open(spans, "wb") as f:
        f.write(b'text,label\n"' + (b"y" * 1023 + b"\n") * (20 << 10) + b'",pos\nb,neg\n')
    main(*classify(tmp_path, spans), needles=["spans.csv", "a field longer than corpus.max_line_bytes"])


def test_the_recipes_bound_applies_to_finetune_files(main, tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps({"text": "z" * 5000, "label": "pos"}) + "\n" + json.dumps(GOOD[1]) + "\n")
    main(*classify(tmp_path, train, None, "--set", "corpus.max_line_bytes=4096"),
         needles=["train.jsonl:1", "record 1 is longer than corpus.max_line_bytes (4,096 bytes)"])


def test_fields_over_csvs_default_limit_but_within_the_bound_are_read(tmp_path):
    from helpers.recipes import classify_config

    from bertcli.finetune.classification.classify import load_classify

    p = tmp_path / "t.csv"
    long = "word " * 60_000                   # 300 KB: over csv's default 131,072-character field limit
    p.write_text(f'text,label\n"{long}",pos\nshort,neg\n')
    assert load_classify(classify_config(), p, p, None)[1].train.text_a[0] == long


# ------------------------------------------------------------------------------ predict / features
@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt", ["a good film", "a bad film", "caf\xe9"])


def test_predict_and_features_refuse_bad_records_and_encodings(main, tmp_path, tiny):
    txt = tmp_path / "in.txt"
    txt.write_bytes("fine\ncaf\xe9\n".encode("latin1"))
    assert txt.read_bytes().index(b"\xe9") == 8
    main("predict", "-c", tiny, "-i", txt, "-o", tmp_path / "p.jsonl",
         needles=["in.txt:2", "0xe9", "byte offset 8 ", "--encoding"])
    main("features", "-c", tiny, "-i", txt, "-o", tmp_path / "f.parquet", needles=["in.txt:2", "0xe9", "--encoding"])
    rows = jsonl(tmp_path / "in.jsonl", [{"text": "a"}, {"text": ["a", "b"]}])
    main("features", "-c", tiny, "-i", rows, "-o", tmp_path / "f.parquet", needles=["field 'text' is an array", "in.jsonl:2"])
    main("predict", "-c", tiny, "-i", rows, "--task", "features", "-o", tmp_path / "p.jsonl",
         needles=["field 'text' is an array", "in.jsonl:2"])
    main("predict", "-c", tiny, "-i", txt, "--encoding", "nope", needles=["unknown text encoding 'nope'"])
    dup = tmp_path / "dup.csv"
    dup.write_text("text,text\na,b\n")
    main("features", "-c", tiny, "-i", dup, "-o", tmp_path / "f.parquet", needles=["'text' appears 2 times", "dup.csv:1"])


def test_predict_reads_latin1_with_the_flag(tmp_path, tiny):
    from bertcli.export.inputs import read_records

    txt = tmp_path / "in.txt"
    txt.write_bytes("fine\ncaf\xe9\n".encode("latin1"))
    assert [r["text"] for _, r in read_records(txt, "latin1")] == ["fine", "caf\xe9"]
    r = run_cli("predict", "-c", tiny, "-i", txt, "--task", "features", "--encoding", "latin1", "-o", tmp_path / "p.jsonl",
                cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 2


CASES_PER_CLASS = {      # quoted in the branch's report
    "classify records (missing / null / wrong type / duplicates / one class)": len(RECORD_CASES) + 4 + 1,
    "NER records": len(NER_CASES) + 1 + 1,
    "SQuAD records": len(SQUAD_CASES) + 1 + 1,
    "encodings": 1 + 3 + 4 + 6,
    "field size": 2 + 1 + 1,
    "predict / features": 6 + 1,
}

