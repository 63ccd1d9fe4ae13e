"""The suite's own helpers: a shared fixture that fails is one short error once, then skips
pointing at it; a held process is waited for without a deadline."""

from __future__ import annotations

import pytest
from conftest import finish, popen_cli, release, shared_once, wait_paused


def test_a_failing_shared_fixture_errs_once_then_skips():
    calls = []

    def make():
        calls.append(1)
        raise RuntimeError("the shared pretrain exited 1:\nlast line of its output")

    with pytest.raises(pytest.fail.Exception) as first:
        shared_once("broken-thing", make)
    assert "broken-thing: the shared pretrain exited 1" in str(first.value) and "Traceback" not in str(first.value)
    with pytest.raises(pytest.skip.Exception, match="broken-thing failed in an earlier test"):
        shared_once("broken-thing", make)
    assert calls == [1]                                   # never run twice
    assert shared_once("fine-thing", lambda: 42) == 42 and shared_once("fine-thing", lambda: 0) == 42


def test_a_process_is_held_at_its_pause_point_until_released(tmp_path):
    proc = popen_cli("tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[{path: builtin, max_documents: 20}]",
                     "--set", "tokenizer.vocab_size=300", "--set", f"cache_dir={tmp_path / 'c'}", cwd=tmp_path,
                     pause="build-tokenizer")
    wait_paused(proc)
    assert proc.poll() is None and not list((tmp_path / "c").glob("tokenizer-*"))   # held before building
    release(proc)
    res = finish(proc)
    assert res.rc == 0 and len(list((tmp_path / "c").glob("tokenizer-*"))) == 1, res.output
