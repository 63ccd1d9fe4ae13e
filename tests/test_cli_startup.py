"""Startup: `recipes`, `explain`, `info`, `compare`, `--help` and the input-error paths import no torch,
transformers or datasets (read from `python -X importtime` of the real command), and `info`
describes every shipped recipe as shipped (the corpus is needed to build, not to describe)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from compare_fixtures import write_sweep
from conftest import ONE_THREAD, _env

from bertcli.config.recipe import shipped_recipes

HEAVY = ("torch", "transformers", "datasets")
LINE = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$")


def importing(*args: str, cwd=None) -> tuple[int, str, str, set[str]]:
    """(rc, stdout, stderr without the import lines, the top-level packages imported)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "bertcli", *args], cwd=cwd, capture_output=True,
                          text=True, env=_env({**ONE_THREAD, "COLUMNS": "80"}))
    modules, rest = set(), []
    for line in proc.stderr.splitlines():
        m = LINE.match(line)
        if m:
            modules.add(m.group(3).split(".")[0])
        elif not line.startswith("import time:"):
            rest.append(line)
    assert "bertcli" in modules, "the import lines were read"
    return proc.returncode, proc.stdout, "\n".join(rest), modules


@pytest.mark.parametrize("name", shipped_recipes())
def test_info_describes_every_shipped_recipe_without_torch(name, tmp_path):
    rc, out, err, modules = importing("info", "-r", name, cwd=tmp_path)
    assert rc == 0, err
    assert re.search(r"^# model: \w+, vocab [\d,]+$", out, re.M), out[-2000:]
    assert re.search(r"^#   total +[\d,]+$", out, re.M)
    assert re.search(r"^#   (corpus|stages) ", out, re.M)
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_info_says_why_stages_are_not_known_for_a_recipe_without_corpus(tmp_path):
    rc, out, err, _ = importing("info", "-r", "bert-base-chinese", cwd=tmp_path)
    assert rc == 0, err
    assert "#   stages  not known yet: corpus.sources is empty" in out


def test_compare_imports_no_torch_numpy_or_scipy(tmp_path):
    """compare computes its own t distribution: scipy is a test dependency only."""
    a = write_sweep(tmp_path / "a", "ckpt/a", {"rte": {2e-5: [0.61, 0.66, 0.64]}})
    b = write_sweep(tmp_path / "b", "ckpt/b", {"rte": {2e-5: [0.70, 0.69, 0.73]}})
    for fmt in ([], ["--json"]):
        rc, out, err, modules = importing("compare", str(a), str(b), *fmt, cwd=tmp_path)
        assert rc == 0, err
        assert "rte" in out
        assert not modules & {*HEAVY, "numpy", "scipy"}, sorted(modules & {*HEAVY, "numpy", "scipy"})


@pytest.mark.parametrize("args", [
    ["recipes"], ["explain"], ["explain", "finetune"], ["--help"], ["pretrain", "--help"],
    ["finetune", "classify", "--help"],
])
def test_describing_commands_import_no_heavy_module(args, tmp_path):
    rc, out, err, modules = importing(*args, cwd=tmp_path)
    assert rc == 0, err
    assert out.strip()
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


