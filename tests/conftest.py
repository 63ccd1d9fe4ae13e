"""Shared test helpers: run the real CLI in a subprocess, write small corpora, tiny recipes."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Tests never touch the network: hub look-ups fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# Subprocesses of tiny models: they train faster on one thread, and on a loaded machine a second
# thread only stalls at OpenMP barriers.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


@dataclass
class CliResult:
    rc: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600, env: dict | None = None) -> CliResult:
    """Run `python -m bertcli ARGS` as a user would, capturing output."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "bertcli", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli(tmp_path):
    """`cli(*args)` runs the real CLI with the test's tmp_path as working directory."""

    def _run(*args, **kw):
        kw.setdefault("cwd", tmp_path)
        return run_cli(*args, **kw)

    return _run


def write_documents(path: Path, documents: list[list[str]]) -> Path:
    """Write documents in Google BERT format: one sentence per line, blank line between documents."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return path


def assert_user_error(result: CliResult, *needles: str) -> None:
    """A user mistake: exit code 2, one message naming the problem, no traceback."""
    assert result.rc == 2, f"expected exit code 2, got {result.rc}\n{result.output}"
    assert "Traceback" not in result.output, result.output
    assert "error:" in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"


# The quickstart's job, shortened to fit the suite: the real `bertcli pretrain --recipe bert-tiny`
# on the built-in corpus, two thirds of the steps and half the masked copies (3.5 minutes on two
# cores). 500 steps would save 1.5 minutes but leave features too weak for the probe's margin.
QUICK_PRETRAIN = ("--set", "train.max_steps=1000", "--set", "train.warmup_steps=100", "--set", "data.dupe_factor=5",
                  "--set", "train.eval_every=500", "--set", "train.save_every=500")


@pytest.fixture(scope="session")
def pretrained_tiny(tmp_path_factory) -> Path:
    """The `final/` checkpoint of a shortened quickstart run, shared by every test that needs a
    pretrained model; its run directory (metrics.jsonl) is the parent. BERTCLI_TEST_PRETRAINED=DIR
    reuses an existing checkpoint instead (e.g. the full quickstart's runs/bert-tiny/final)."""
    if os.environ.get("BERTCLI_TEST_PRETRAINED"):
        return Path(os.environ["BERTCLI_TEST_PRETRAINED"])
    root = tmp_path_factory.mktemp("pretrain")
    r = run_cli("pretrain", "--recipe", "bert-tiny", "--set", f"output_dir={root / 'run'}", *QUICK_PRETRAIN, cwd=root)
    assert r.rc == 0, r.output
    return root / "run" / "final"
