"""Reading corpus sources: which files a source names, and the raw documents in them.

Every reader streams: text is read line by line with a bounded `readline`, so one giant line
(a 50 MB file without newlines) is reported instead of filling memory; tabular files are read
in record batches. A reader yields `RawDoc`s (raw text; the data builder's tokenized documents are `pairs.TokenDoc`),
either already one sentence per item (Google BERT's
format) or as text still to be split into sentences; `corpus.py` does the rest.
"""

from __future__ import annotations

import bz2
import csv
import glob
import gzip
import json
import lzma
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator

from bertcli import builtin_corpus
from bertcli.errors import UserError
from bertcli.sections import CorpusConfig, SourceConfig

_DECOMPRESSORS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
_FORMATS = {".txt": "text", ".text": "text", ".raw": "text", ".jsonl": "jsonl", ".ndjson": "jsonl",
            ".json": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}
# A document of Google-format text longer than this (a file without blank lines) is cut into
# pieces rather than held whole in memory.
MAX_DOCUMENT_CHARS = 8 * 1024 * 1024
JSON_ARRAY_MAX_BYTES = 256 * 1024 * 1024  # .json arrays are parsed whole; bigger ones must be .jsonl


@dataclass
class RawDoc:
    sentences: list[str] | None = None  # one sentence per item (sentence layout)
    text: str | None = None  # to be split into sentences (paragraphs separated by blank lines)


@dataclass
class Resolved:
    """One source with its inputs resolved: files (sorted) or a hub / built-in name."""

    index: int
    src: SourceConfig
    kind: str  # "files" | "hub" | "builtin" | "saved"
    files: list[Path] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"corpus.sources[{self.index}]"

    def fingerprint(self) -> dict:
        s = self.src
        fp = {"path": s.path, "format": s.format, "layout": s.layout, "text_field": s.text_field,
              "max_documents": s.max_documents}
        if self.kind == "builtin":
            fp.update(builtin_corpus.fingerprint())
        elif self.kind == "hub":
            fp.update(hub=s.path, name=s.name, split=s.split)
        else:
            fp["files"] = [_stat(p) for p in self.files]
        return fp


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


def _stat(p: Path) -> list:
    st = p.stat()
    return [str(p.resolve()), st.st_size, st.st_mtime_ns]


# ------------------------------------------------------------------------------- resolution
def resolve(src: SourceConfig, index: int) -> Resolved:
    """Find the inputs of a source; a missing file or an empty glob is a UserError."""
    key = f"corpus.sources[{index}]"
    if src.format == "builtin" or (src.format == "auto" and src.path == "builtin"):
        return Resolved(index, src, "builtin")
    if src.format == "hub":
        return Resolved(index, src, "hub")
    path = Path(os.path.expanduser(src.path))
    if glob.has_magic(src.path):
        matches = sorted(Path(m) for m in glob.glob(os.path.expanduser(src.path), recursive=True))
        files = [f for m in matches for f in (_dir_files(m) if m.is_dir() else [m])]
        if not files:
            raise UserError(f"the pattern {src.path!r} matches no files (looked from {Path.cwd()})",
                            where=key, fix="check the pattern; relative paths are read from the current directory")
        return Resolved(index, src, "files", files)
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return Resolved(index, src, "saved", sorted(p for p in path.rglob("*") if p.is_file()))
        files = _dir_files(path)
        if not files:
            raise UserError(f"the directory {src.path} holds no files", where=key)
        return Resolved(index, src, "files", files)
    if path.is_file():
        return Resolved(index, src, "files", [path])
    if src.format == "auto" and _looks_like_hub_name(src.path):
        return Resolved(index, src, "hub")
    raise UserError(f"no such file or directory: {src.path} (looked from {Path.cwd()})", where=key,
                    fix="check the path (relative paths are read from the current directory); "
                        "for a `datasets` hub dataset set format: hub")


def _looks_like_hub_name(name: str) -> bool:
    # `wikitext` or `owner/name`: no extension we read, not an explicit path.
    if name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1:
        return False
    return _suffix(Path(name))[0] not in _FORMATS and "." not in Path(name).name


def _dir_files(d: Path) -> list[Path]:
    """Files under a directory, sorted by relative path, hidden files and folders left out."""
    files = [p for p in d.rglob("*") if p.is_file()
             and not any(part.startswith(".") for part in p.relative_to(d).parts)]
    return sorted(files, key=lambda p: p.relative_to(d).as_posix())


