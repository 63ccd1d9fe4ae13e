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

import json
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


# ------------------------------------------------------------------------------- evaluate
@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    """Three transformers checkpoints of one BERT: with both pretraining heads, with the MLM head
    only, and the bare encoder; a held-out file of one text per line (no blank line: 1 document)."""
    from continue_fixtures import general_documents, hf_checkpoint

    root = tmp_path_factory.mktemp("evaluate")
    texts = [s for d in general_documents(60) for s in d]
    made = {arch: hf_checkpoint(root / arch, "bert", texts, arch) for arch in ("pretraining", "mlm", "base")}
    (root / "lines.txt").write_text("\n".join(texts[:80]) + "\n", encoding="utf-8")
    return {**made, "lines": root / "lines.txt"}


def _work(tmp_path, ev, *names):
    """Copies of the fixture's inputs in tmp_path (a refusal must leave them byte for byte)."""
    for name in names:
        src = ev[name]
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, tmp_path / src.name)
    return snapshot(tmp_path)


def test_evaluate_at_its_defaults_follows_the_checkpoints_heads(ev, tmp_path, cli):
    """An MLM-only checkpoint on one text per line: single-text rows (no pair head to score
    pairs), exit 0, no NumPy warning; a checkpoint with NSP asks for pairs, which one document
    cannot give: the message names --objective, never the recipe key."""
    _work(tmp_path, ev, "mlm", "pretraining", "lines")
    r = cli("evaluate", "-c", "mlm", "--corpus", "lines.txt", "--cache", "cache", "--pppl-rows", "2", "--json")
    assert r.rc == 0, r.output
    res = json.loads(r.stdout)["corpora"][0]
    assert res["objective"] == "none" and res["pair_acc"] is None and res["masked"] > 50
    assert "Warning" not in r.stderr and "not writable" not in r.stderr, r.stderr
    before = snapshot(tmp_path)
    for ckpt, more in (("pretraining", ()), ("mlm", ("--objective", "nsp"))):
        r = cli("evaluate", "-c", ckpt, "--corpus", "lines.txt", "--cache", "cache", *more)
        assert_user_error(r, "too small for NSP", "where: --corpus lines.txt: --objective",
                          "--objective sop", "--objective none")
        assert "data.objective" not in r.output and r.stderr.count("error:") == 1
    assert_kept(before, tmp_path)
    # another family's layout names the flag too, before the model is read
    r = cli("evaluate", "-c", "mlm", "--corpus", "lines.txt", "--cache", "cache", "--objective", "sop")
    assert_user_error(r, "--objective sop does not fit the checkpoint: a bert model pairs rows for NSP",
                      "--objective nsp or --objective none")
    assert "data.objective" not in r.output and "threads:" not in r.output
    assert_kept(before, tmp_path)


def test_sop_on_single_sentence_documents_names_evaluates_flag(tmp_path):
    """The data check's fix lines as evaluate's recipe names them: its flag, and no recipe key
    it cannot set (corpus.sources[].layout); pretrain's recipe keeps the keys."""
    from bertcli.config.recipe import load_recipe
    from bertcli.data.checks import check_tokenized

    info = {"train": {"corpus_tokens": 10, "corpus_documents": 3, "documents": 3, "multi_sentence_documents": 0}}
    recipe = load_recipe("albert-tiny", [])
    with pytest.raises(UserError) as e:
        check_tokenized(recipe, info)
    assert "data.objective sop pairs" in e.value.what and "corpus.sources[].layout: documents" in e.value.fix
    assert "data.objective: none" in e.value.fix
    recipe.flags, recipe.source = {"data.objective": "--objective"}, "--corpus x.txt"
    with pytest.raises(UserError) as e:
        check_tokenized(recipe, info)
    assert "--objective sop pairs" in e.value.what and e.value.where == "--corpus x.txt: --objective"
    assert "--objective none" in e.value.fix and "corpus." not in e.value.fix and "data." not in e.value.fix


def test_evaluate_refuses_a_checkpoint_without_an_mlm_head(ev, tmp_path, cli):
    from bertcli.model.checkpoint import missing_heads

    assert [missing_heads(ev[a]) for a in ("pretraining", "mlm", "base")] == [set(), {"pair"}, {"mlm", "pair"}]
    before = _work(tmp_path, ev, "base", "lines")
    r = cli("evaluate", "-c", "base", "--corpus", "lines.txt", "--cache", "cache")
    assert_user_error(r, "the checkpoint base has no MLM head", "initialized at random",
                      "pretrain --init-from base", "finetune's own scores")
    assert r.stderr.count("error:") == 1 and "initialized fresh" not in r.output
    assert_kept(before, tmp_path)
    assert not (tmp_path / "cache").exists()


