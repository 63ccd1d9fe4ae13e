"""The newcomer's first hour: output that survives pipes and narrow terminals, help that shows
what it says, recipes checked against the command, warmup that fits a shortened run, hub
look-ups that fail at once, `info --yaml`, `--version`."""

from __future__ import annotations

import io
import re

import pytest
import yaml
from conftest import ONE_THREAD, assert_user_error, run_cli, run_cli_process
from helpers.models import roberta_dir
from helpers.recipes import TINY
from rich.console import Console

from bertcli.config.recipe import load_recipe
from bertcli.train.metrics import LiveView

NARROW = {**ONE_THREAD, "COLUMNS": "80"}


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln]


def assert_unpadded(text: str) -> None:
    for ln in _lines(text):
        assert ln == ln.rstrip(), f"trailing spaces in {ln!r}"


def test_piped_pretrain_output_is_one_record_per_line(tmp_path):
    """A pipe at COLUMNS=80 (a CI log): step lines longer than 80 stay whole, nothing is padded."""
    sets = [*TINY, "train.max_steps=6", "train.eval_every=3", "train.save_every=3", "train.log_every=1",
            f"output_dir={tmp_path / 'run'}"]
    r = run_cli_process("pretrain", "-r", "bert-tiny", *[x for s in sets for x in ("--set", s)], cwd=tmp_path,
                        env=NARROW)                     # a real pipe: bertcli's own choice of plain output
    assert r.rc == 0, r.output
    assert_unpadded(r.stdout)
    assert_unpadded(r.stderr)
    steps = [ln for ln in _lines(r.stderr) if ln.startswith("step ")]
    assert [ln.split()[1] for ln in steps] == [f"{i}/6" for i in range(1, 7)]
    for ln in steps:   # each record whole on its line: the rate, the eta and (eval steps) val figures
        assert re.search(r"\d[\d,]* tok/s", ln) and re.search(r"eta \S+$", ln), ln
    assert any(len(ln) > 80 for ln in steps)            # long, and still not wrapped at 80
    assert "| val loss" in steps[2] and "| val loss" in steps[5]
    summary = _lines(r.stdout)
    assert summary[0] == "pretrain bert-tiny: done"
    assert any(re.fullmatch(r"steps +6 / 6", ln) for ln in summary), summary


def test_live_view_at_80_columns_shows_steps_total_and_time_left():
    buf = io.StringIO()
    term = Console(file=buf, width=80, force_terminal=True, color_system=None)
    record = {"step": 250_000, "loss": 6.01234, "mlm_acc": 0.1648, "pair_acc": 0.5, "lr": 1e-4,
              "tokens_per_s": 31_900.0}
    with LiveView(1_000_000, 0, "nsp", rich_console=term, first_log_step=50) as view:
        view._progress.refresh()
        assert "first figures at step 50" in buf.getvalue()        # not a bare "starting..."
        for step in range(1, 250_001, 25_000):
            view.step(step)
        view.record(record)
        view.record({**record, "val_loss": 6.3, "val_mlm_acc": 0.14, "val_pair_acc": 0.6})
        view._progress.refresh()
    screens = [s.replace("\x1b[2K", "") for s in re.split(r"[\r\n]", buf.getvalue())]
    screens = [re.sub(r"\x1b\[\?25[lh]", "", s) for s in screens if s.strip()]
    last = [s for s in screens if "250,000/1,000,000" in s][-1]
    assert len(last) <= 80, last
    assert re.search(r"\d+:\d\d(:\d\d)?<\d+:\d\d(:\d\d)?", last), last     # elapsed<remaining
    assert "32k tok/s" in last and "loss 6.012" in last and "acc 0.165" in last
    val = [s for s in screens if s.startswith("step 250,000/1,000,000")]
    assert val and all(len(s) <= 80 for s in val) and "nsp_acc 0.6000" in val[0]


def test_version_and_debug_in_help():
    from bertcli import __version__

    r = run_cli("--version")
    assert r.rc == 0 and r.stdout.strip() == f"bertcli {__version__}"
    assert "--debug" in run_cli("--help").stdout