def _suffix(p: Path) -> tuple[str, str]:
    """(format suffix, compression suffix), e.g. ('.jsonl', '.gz') for x.jsonl.gz."""
    suffixes = [s.lower() for s in p.suffixes]
    comp = suffixes[-1] if suffixes and suffixes[-1] in _DECOMPRESSORS else ""
    rest = suffixes[:-1] if comp else suffixes
    return (rest[-1] if rest else ""), comp


def file_format(src: SourceConfig, p: Path) -> str:
    if src.format not in ("auto", "hub", "builtin"):
        return src.format
    return _FORMATS.get(_suffix(p)[0], "text")


# ----------------------------------------------------------------------------- line reading
def open_binary(p: Path) -> IO[bytes]:
    """The file's bytes, decompressed for .gz/.bz2/.xz: a damaged or truncated compressed file
    is one UserError naming it and where reading stopped (see _Decompressed)."""
    opener = _DECOMPRESSORS.get(_suffix(p)[1])
    if opener is None:
        return open(p, "rb")
    raw = open(p, "rb")
    try:
        return _Decompressed(p, raw, opener(raw, "rb"))
    except BaseException:
        raw.close()
        raise


# what the decompressors raise on damaged or truncated input
_DAMAGED = (EOFError, OSError, lzma.LZMAError, zlib.error)


class _Decompressed:
    """A decompressing reader that turns the decompressors' errors into one message: the file,
    the line reading stopped in (for line reads), the uncompressed byte offset reached and the
    compressed byte offset read."""

    def __init__(self, path: Path, raw: IO[bytes], f: IO[bytes]):
        self.path, self.raw, self.f, self.lines, self.offset = path, raw, f, 0, 0

    def _fail(self, e: BaseException) -> UserError:
        kind = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}[_suffix(self.path)[1]]
        cause = "it ends before the compressed stream does (truncated)" if isinstance(e, EOFError) else \
            f"its {kind} data is damaged ({e})"
        at = f"line {self.lines + 1}, " if self.lines else ""
        where = f"{self.path}:{self.lines + 1}" if self.lines else str(self.path)
        return UserError(f"cannot read {self.path.name}: {cause}; reading stopped at {at}uncompressed byte "
                         f"{self.offset:,} (compressed byte {self.raw.tell():,} of {self.path.stat().st_size:,})",
                         where=where,
                         fix=f"check the file with `{kind} -t {self.path}`; download or copy it again, or remove "
                             "it from corpus.sources")

    def readline(self, limit: int = -1) -> bytes:
        try:
            line = self.f.readline(limit)
        except _DAMAGED as e:
            raise self._fail(e) from None
        self.offset += len(line)
        if line.endswith(b"\n"):
            self.lines += 1
        return line

    def read(self, n: int = -1) -> bytes:
        try:
            data = self.f.read(n)
        except _DAMAGED as e:
            raise self._fail(e) from None
        self.offset += len(data)
        return data

    def close(self) -> None:
        try:
            self.f.close()
        finally:
            self.raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_lines(p: Path, cfg: CorpusConfig, stats: ReadStats, what: str = "line") -> Iterator[tuple[int, str]]:
    """(line number, decoded line without its newline); invalid UTF-8 handled per
    corpus.encoding_errors; a line over corpus.max_line_bytes is an error, found after reading
    at most that many bytes of it."""
    limit = cfg.max_line_bytes
    with open_binary(p) as f:
        lineno = 0
        while True:
            raw = f.readline(limit + 1)
            if not raw:
                return
            lineno += 1
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise UserError(
                    f"{what} {lineno} is longer than corpus.max_line_bytes ({limit:,} bytes)",
                    where=f"{p}:{lineno}",
                    fix="put one sentence (layout: sentences) or one document (layout: documents) per "
                        "line; if lines this long are intended, raise corpus.max_line_bytes")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                if cfg.encoding_errors == "error":
                    _raise_bad_utf8(p, f, lineno, e, limit)
                stats.bad(f"{p}:{lineno}", skipped=cfg.encoding_errors == "skip")
                if cfg.encoding_errors == "skip":
                    continue
                text = raw.decode("utf-8", errors="replace")
            if lineno == 1 and text.startswith("\ufeff"):
                text = text[1:]  # byte-order mark
            yield lineno, text.rstrip("\r\n")