def test_missing_heads_by_family(tmp_path):
    from continue_fixtures import general_documents, hf_checkpoint

    from bertcli.model.checkpoint import missing_heads

    texts = [s for d in general_documents(20) for s in d]
    for family, arch, want in (("roberta", "mlm", set()), ("roberta", "base", {"mlm"}), ("albert", "pretraining", set()),
                               ("modernbert", "mlm", set()), ("modernbert", "base", {"mlm"})):
        path = hf_checkpoint(tmp_path / f"{family}-{arch}", family, texts, arch)
        assert missing_heads(path) == want, (family, arch)


def test_evaluate_of_a_utf16_corpus_names_the_encoding(ev, tmp_path, cli):
    before = _work(tmp_path, ev, "pretraining")
    (tmp_path / "u16.txt").write_bytes(ev["lines"].read_text(encoding="utf-8").encode("utf-16-le"))
    before = snapshot(tmp_path)
    r = cli("evaluate", "-c", "pretraining", "--corpus", "u16.txt", "--cache", "cache")
    assert_user_error(r, "u16.txt holds a NUL byte at byte offset 1 (line 1)", "UTF-16-LE without a byte-order mark",
                      "iconv -f UTF-16LE -t UTF-8 u16.txt")
    assert "too small" not in r.output and r.stderr.count("error:") == 1
    assert_kept(before, tmp_path)


@pytest.mark.parametrize("cache", ["mlm", "mlm/stages", "corpus/stages", "corpus"])
def test_evaluate_cache_inside_an_input_is_refused_before_work(ev, tmp_path, cli, cache):
    _work(tmp_path, ev, "mlm")
    (tmp_path / "corpus").mkdir()
    shutil.copyfile(ev["lines"], tmp_path / "corpus" / "held.txt")
    before = snapshot(tmp_path)
    r = cli("evaluate", "-c", "mlm", "--corpus", "corpus", "--cache", cache)
    what = "is" if "/" not in cache else "lies inside"
    assert_user_error(r, f"--cache {cache} {what} the input", "choose another --cache")
    assert r.stderr.count("error:") == 1 and "threads:" not in r.stderr        # before the model is read
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path) == before                                         # nothing added either


# ------------------------------------------------------------------- pretrain: output_dir / cache_dir
@pytest.mark.parametrize("sets,key", [(("output_dir=run",), "output_dir run holds the input run/final"),
                                      (("output_dir=out", "cache_dir=run/final"), "cache_dir run/final is the input"),
                                      (("output_dir=run/final/next",), "output_dir run/final/next lies inside"),
                                      (("output_dir=out", "cache_dir=corpus/stages"), "cache_dir corpus/stages lies "
                                                                                      "inside the input corpus")])
def test_pretrain_writes_no_stage_or_run_into_its_inputs(ev, tmp_path, cli, sets, key):
    """--init-from a run's final/ with output_dir that run (where --force would replace final/),
    and caches in the checkpoint or the corpus folder: refused before any work."""
    shutil.copytree(ev["pretraining"], tmp_path / "run" / "final")
    (tmp_path / "corpus").mkdir()
    shutil.copyfile(ev["lines"], tmp_path / "corpus" / "held.txt")
    before = snapshot(tmp_path)
    r = cli("pretrain", "-r", "continue-tiny", "--init-from", "run/final", "--set", "corpus.sources=[corpus]",
            *[x for s in sets for x in ("--set", s)], "--force")
    assert_user_error(r, key)
    assert r.stderr.count("error:") == 1
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------- distill
def test_distill_with_every_loss_weight_zero_is_refused(ev, tmp_path, cli):
    from safety_helpers import write_classify

    train, dev = write_classify(tmp_path / "data")
    before = snapshot(tmp_path)
    r = cli("distill", "-c", ev["pretraining"], "--teacher-task", "classify", "--train", train, "--dev", dev, "--out", "out",
            "--set", "finetune.distill.soft_weight=0", "--set", "finetune.distill.hard_weight=0")
    assert_user_error(r, "every distillation loss weight is 0", "soft_weight 0, hard_weight 0, hidden_weight 0",
                      "where: finetune.distill", "--set finetune.distill.soft_weight=0.5")
    assert r.stderr.count("error:") == 1
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()