def test_explain_shows_square_brackets_and_never_pads():
    r = run_cli("explain", "data", env={"COLUMNS": "80"})
    assert r.rc == 0, r.output
    assert_unpadded(r.stdout)
    lines = _lines(r.stdout)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("data.word_segmenter  "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
    help_text = " ".join(ln.strip() for ln in lines[start + 1:end])     # wrapped beneath its key
    assert help_text.endswith("Without it every CJK character is its own word.")
    assert "pip install bertcli[chinese]" in help_text          # not swallowed as rich markup


def test_recipes_descriptions_are_whole_sentences():
    r = run_cli("recipes", env={"COLUMNS": "80"})
    assert r.rc == 0, r.output
    rows = _lines(r.stdout)[1:]
    assert len(rows) >= 11
    for ln in rows:
        assert ln.endswith("."), ln
        assert ln.count("(") == ln.count(")"), ln
    assert_unpadded(r.stdout)


@pytest.mark.parametrize("args, needles", [
    (["pretrain", "-r", "glue"], ["is a fine-tuning recipe", "bertcli finetune"]),
    (["tokenize", "-r", "glue"], ["is a fine-tuning recipe"]),
    (["build-data", "-r", "glue.yaml"], ["is a fine-tuning recipe"]),
    (["finetune", "glue", "-r", "bert-tiny", "-c", "ckpt", "--tasks", "sst2", "-d", "x"],
     ["is a pretraining recipe", "-r glue"]),
])
def test_a_recipe_for_the_other_command_is_refused(cli, args, needles):
    assert_user_error(cli(*args), *needles)


def test_recipe_with_both_kinds_of_section_suits_both(tmp_path):
    """A run's resolved recipe (`info --yaml`) sets every section: both commands take it."""
    r = run_cli("info", "-r", "bert-tiny", "--yaml")
    assert r.rc == 0, r.output
    data = yaml.safe_load(r.stdout)                      # valid YAML, nothing but the recipe
    assert data["model"]["family"] == "bert" and data["finetune"]
    (tmp_path / "mine.yaml").write_text(r.stdout)
    again = load_recipe(str(tmp_path / "mine.yaml"))
    assert again.to_dict() == load_recipe("bert-tiny").to_dict()
    full = run_cli("info", "-r", "bert-tiny")           # the tables follow as YAML comments
    assert yaml.safe_load(full.stdout) == data and "# model: bert" in full.stdout


def test_warmup_ratio_follows_a_shortened_run_and_a_long_warmup_is_warned(cli):
    r = load_recipe("bert-tiny", ["train.max_steps=50", "train.warmup_ratio=0.1"])
    assert r.train.warmup_steps == 5
    assert load_recipe("bert-tiny", ["train.max_steps=3000", "train.warmup_ratio=0.25"]).train.warmup_steps == 750
    res = cli("info", "-r", "bert-tiny", "--set", "train.max_steps=50", "--yaml")
    assert res.rc == 0 and "warning: train.warmup_steps 150 >= train.max_steps 50" in res.stderr
    assert "train.warmup_ratio" in res.stderr
    quiet = cli("info", "-r", "bert-tiny", "--set", "train.max_steps=50", "--set", "train.warmup_ratio=0.1", "--yaml")
    assert quiet.rc == 0 and "warning" not in quiet.stderr


UNREACHABLE = {"HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}


def test_hub_names_fail_at_once_when_the_hub_cannot_be_reached(cli, tmp_path):
    """Without offline mode `datasets` would retry for ~30 s; both kinds of hub source check the
    Hub's host first (here a closed local port) and fail with one message."""
    res = run_cli_process("tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[{path: someone/corpus, format: hub}]",
                          cwd=tmp_path, env=UNREACHABLE)     # datasets reads HF_* when it is imported
    assert_user_error(res, "cannot reach 127.0.0.1", "someone/corpus", "corpus.sources[0]")
    ckpt = roberta_dir(tmp_path / "ckpt", ["a few words of text", "and a few more words"] * 20)
    res = run_cli_process("finetune", "glue", "-c", ckpt, "--tasks", "sst2", "--hub", "someone/glue", cwd=tmp_path,
                          env={**UNREACHABLE, **ONE_THREAD})
    assert_user_error(res, "cannot reach 127.0.0.1", "someone/glue", "--hub")


def test_fill_mask_shows_decoded_words_for_byte_level_bpe(tmp_path):
    from bertcli.serve.fill_mask import fill_mask

    ckpt = roberta_dir(tmp_path / "ckpt", ["the cat sat on the mat", "a dog ran in the park"] * 40)
    results = fill_mask(ckpt, "the <mask> sat on the mat", top_k=10_000)    # every piece
    candidates = results[0]["candidates"]
    spaced = [c for c in candidates if c["token"].startswith("Ġ") and c["token"][1:].isalpha() and c["token"][1:].isascii()]
    assert spaced, [c["token"] for c in candidates]
    for c in spaced:                                   # the raw piece is kept, the word is decoded
        assert c["word"] == c["token"][1:] and not c["word"].startswith("Ġ")


def test_busy_cpu_advice(monkeypatch):
    from bertcli.core.machine import busy_cpu_advice

    # a fixed count (the recipe's, OMP_NUM_THREADS or a checkpoint's) that other jobs will stall;
    # `auto` never gets it (tests/test_threads.py)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    busy = busy_cpu_advice(threads=2, cores=2, load=2.3)
    assert busy and "train.threads=1" in busy and "load 2.3 on 2 cores" in busy
    assert busy_cpu_advice(threads=2, cores=2, load=0.2) is None            # idle: the count is right
    assert "finetune.threads=6" in busy_cpu_advice(threads=16, cores=16, load=9.5, key="finetune.threads")
    assert busy_cpu_advice(threads=1, cores=2, load=5.0) is None            # one thread stalls no barrier