def _raise_bad_utf8(p: Path, f: IO[bytes], lineno: int, e: UnicodeDecodeError, limit: int):
    """Count the remaining invalid lines of the file, then stop with where they are."""
    first, count = [lineno], 1
    n = lineno
    while raw := f.readline(limit + 1):
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
        f"UTF-8 (line {lines}; the first bad byte is 0x{e.object[e.start]:02x} at byte {e.start + 1} of "
        f"line {lineno})",
        where=f"{p}:{lineno}",
        fix=f"convert the file to UTF-8, e.g. `iconv -f LATIN1 -t UTF-8 {p} > {p.stem}.utf8{p.suffix}` (with "
            "its real encoding), or set corpus.encoding_errors: replace (bad bytes become U+FFFD) or "
            "skip (drop those lines)")


# ---------------------------------------------------------------------------------- readers
def read_source(r: Resolved, cfg: CorpusConfig, stats: ReadStats) -> Iterator[RawDoc]:
    """The raw documents of one resolved source, in order."""
    if r.kind == "builtin":
        for _name, text in builtin_corpus.iter_documents():
            yield RawDoc(text=text)
    elif r.kind == "hub":
        yield from _read_hub(r)
    elif r.kind == "saved":
        yield from _read_saved(r)
    else:
        for p in r.files:
            fmt = file_format(r.src, p)
            reader = {"text": _read_text, "jsonl": _read_jsonl, "json": _read_json,
                      "csv": _read_csv, "parquet": _read_parquet}[fmt]
            yield from reader(p, r, cfg, stats)


def _read_text(p: Path, r: Resolved, cfg: CorpusConfig, stats: ReadStats) -> Iterator[RawDoc]:
    lines = read_lines(p, cfg, stats)
    if r.src.layout == "documents":
        for _, line in lines:
            if line.strip():
                yield RawDoc(text=line)
        return
    doc: list[str] = []
    size = 0
    for _, line in lines:
        line = line.strip()
        if not line:
            if doc:
                yield RawDoc(sentences=doc)
                doc, size = [], 0
            continue
        doc.append(line)
        size += len(line)
        if size > MAX_DOCUMENT_CHARS:
            stats.documents_cut += 1
            yield RawDoc(sentences=doc)
            doc, size = [], 0
    if doc:
        yield RawDoc(sentences=doc)


def _record_doc(rec, r: Resolved, where: str) -> RawDoc | None:
    """A document from one record: its text field holds a string, or a list of sentences."""
    key = r.src.text_field
    if not isinstance(rec, dict):
        raise UserError(f"expected a JSON object, got {type(rec).__name__}", where=where)
    if key not in rec:
        raise _missing_field(key, rec, where, r)
    return _value_doc(rec[key], key, where)


def _value_doc(value, key: str, where: str) -> RawDoc | None:
    if value is None:
        return None
    if isinstance(value, str):
        return RawDoc(text=value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return RawDoc(sentences=[v.strip() for v in value])
    raise UserError(f"field {key!r} holds {type(value).__name__}, not text", where=where,
                    fix="point corpus.sources[].text_field at a text column (a string or a list of strings)")


def _missing_field(key: str, columns, where: str, r: Resolved) -> UserError:
    cols = ", ".join(map(str, columns)) or "(none)"
    return UserError(f"no field {key!r} (the fields are: {cols})", where=where,
                     fix=f"set {r.key}.text_field to the column holding the text")


def _read_jsonl(p: Path, r: Resolved, cfg: CorpusConfig, stats: ReadStats) -> Iterator[RawDoc]:
    for lineno, line in read_lines(p, cfg, stats, what="record"):
        if not line.strip():
            continue
        where = f"{p}:{lineno}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"not valid JSON ({e.msg} at column {e.colno})", where=where,
                            fix="a .jsonl file holds one JSON object per line")
        doc = _record_doc(rec, r, where)
        if doc is not None:
            yield doc


def _is_json_lines(p: Path, limit: int, key: str) -> bool:
    """Whether a .json file is JSON lines: its first line is a whole record holding the text."""
    with open_binary(p) as f:
        first = f.readline(limit + 1)
    try:
        rec = json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(rec, dict) and key in rec


