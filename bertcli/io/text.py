"""Bytes to lines: the one line reader under every table and corpus reader.

- Compressed files (.gz / .bz2 / .xz) are decompressed on the fly; a damaged or truncated one is
  one message naming where reading stopped.
- Encodings: UTF-8 (a UTF-8 byte-order mark is dropped); a UTF-16 byte-order mark is detected
  and the file read as UTF-16; any other encoding only when the user names it (`--encoding`).
  Bytes that do not decode are one message naming the file, the byte offset and the fix
  (`iconv`, or `--encoding`), unless the caller asks to replace or skip such lines (the corpus's
  `corpus.encoding_errors`). A NUL byte in UTF-8 text (a UTF-16 file without its byte-order
  mark) is one message with its byte offset and the encoding to name.
- Every line is read with a bounded `readline`: a line over `max_line_bytes` (the recipe's
  `corpus.max_line_bytes`, default 16 MiB) is an error found after reading at most that many
  bytes of it, so a 50 MB line never reaches a tokenizer or fills memory.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import lzma
import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast, overload

from bertcli.core.errors import UserError

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024   # = sections.CorpusConfig.max_line_bytes' default
DECOMPRESSORS: dict[str, Callable[..., io.BufferedIOBase]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
UTF8_BOM = codecs.BOM_UTF8
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
ENCODING_FIX = "or pass --encoding with the file's encoding (e.g. --encoding latin1)"


@dataclass
class ReadStats:
    """Lines that were not valid UTF-8 (replaced or skipped), long documents cut into pieces."""

    replaced_lines: int = 0
    skipped_lines: int = 0
    first_bad: list[str] = field(default_factory=list)  # "file:line" of the first few
    documents_cut: int = 0

    def bad(self, where: str, skipped: bool) -> None:
        if skipped:
            self.skipped_lines += 1
        else:
            self.replaced_lines += 1
        if len(self.first_bad) < 10:
            self.first_bad.append(where)


@dataclass(frozen=True)
class LineOptions:
    """How lines are read: their bound, the encoding (None: UTF-8 or what a BOM says), what to
    do with lines that do not decode, and the alternative the error message offers."""

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    encoding: str | None = None
    errors: str = "error"              # error | replace | skip
    fix: str = ENCODING_FIX
    limit_fix: str = ("if lines this long are intended, raise the bound (--set corpus.max_line_bytes=N on the "
                      "commands that take a recipe)")
    encoding_flag: str | None = "--encoding"   # the flag that names an encoding; None: the command has none


# The commands without --encoding (evaluate-embed, finetune glue): their fix lines offer conversion only.
NO_ENCODING_FLAG = LineOptions(fix="as this command reads UTF-8 (or UTF-16 with a byte-order mark) only",
                               encoding_flag=None)


def suffix(p: Path) -> tuple[str, str]:
    """(format suffix, compression suffix), e.g. ('.jsonl', '.gz') for x.jsonl.gz."""
    suffixes = [s.lower() for s in Path(p).suffixes]
    comp = suffixes[-1] if suffixes and suffixes[-1] in DECOMPRESSORS else ""
    rest = suffixes[:-1] if comp else suffixes
    return (rest[-1] if rest else ""), comp


@overload
def check_encoding(name: str, where: str = ...) -> str: ...
@overload
def check_encoding(name: None, where: str = ...) -> None: ...
def check_encoding(name: str | None, where: str = "--encoding") -> str | None:
    """The codec's canonical name (None stays None: UTF-8 or a BOM); an unknown name is a UserError."""
    if name is None:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise UserError(f"unknown text encoding {name!r}", where=where,
                        fix="give a Python codec name: utf-8, latin1, cp1252, utf-16, gb18030, ...") from None


# ----------------------------------------------------------------------------- decompression
def open_binary(p: Path) -> IO[bytes]:
    """The file's bytes, decompressed for .gz/.bz2/.xz: a damaged or truncated compressed file
    is one UserError naming it and where reading stopped (see _Decompressed)."""
    opener = DECOMPRESSORS.get(suffix(p)[1])
    if opener is None:
        return open(p, "rb")
    raw = open(p, "rb")
    try:
        # a RawIOBase reads as IO[bytes] does; typeshed's IO is a class, not a protocol
        return cast(IO[bytes], _Decompressed(Path(p), raw, opener(raw, "rb")))
    except BaseException:
        raw.close()
        raise


# what the decompressors raise on damaged or truncated input
_DAMAGED = (EOFError, OSError, lzma.LZMAError, zlib.error)


