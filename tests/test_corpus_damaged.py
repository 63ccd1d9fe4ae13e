"""Damaged and truncated compressed corpus files (.gz, .bz2, .xz): one message naming the file
and where reading stopped (line, uncompressed and compressed byte offsets), never a traceback
from inside a decompressor or `datasets`."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re

import pytest
from conftest import assert_user_error

from bertcli.config.sections import CorpusConfig, SourceConfig
from bertcli.core.errors import UserError
from bertcli.corpus.build import documents, resolve_sources
from bertcli.corpus.readers import ReadStats

COMPRESSORS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}
TEXT = "".join(f"sentence number {i} of the corpus is right here.\n" + ("\n" if i % 5 == 4 else "")
               for i in range(30000)).encode()
JSONL = "".join(json.dumps({"text": f"document {i} holds a sentence."}) + "\n" for i in range(30000)).encode()


def damage(blob: bytes, how: str) -> bytes:
    if how == "truncated":
        return blob[: len(blob) // 2]
    bad = bytearray(blob)                      # flip 64 bytes in the middle of the stream
    for i in range(len(blob) // 3, len(blob) // 3 + 64):
        bad[i] ^= 0x5A
    return bytes(bad)


def read_all(path):
    cfg = CorpusConfig(sources=[SourceConfig(str(path))])
    return list(documents(cfg, resolve_sources(cfg), ReadStats()))


@pytest.mark.parametrize("ext", list(COMPRESSORS))
@pytest.mark.parametrize("how", ["truncated", "corrupted"])
@pytest.mark.parametrize("fmt", ["txt", "jsonl"])
def test_damaged_compressed_files_are_one_message_with_the_place(tmp_path, ext, how, fmt):
    payload = TEXT if fmt == "txt" else JSONL
    path = tmp_path / f"corpus.{fmt}{ext}"
    blob = COMPRESSORS[ext](payload)
    path.write_bytes(damage(blob, how))
    with pytest.raises(UserError) as info:
        read_all(path)
    e = info.value
    assert e.where.startswith(str(path)) and path.name in e.what, e
    assert ("(truncated)" if how == "truncated" else "damaged") in e.what or "damaged" in e.what, e
    m = re.search(r"uncompressed byte ([\d,]+) \(compressed byte ([\d,]+) of ([\d,]+)\)", e.what)
    assert m, e.what
    offset, read, size = (int(g.replace(",", "")) for g in m.groups())
    assert read <= size == len(path.read_bytes())
    # (corrupted data may decode to garbage of any length before the check fails)
    if how == "truncated" and ":" in e.where[len(str(path)):]:   # the line reading stopped in
        assert offset < len(payload)
        line = int(e.where.rsplit(":", 1)[1])
        assert line == payload[:offset].count(b"\n") + 1
    assert f"-t {path}" in e.fix


def test_an_intact_compressed_file_still_reads_whole(tmp_path):
    for ext, compress in COMPRESSORS.items():
        path = tmp_path / f"ok.txt{ext}"
        text = TEXT[: TEXT.index(b"\n", 20000) + 1]
        path.write_bytes(compress(text))
        docs = read_all(path)
        assert sum(len(d) for d in docs) == text.count(b"here.")


def test_the_cli_reports_a_truncated_file_without_traceback(cli, tmp_path):
    (tmp_path / "c.txt.xz").write_bytes(damage(lzma.compress(TEXT), "truncated"))
    r = cli("tokenize", "-r", "bert-tiny", "--set", "corpus.sources=[c.txt.xz]")
    assert_user_error(r, "cannot read c.txt.xz", "truncated", "xz -t")
