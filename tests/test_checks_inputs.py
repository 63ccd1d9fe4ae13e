"""Inputs that looked usable but were not (issue 33): each is one message with exit code 2, no
traceback, and every file of the user's unchanged byte for byte.

- sentence-transformers configs are read strictly, by type, in every command that loads one;
- a text file with NUL bytes (UTF-16 without its byte-order mark) names the byte and `--encoding`;
- a command's cache may not be or contain one of its inputs;
- `evaluate` lays rows out as the checkpoint's heads allow, and refuses a checkpoint without an
  MLM head rather than scoring a fresh one;
- `distill` with both loss weights 0 has nothing to learn from.
"""

from __future__ import annotations

import shutil

import pytest
from conftest import assert_user_error
from finetune_fixtures import tiny_checkpoint
from safety_helpers import assert_kept, snapshot, write_texts

from bertcli.core.errors import UserError
from bertcli.model.pooling import Pooling
from bertcli.model.sentence import read_sentence_dir, write_sentence_dir

TEXTS = ["the river runs past the old mill", "a dog chased the red ball across the park",
         "prices rose sharply in the city markets today", "she reads a book by the window every night"] * 3


@pytest.fixture(scope="module")
def st_model(tmp_path_factory):
    """A tiny sentence-transformers directory (BERT encoder at the root, mean pooling)."""
    path = tiny_checkpoint(tmp_path_factory.mktemp("st") / "model", TEXTS, hidden=32)
    write_sentence_dir(path, Pooling("mean", False, 32), max_seq_length=16)
    return path


# ------------------------------------------------------------------ sentence-transformers configs
POOL = "1_Pooling/config.json"
BAD_CONFIGS = [
    ("sentence_bert_config.json", "null", "holds null"),
    ("sentence_bert_config.json", "16", "holds an integer"),
    ("sentence_bert_config.json", '["max_seq_length"]', "holds an array"),
    ("sentence_bert_config.json", '{"max_seq_length": "16"}', "max_seq_length '16' is not a positive integer"),
    ("sentence_bert_config.json", '{"max_seq_length": 16, "do_lower_case": "false"}', "do_lower_case is a string"),
    ("modules.json", "null", "holds null"),
    ("modules.json", '{"0": "Transformer"}', "holds an object"),
    ("modules.json", '[{"path": "", "type": null}]', "type is null"),
    (POOL, "null", "holds null"),
    (POOL, "32", "holds an integer"),
    ("config_sentence_transformers.json", "null", "holds null"),
    ("config_sentence_transformers.json", "[]", "holds an array"),
    ("config_sentence_transformers.json", '{"prompts": null}', "prompts is null"),
    ("config_sentence_transformers.json", '{"similarity_fn_name": 3}', "similarity_fn_name is an integer"),
    ("config_sentence_transformers.json", '{"prompts": {"query": 1}}', "prompt 'query' is an integer"),
    ("tokenizer_config.json", "null", "must hold a JSON object"),
]


@pytest.mark.parametrize("name,content,needle", BAD_CONFIGS)
def test_every_sentence_transformers_file_is_read_by_type(st_model, tmp_path, name, content, needle):
    path = tmp_path / "m"
    shutil.copytree(st_model, path)
    if name == "tokenizer_config.json":            # read only when sentence_bert_config.json names no length
        (path / "sentence_bert_config.json").unlink()
    (path / name).write_text(content)
    with pytest.raises(UserError) as e:
        read_sentence_dir(path)
    assert needle in e.value.what, e.value.what
    assert e.value.where == str(path / name)


def test_a_null_max_seq_length_names_none_and_the_written_files_read_back(st_model, tmp_path):
    assert read_sentence_dir(st_model).max_seq_length == 16
    path = tmp_path / "m"
    shutil.copytree(st_model, path)
    (path / "sentence_bert_config.json").write_text('{"max_seq_length": null, "do_lower_case": false}')
    assert read_sentence_dir(path).max_seq_length is None


@pytest.mark.parametrize("command", ["embed", "predict", "export", "evaluate-embed"])
def test_a_null_sentence_bert_config_is_one_message_in_every_command(st_model, tmp_path, cli, command):
    model = tmp_path / "model"
    shutil.copytree(st_model, model)
    (model / "sentence_bert_config.json").write_text("null")
    write_texts(tmp_path / "in.txt")
    (tmp_path / "pairs.tsv").write_text("text\ttext_pair\tscore\na b\tc d\t1\ne f\tg h\t2\ni j\tk l\t3\n")
    before = snapshot(tmp_path)
    args = {"embed": ("-i", "in.txt", "-o", "out.npy"), "predict": ("-i", "in.txt", "-o", "out.jsonl"),
            "export": ("-o", "bundle", "--no-verify"), "evaluate-embed": ("--sts", "pairs.tsv")}[command]
    r = cli(command, "-c", "model", *args)
    assert_user_error(r, "sentence_bert_config.json", "holds null")
    assert r.stderr.count("error:") == 1
    assert_kept(before, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["in.txt", "model", "pairs.tsv"]


# ------------------------------------------------------------------- NUL bytes: UTF-16 without a BOM
def test_nul_bytes_name_the_offset_and_the_encoding(tmp_path):
    from bertcli.config.sections import CorpusConfig
    from bertcli.corpus.readers import line_options
    from bertcli.io.text import LineOptions, read_all, read_lines

    le, be = tmp_path / "le.txt", tmp_path / "be.txt"
    le.write_bytes("first line\nsecond\n".encode("utf-16-le"))
    be.write_bytes("ok\n".encode("utf-16-be"))
    for path, offset, line, codec in ((le, 1, 1, "utf-16-le"), (be, 0, 1, "utf-16-be")):
        for read in (lambda o, p=path: list(read_lines(p, o)), lambda o, p=path: read_all(p, o)):
            with pytest.raises(UserError) as e:
                read(LineOptions())
            assert f"NUL byte at byte offset {offset} (line {line})" in e.value.what
            assert e.value.where == f"{path}:{line}" and f"--encoding {codec}" in e.value.fix
    with pytest.raises(UserError) as e:                 # the corpus has no --encoding: convert it
        list(read_lines(le, line_options(CorpusConfig(encoding_errors="skip"))))
    assert "--encoding" not in e.value.fix and "iconv -f UTF-16LE -t UTF-8" in e.value.fix
    assert [t for _, t in read_lines(le, LineOptions(encoding="utf-16-le"))] == ["first line", "second"]


@pytest.mark.parametrize("command", ["embed", "predict"])
def test_a_utf16_text_file_without_a_bom_is_refused(st_model, tmp_path, cli, command):
    (tmp_path / "in.txt").write_bytes("a first text\na second text\n".encode("utf-16-le"))
    before = snapshot(tmp_path)
    r = cli(command, "-c", st_model, "-i", "in.txt", "-o", "out.npy" if command == "embed" else "out.jsonl")
    assert_user_error(r, "in.txt:1", "NUL byte at byte offset 1 (line 1)", "UTF-16-LE without a byte-order mark",
                      "--encoding utf-16-le")
    assert r.stderr.count("error:") == 1
    assert_kept(before, tmp_path)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["in.txt"]
    out = "out.npy" if command == "embed" else "out.jsonl"
    assert cli(command, "-c", st_model, "-i", "in.txt", "-o", out, "--encoding", "utf-16-le").rc == 0
    if command == "predict":                            # two texts, not three (the last one a NUL)
        assert len((tmp_path / out).read_text().splitlines()) == 2
    else:
        import numpy as np

        assert np.load(tmp_path / out).shape[0] == 2