class _Decompressed(io.RawIOBase):
    """A decompressing reader that turns the decompressors' errors into one message: the file,
    the line reading stopped in (for line reads), the uncompressed byte offset reached and the
    compressed byte offset read."""

    def __init__(self, path: Path, raw: IO[bytes], f: io.BufferedIOBase):
        super().__init__()
        self.path, self.raw, self.f, self.lines, self.offset = path, raw, f, 0, 0

    def _fail(self, e: BaseException) -> UserError:
        kind = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}[suffix(self.path)[1]]
        cause = "it ends before the compressed stream does (truncated)" if isinstance(e, EOFError) else \
            f"its {kind} data is damaged ({e})"
        at = f"line {self.lines + 1}, " if self.lines else ""
        where = f"{self.path}:{self.lines + 1}" if self.lines else str(self.path)
        return UserError(f"cannot read {self.path.name}: {cause}; reading stopped at {at}uncompressed byte "
                         f"{self.offset:,} (compressed byte {self.raw.tell():,} of {self.path.stat().st_size:,})",
                         where=where,
                         fix=f"check the file with `{kind} -t {self.path}`; download or copy it again, or remove "
                             "it from the inputs")

    def readable(self) -> bool:
        return True

    def _take(self, read: Callable[[int | None], bytes], n: int | None) -> bytes:
        try:
            data = read(n)
        except _DAMAGED as e:
            raise self._fail(e) from None
        self.offset += len(data)
        return data

    def readline(self, limit: int | None = -1) -> bytes:
        line = self._take(self.f.readline, limit)
        if line.endswith(b"\n"):
            self.lines += 1
        return line

    def read(self, n: int = -1) -> bytes:
        return self._take(self.f.read, n)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self.f.close()
        finally:
            self.raw.close()
            super().close()


# ------------------------------------------------------------------------------------ lines
def _sniff(p: Path, encoding: str | None) -> str:
    """The codec to read `p` with: the one asked for, UTF-16 when a UTF-16 BOM starts the file,
    else UTF-8 (a UTF-8 BOM is dropped by the reader)."""
    if encoding is not None:
        return check_encoding(encoding)
    with open_binary(p) as f:
        head = f.read(3)
    if head.startswith(UTF16_BOMS):
        return "utf-16"
    return "utf-8"


def read_lines(p: Path, opts: LineOptions = LineOptions(), stats: ReadStats | None = None,
               what: str = "line") -> Generator[tuple[int, str], None, None]:
    """(line number, decoded line without its newline) for every line of `p`."""
    p = Path(p)
    codec = _sniff(p, opts.encoding)
    if codec == "utf-8":
        yield from _utf8_lines(p, opts, stats if stats is not None else ReadStats(), what)
    else:
        yield from _codec_lines(p, codec, opts, what)


def _too_long(p: Path, lineno: int, limit: int, what: str, opts: LineOptions) -> UserError:
    return UserError(f"{what} {lineno} is longer than corpus.max_line_bytes ({limit:,} bytes)",
                     where=f"{p}:{lineno}",
                     fix="put one record (or sentence) per line; " + opts.limit_fix)


def _utf8_lines(p: Path, opts: LineOptions, stats: ReadStats, what: str) -> Iterator[tuple[int, str]]:
    limit = opts.max_line_bytes
    with open_binary(p) as f:
        lineno, offset = 0, 0
        while True:
            raw = f.readline(limit + 1)
            if not raw:
                return
            lineno += 1
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise _too_long(p, lineno, limit, what, opts)
            start, offset = offset, offset + len(raw)
            if lineno == 1 and raw.startswith(UTF8_BOM):
                raw = raw[len(UTF8_BOM):]
                start += len(UTF8_BOM)
            if b"\0" in raw:
                raise nul_byte(p, start + raw.index(b"\0"), lineno, opts)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                if opts.errors == "error":
                    _raise_bad_utf8(p, f, lineno, start, e, opts)
                stats.bad(f"{p}:{lineno}", skipped=opts.errors == "skip")
                if opts.errors == "skip":
                    continue
                text = raw.decode("utf-8", errors="replace")
            yield lineno, text.rstrip("\r\n")


def _raise_bad_utf8(p: Path, f: IO[bytes], lineno: int, line_start: int, e: UnicodeDecodeError,
                    opts: LineOptions):
    """Count the remaining invalid lines of the file, then stop with where they are."""
    first, count = [lineno], 1
    n = lineno
    while raw := f.readline(opts.max_line_bytes + 1):
        n += 1
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            count += 1
            if len(first) < 5:
                first.append(n)
    lines = ", ".join(map(str, first)) + (", ..." if count > len(first) else "")
    raise UserError(
        f"{count:,} line{'s' if count > 1 else ''} of {p.name} {'are' if count > 1 else 'is'} not valid "
        f"UTF-8 (line {lines}; the first bad byte is 0x{e.object[e.start]:02x} at byte offset "
        f"{line_start + e.start:,} of the file, byte {e.start + 1} of line {lineno})",
        where=f"{p}:{lineno}", fix=utf8_fix(p, opts.fix))


