"""Reading a W&B offline run without the network: its .wandb file's records."""

from __future__ import annotations

from pathlib import Path


def wandb_records(path: Path):
    """The protobuf records of a .wandb file: LevelDB's log format (32 KiB blocks; each chunk a
    7-byte header: crc32 u32, length u16, type u8 = full 1 / first 2 / middle 3 / last 4) after
    a 7-byte file header (":W&B", magic, version)."""
    import struct

    raw = path.read_bytes()
    assert raw[:4] == b":W&B", raw[:7]
    pos, pending = 7, b""
    while pos + 7 <= len(raw):
        left = 32768 - pos % 32768
        if left < 7:                                # block trailer: padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        chunk = raw[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            yield pending
            pending = b""
