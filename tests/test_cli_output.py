"""Plain (piped) output and the live view: each stage line once; the bar at 80 columns with its
counts and times whole and no `N/?`; predict on csv with a total; a resumed run's time in all
and this segment."""

from __future__ import annotations

import io
import re

import pytest
from conftest import ONE_THREAD, run_cli
from helpers.recipes import TINY
from rich.console import Console

from bertcli.core import console


def _screens(buf: io.StringIO) -> list[str]:
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", buf.getvalue())
    return [s for s in re.split(r"[\r\n]", text) if s.strip()]


@pytest.mark.parametrize("total", [552, 1_234_567])
def test_live_bar_fits_80_columns_with_counts_and_times_whole(total):
    buf = io.StringIO()
    term = Console(file=buf, width=80, force_terminal=True, color_system=None)
    with console.progress("training wordpiece tokenizer (documents read)", total=total, rich_console=term) as bar:
        bar.advance(total)
    last = _screens(buf)[-1]
    assert len(last) <= 80, last
    assert f"{total}/{total}" in last and re.search(r"\d:\d\d:\d\d < \d:\d\d:\d\d$", last), last
    assert "training wordpiece to" in last and "…" in last        # the description is what gives way


def test_live_count_without_total_has_no_question_mark_or_empty_left():
    buf = io.StringIO()
    term = Console(file=buf, width=80, force_terminal=True, color_system=None)
    with console.progress("reading corpus (documents)", total=None, rich_console=term) as bar:
        bar.advance(575)
    last = _screens(buf)[-1]
    assert re.search(r"reading corpus \(documents\) 575 elapsed \d:\d\d:\d\d$", last), last
    assert "/?" not in last and "left" not in last


def test_plain_stage_prints_one_line_unless_it_runs_long(monkeypatch, capsys):
    """In a pipe a stage that ends within PLAIN_EVERY_S prints only its `done` line; a long one
    prints progress lines before it, each with the total."""
    clock = [0.0]
    monkeypatch.setattr(console.time, "monotonic", lambda: clock[0])
    with console.progress("tokenizing train", total=100) as bar:
        for _ in range(100):
            clock[0] += 0.25                     # 25 s in all: under the interval
            bar.advance(1)
    assert capsys.readouterr().err.splitlines() == ["tokenizing train: 100/100 done (25.0s)"]
    with console.progress("tokenizing train", total=100) as bar:
        for _ in range(100):
            clock[0] += 1.0                      # 100 s: three progress lines, then done
            bar.advance(1)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["tokenizing train: 30/100 ... (30.0s)", "tokenizing train: 60/100 ... (60.0s)",
                     "tokenizing train: 90/100 ... (90.0s)", "tokenizing train: 100/100 done (100.0s)"]


def test_piped_pretrain_prints_each_stage_once_and_resume_time_in_all(tmp_path):
    sets = [*TINY, "train.max_steps=2", "train.save_every=2", "train.eval_every=2", f"output_dir={tmp_path / 'run'}"]
    r = run_cli("pretrain", "-r", "bert-tiny", *[x for s in sets for x in ("--set", s)], cwd=tmp_path,
                env={**ONE_THREAD, "COLUMNS": "80"})
    assert r.rc == 0, r.output
    stages = [ln.split(":")[0] for ln in r.stderr.splitlines() if re.search(r": [\d,]+(/[\d,]+)? (done|\.\.\.) \(", ln)]
    assert stages and len(stages) == len(set(stages)), r.stderr       # e.g. tokenizing train: once
    assert re.search(r"^time +[\d.,]+ s$", r.stdout, re.M), r.stdout   # a first run: its own time only
    more = [*sets[:-4], "train.max_steps=4", "train.save_every=2", "train.eval_every=2", f"output_dir={tmp_path / 'run'}"]
    r = run_cli("pretrain", "-r", "bert-tiny", *[x for s in more for x in ("--set", s)], "--resume", "auto",
                cwd=tmp_path, env={**ONE_THREAD, "COLUMNS": "80"})
    assert r.rc == 0, r.output
    m = re.search(r"^time +([\d.]+)s in all: ([\d.]+)s training before the resume \+ ([\d.]+) s this run$", r.stdout, re.M)
    assert m, r.stdout
    total, before, this = map(float, m.groups())
    assert before > 0 and total == pytest.approx(before + this, abs=0.11)


def test_predict_on_csv_reports_a_total(tmp_path, pretrained_tiny):
    rows = "\n".join(f'"row {i}, with a comma [MASK] here",{i}' for i in range(7))
    (tmp_path / "in.csv").write_text("text,id\n" + rows + "\n")
    r = run_cli("predict", "-c", pretrained_tiny, "-i", tmp_path / "in.csv", "-o", tmp_path / "out.jsonl",
                "--task", "fill-mask", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert re.search(r"^predicting \(fill-mask, \w+\): 7/7 done \(", r.stderr, re.M), r.stderr
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 7