@pytest.mark.parametrize("args,needle", [
    (["pretrain", "-r", "nosuch"], "no shipped recipe"),
    (["pretrain", "-r", "bert-tiny", "--set", "train.max_steps=abc"], "expected an integer"),
    (["tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[]"], "corpus.sources is empty"),
    (["build-data", "-r", "bert-tiny", "--set", "data.masking=x"], "is not one of"),
    (["fill-mask", "-c", "nowhere", "the [MASK]"], "does not exist"),
    (["finetune", "glue", "-c", "nowhere", "--tasks", "sst2"], "does not exist"),
    (["finetune", "classify", "-c", "ckpt", "--train", "nofile", "--dev", "nofile"], "--train nofile does not exist"),
    (["finetune", "ner", "-c", "ckpt", "-d", "nodir"], "--data-dir nodir does not exist"),
    (["finetune", "squad", "-c", "ckpt"], "exactly one of --data-dir"),
    (["export", "-c", "nowhere", "-o", "b"], "does not exist"),
    (["predict", "-c", "nowhere", "-i", "x.txt"], "does not exist"),
    (["features", "-c", "nowhere", "-i", "x.txt", "-o", "f.npy"], "does not exist"),
    (["evaluate", "-c", "nowhere", "--corpus", "x.txt"], "does not exist"),
    (["evaluate", "-c", "ckpt", "--corpus", "x.txt"], "--corpus x.txt does not exist"),
    (["explain", "nosuch"], "unknown section"),
    (["compare", "nowhere", "ckpt"], "does not exist"),
    (["compare", "ckpt", "."], "no results.json in"),
])
def test_input_errors_import_no_heavy_module(args, needle, tmp_path):
    ckpt = tmp_path / "ckpt"            # a checkpoint directory as far as the first checks read it
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"model_type": "bert", "architectures": ["BertForPreTraining"]}')
    (ckpt / "vocab.txt").write_text("[PAD]\n")
    rc, _, err, modules = importing(*args, cwd=tmp_path)
    assert rc == 2 and "error:" in err and needle in err, err
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


DATA_ERRORS = {
    # what the data folder holds -> the command, and the message it must give
    "classify": ({"bad.csv": "text,lbl\nhello,a\n"},
                 ["finetune", "classify", "-c", "ckpt", "--train", "bad.csv", "--dev", "bad.csv"], "no label column"),
    "ner": ({"ner/train.txt": "John B-PER\nlives O extra\n\n", "ner/valid.txt": "John B-PER\n\n"},
            ["finetune", "ner", "-c", "ckpt", "-d", "ner"], "malformed CoNLL line"),
    "squad": ({"sq/train-v1.1.json": '{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "1", "question": '
                                     '"q?", "answers": [{"text": "zz", "answer_start": 0}]}]}]}]}',
               "sq/dev-v1.1.json": '{"data": []}'},
              ["finetune", "squad", "-c", "ckpt", "-d", "sq"], "does not point at its answer text"),
    "glue": ({"glue/SST-2/train.tsv": "sentence\tlabel\nhi\tx\tz\n", "glue/SST-2/dev.tsv": "sentence\tlabel\nhi\t1\n"},
             ["finetune", "glue", "-c", "ckpt", "--tasks", "sst2", "-d", "glue"], "tab-separated fields"),
    "distill": ({"tagger/config.json": '{"model_type": "bert", "architectures": ["BertForTokenClassification"]}',
                 "tagger/vocab.txt": "[PAD]\n", "ner/train.txt": "John B-PER\nlives O extra\n\n",
                 "ner/valid.txt": "John B-PER\n\n"},
                ["distill", "-c", "tagger", "--teacher-task", "ner", "-d", "ner"], "malformed CoNLL line"),
    "embed": ({"pairs.csv": "query,passage\na,b\n"},
              ["finetune", "embed", "-c", "ckpt", "--train", "pairs.csv"], "no anchor column 'anchor'"),
    "evaluate-embed": ({"sts.csv": "text,text_pair,score\na,b,high\n"},
                       ["evaluate-embed", "-c", "ckpt", "--sts", "sts.csv"], "score 'high' is not a number"),
    "embed-file": ({"texts.csv": "id,body\n1,x\n"},
                   ["embed", "-c", "ckpt", "-i", "texts.csv", "-o", "e.npy"], "no column 'text'"),
}


@pytest.mark.parametrize("kind", sorted(DATA_ERRORS))
def test_data_content_errors_import_no_heavy_module(kind, tmp_path):
    """A bad row is found while the data are read, before any model: still no torch (the tasks
    import it in their loss, the runner in its training step)."""
    files, args, needle = DATA_ERRORS[kind]
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"model_type": "bert", "architectures": ["BertForPreTraining"]}')
    (ckpt / "vocab.txt").write_text("[PAD]\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    rc, _, err, modules = importing(*args, cwd=tmp_path)
    assert rc == 2 and "error:" in err and needle in err, err
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))
