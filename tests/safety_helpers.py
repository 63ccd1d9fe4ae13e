"""Shared by the output-safety tests: byte-for-byte snapshots, tiny data for every writing
command, and the fine-tuning settings that keep a real run to seconds."""

from __future__ import annotations

import json
import os
import random
import socket
from pathlib import Path

# One epoch of 8-row batches over 16-token sequences: seconds per command on a loaded machine.
FT = ("--set", "finetune.epochs=1", "--set", "finetune.max_seq_length=16", "--set", "finetune.batch_size=8",
      "--set", "finetune.eval_batch_size=16", "--set", "finetune.device=cpu")
NER_FT = ("--set", "finetune.ner.max_seq_length=16", "--set", "finetune.ner.batch_size=8")
SQUAD_FT = ("--set", "finetune.squad.epochs=1", "--set", "finetune.squad.max_seq_length=64",
            "--set", "finetune.squad.doc_stride=32", "--set", "finetune.squad.max_query_length=16",
            "--set", "finetune.squad.batch_size=8", "--set", "finetune.eval_batch_size=16",
            "--set", "finetune.device=cpu")
STAGE = ("--recipe", "bert-tiny", "--set", "corpus.sources=[{path: builtin, max_documents: 20}]",
         "--set", "tokenizer.vocab_size=200", "--set", "data.max_seq_length=32", "--set", "data.dupe_factor=1",
         "--set", "data.num_proc=1")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (hidden ones too) with its bytes."""
    root = Path(root)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def assert_kept(before: dict[str, bytes], root: Path) -> None:
    """Every file of `before` is still under `root`, byte for byte."""
    for rel, data in before.items():
        p = Path(root) / rel
        assert p.is_file(), f"{rel} was removed"
        assert p.read_bytes() == data, f"{rel} was changed"


def write_classify(root: Path, n_train: int = 24, n_dev: int = 8, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    fill = "the a this that module value list".split()
    for name, n in (("train", n_train), ("dev", n_dev)):
        rows = []
        for i in range(n):
            label = i % 2
            words = rng.choices(fill, k=3) + [rng.choice(["good", "great"] if label else ["bad", "awful"])]
            rows.append(f"{' '.join(words)},{'pos' if label else 'neg'}")
        (root / f"{name}.csv").write_text("text,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return root / "train.csv", root / "dev.csv"


def write_ner(root: Path, seed: int = 0) -> Path:
    from finetune_fixtures import tagged_sentence, write_conll

    rng = random.Random(seed)
    for name, n in (("train.txt", 24), ("valid.txt", 8)):
        write_conll(root / name, [tagged_sentence(rng) for _ in range(n)])
    return root


def write_sst2(root: Path, seed: int = 0) -> Path:
    rng = random.Random(seed)
    sst = root / "SST-2"
    sst.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", 24), ("dev", 8)):
        rows = [(" ".join(rng.choices("the a this that".split(), k=3) + [rng.choice(["good", "bad"])]), i % 2)
                for i in range(n)]
        (sst / f"{name}.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))
    return root


def write_texts(path: Path, n: int = 6) -> Path:
    words = "the cat sat on a mat and the dog ran".split()
    path.write_text("".join(" ".join(words[i % 5:i % 5 + 5]) + "\n" for i in range(n)), encoding="utf-8")
    return path


def fake_marker(directory: Path, files: list[str], command: str = "finetune classify") -> None:
    (directory / ".bertcli-output.json").write_text(json.dumps(
        {"command": command, "time": "2026-01-01T00:00:00+0000", "version": "0", "files": files}))


def temp_marker(directory: Path, pid: int, host: str | None = None) -> Path:
    directory.mkdir(parents=True)
    (directory / ".bertcli-temporary.json").write_text(json.dumps({"pid": pid, "host": host or socket.gethostname()}))
    return directory


def dead_pid() -> int:
    """A PID no process has now (a child that has exited and been reaped)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def foreign_neighbours(parent: Path) -> None:
    """What a user keeps beside an output: a file, hidden folders whose names look like
    temporaries (two days old, so the old age rule would have taken them)."""
    parent.mkdir(parents=True, exist_ok=True)
    (parent / "notes.txt").write_text("my notes\n")
    for name in (".thesis.tmp-draft", ".vim.old-backup", ".out.tmp-123-456"):
        (parent / name).mkdir()
        (parent / name / "chapter1.tex").write_text("\\section{mine}\n")
        old = 1_000_000_000
        os.utime(parent / name, (old, old))