def nul_byte(p: Path, offset: int, lineno: int, opts: LineOptions) -> UserError:
    """A NUL byte in what is read as UTF-8 text: no text file holds one, so the file is almost
    surely UTF-16 (or UTF-32) without its byte-order mark, whose every ASCII character carries a
    NUL. Read on, each NUL would become part of a text (a "text" of one NUL after the last line),
    so it is refused, with the byte offset and the encoding to name. An ASCII character before
    the first NUL (an odd offset) means little-endian."""
    codec, iconv = ("utf-16-le", "UTF-16LE") if offset % 2 else ("utf-16-be", "UTF-16BE")
    convert = f"`iconv -f {iconv} -t UTF-8 {p} > {p.stem}.utf8{p.suffix}`"
    fix = (f"pass {opts.encoding_flag} {codec} (or the file's real encoding), or convert it to UTF-8: {convert}"
           if opts.encoding_flag else f"convert it to UTF-8: {convert} (or save it as UTF-16 with a byte-order mark)")
    return UserError(f"{p.name} holds a NUL byte at byte offset {offset:,} (line {lineno}): it is not UTF-8 text, "
                     f"most likely {codec.upper()} without a byte-order mark", where=f"{p}:{lineno}", fix=fix)


def utf8_fix(p: Path, alternative: str = ENCODING_FIX) -> str:
    p = Path(p)
    return (f"convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8 {p} > {p.stem}.utf8{p.suffix}` (with "
            f"its real encoding), {alternative}")


def _codec_lines(p: Path, codec: str, opts: LineOptions, what: str) -> Iterator[tuple[int, str]]:
    """Lines of a file in another codec (UTF-16 by its BOM, or --encoding). The bound is counted
    in characters here (a character is at least one byte, so no line holds more bytes of text
    than the limit allows in UTF-8)."""
    limit = opts.max_line_bytes
    with open_binary(p) as raw:
        f = io.TextIOWrapper(io.BufferedReader(raw) if isinstance(raw, io.RawIOBase) else raw,
                             encoding=codec, errors="strict", newline="")
        lineno = 0
        while True:
            try:
                line = f.readline(limit + 1)
            except UnicodeDecodeError as e:
                raise UserError(f"{p.name} is not valid {codec} after line {lineno} ({e.reason}, byte "
                                f"0x{e.object[e.start]:02x})", where=f"{p}:{lineno + 1}",
                                fix=f"check the file's encoding (read as {codec}); convert it to UTF-8 with "
                                    f"`iconv -f {codec} -t utf-8 {p} > {p.stem}.utf8{p.suffix}`, or pass the "
                                    "right --encoding") from None
            if not line:
                return
            lineno += 1
            if len(line) > limit and not line.endswith("\n"):
                raise _too_long(p, lineno, limit, what, opts)
            if lineno == 1:
                line = line.lstrip("\ufeff")
            yield lineno, line.rstrip("\r\n")


def read_all(p: Path, opts: LineOptions = LineOptions(), max_bytes: int | None = None,
             stats: ReadStats | None = None) -> str:
    """A whole (small) file as text, by the same encoding rules (a .json document, SQuAD)."""
    p = Path(p)
    codec = _sniff(p, opts.encoding)
    with open_binary(p) as f:
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise UserError(f"{p.name} is a single document of more than {max_bytes / 2**20:,.0f} MB, which would "
                        "have to be read whole", where=str(p),
                        fix="split it, or give it as JSON lines (one record per line)")
    if codec == "utf-8" and data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM):]
    if codec == "utf-8" and b"\0" in data:
        at = data.index(b"\0")
        raise nul_byte(p, at, data.count(b"\n", 0, at) + 1, opts)
    try:
        return data.decode(codec).lstrip("\ufeff")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        if codec == "utf-8" and opts.errors != "error":
            # one document cannot lose a line: `skip` replaces too, and the summary says so
            if stats is not None:
                stats.bad(f"{p}: byte offset {e.start}", skipped=False)
            return data.decode("utf-8", errors="replace")
        raise UserError(f"{p.name} is not valid {codec}: byte 0x{data[e.start]:02x} at byte offset {e.start:,} "
                        f"(line {line})", where=f"{p}:{line}",
                        fix=utf8_fix(p, opts.fix) if codec == "utf-8" else
                        f"check the file's encoding (read as {codec}), or pass the right --encoding") from None
