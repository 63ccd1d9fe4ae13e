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


BUILDER = """
import sys, time
sys.path.insert(0, {tests!r})
from pathlib import Path
from conftest import built_once

def build(root):
    with open({log!r}, "a") as f:
        f.write(sys.argv[1] + "\\n")
    time.sleep(1.0)                       # long enough for the other process to be waiting
    if "fail" in {key!r}:
        raise RuntimeError("the build broke")
    (root / "result.txt").write_text("built by " + sys.argv[1])

try:
    root = built_once(Path({shared!r}), "thing", {key!r}, build)
    print((root / "result.txt").read_text())
except RuntimeError as e:
    print("error:", e)
"""


@pytest.mark.parametrize("key", ["fine", "fail"])
def test_a_shared_build_runs_once_across_processes(tmp_path, key):
    """Two xdist workers asking at once: one builds, the other waits and reuses its result (or
    its failure, without building again)."""
    import subprocess
    import sys
    from pathlib import Path

    log = tmp_path / "builds.log"
    code = BUILDER.format(tests=str(Path(__file__).parent), log=str(log), shared=str(tmp_path), key=key)
    procs = [subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in ("a", "b")]
    outs = [p.communicate()[0].strip() for p in procs]
    assert len(log.read_text().splitlines()) == 1, log.read_text()   # built once
    builder = log.read_text().strip()
    if key == "fine":
        assert outs == [f"built by {builder}"] * 2, outs
    else:
        assert outs == ["error: the build broke"] * 2, outs