def _read_json(p: Path, r: Resolved, cfg: CorpusConfig, stats: ReadStats) -> Iterator[RawDoc]:
    """A .json file: JSON lines, an array of objects, or an object with one list of objects."""
    if _is_json_lines(p, cfg.max_line_bytes, r.src.text_field):
        yield from _read_jsonl(p, r, cfg, stats)
        return
    size = p.stat().st_size
    if size > JSON_ARRAY_MAX_BYTES:
        raise UserError(f"{p.name} is a single JSON document of {size / 2**20:,.0f} MB, which would have "
                        "to be read whole", where=str(p),
                        fix=f"convert it to JSON lines: `jq -c '.[]' {p} > {p.stem}.jsonl`")
    with open_binary(p) as f:
        data = f.read()
    try:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            if cfg.encoding_errors == "error":
                raise UserError(f"not valid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start})", where=str(p),
                                fix="convert the file to UTF-8 (iconv), or set corpus.encoding_errors: replace")
            # one JSON document cannot lose a line: `skip` replaces too, and the summary says so
            stats.bad(f"{p}: byte offset {e.start}", skipped=False)
            text = data.decode("utf-8", errors="replace")
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"not valid JSON ({e.msg})", where=f"{p}:{e.lineno}")
    if isinstance(obj, dict):
        lists = [v for v in obj.values() if isinstance(v, list)]
        if r.src.text_field in obj:
            obj = [obj]
        elif len(lists) == 1:
            obj = lists[0]
        else:
            raise _missing_field(r.src.text_field, obj, str(p), r)
    for i, rec in enumerate(obj):
        doc = _record_doc(rec, r, f"{p}: record {i}")
        if doc is not None:
            yield doc


def _read_csv(p: Path, r: Resolved, cfg: CorpusConfig, stats: ReadStats) -> Iterator[RawDoc]:
    delimiter = "\t" if _suffix(p)[0] == ".tsv" else ","
    csv.field_size_limit(cfg.max_line_bytes)
    # csv needs the newlines back to parse quoted fields that span lines
    reader = csv.reader((line + "\n" for _, line in read_lines(p, cfg, stats, what="row")), delimiter=delimiter)
    try:
        header = next(reader, None)
        if header is None:
            return
        key = r.src.text_field
        if key not in header:
            raise _missing_field(key, header, f"{p}:1", r)
        col = header.index(key)
        for row in reader:
            if len(row) > col and row[col].strip():
                yield RawDoc(text=row[col])
    except csv.Error as e:
        raise UserError(f"malformed CSV: {e}", where=f"{p}:{reader.line_num}",
                        fix="check the quoting on that line; fields over corpus.max_line_bytes are refused")


def _read_parquet(p: Path, r: Resolved, cfg: CorpusConfig, stats: ReadStats) -> Iterator[RawDoc]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(p)
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError for a file that is not Parquet
        raise UserError(f"not a readable Parquet file ({e})", where=str(p))
    key = r.src.text_field
    if key not in pf.schema_arrow.names:
        raise _missing_field(key, pf.schema_arrow.names, str(p), r)
    for batch in pf.iter_batches(batch_size=1024, columns=[key]):
        for value in batch.column(0).to_pylist():
            doc = _value_doc(value, key, str(p))
            if doc is not None:
                yield doc


def _read_dataset(ds, r: Resolved, where: str) -> Iterator[RawDoc]:
    key = r.src.text_field
    if key not in ds.column_names:
        raise _missing_field(key, ds.column_names, where, r)
    for batch in ds.select_columns([key]).iter(batch_size=1024):
        for value in batch[key]:
            doc = _value_doc(value, key, where)
            if doc is not None:
                yield doc


def _read_saved(r: Resolved) -> Iterator[RawDoc]:
    import datasets

    ds = datasets.load_from_disk(r.src.path)
    if isinstance(ds, datasets.DatasetDict):
        if r.src.split not in ds:
            raise UserError(f"no split {r.src.split!r} (splits: {', '.join(ds)})", where=r.key,
                            fix=f"set {r.key}.split")
        ds = ds[r.src.split]
    yield from _read_dataset(ds, r, r.src.path)


def _read_hub(r: Resolved) -> Iterator[RawDoc]:
    from bertcli.hub import load_hub

    s = r.src
    ds = load_hub(s.path, s.name, split=s.split, where=r.key, local_hint="point corpus.sources at local files")
    yield from _read_dataset(ds, r, f"{s.path} ({s.split})")
