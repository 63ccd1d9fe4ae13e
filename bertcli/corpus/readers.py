"""Reading corpus sources: which files a source names, and the raw documents in them.

Every reader streams, through the shared readers of bertcli.io (text.py: bounded lines and
encodings, so one giant line, a 50 MB file without newlines, is reported instead of filling
memory; tables.py: csv / tsv (the GLUE rule: tabs only, no quoting) / jsonl / json / parquet /
save_to_disk / hub, read in record batches). A reader yields `RawDoc`s (raw text; the data
builder's tokenized documents are `pairs.TokenDoc`), either already one sentence per item (Google
BERT's format) or as text still to be split into sentences; `corpus.py` does the rest.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bertcli.config.sections import CorpusConfig, SourceConfig
from bertcli.core.errors import UserError
from bertcli.corpus import builtin as builtin_corpus
from bertcli.io import tables
from bertcli.io import text as text_io
from bertcli.io.text import LineOptions, ReadStats  # noqa: F401  (ReadStats: re-exported for corpus.py and tests)

_FORMATS = tables.FORMATS
# A document of Google-format text longer than this (a file without blank lines) is cut into
# pieces rather than held whole in memory.
MAX_DOCUMENT_CHARS = 8 * 1024 * 1024


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
        fp: dict[str, object] = {"path": s.path, "format": s.format, "layout": s.layout, "text_field": s.text_field,
              "max_documents": s.max_documents}
        if self.kind == "builtin":
            fp.update(builtin_corpus.fingerprint())
        elif self.kind == "hub":
            fp.update(hub=s.path, name=s.name, split=s.split)
        else:
            fp["files"] = [_stat(p) for p in self.files]
        return fp


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


_suffix = text_io.suffix


def file_format(src: SourceConfig, p: Path) -> str:
    if src.format not in ("auto", "hub", "builtin"):
        return src.format
    return _FORMATS.get(_suffix(p)[0], "text")


# ----------------------------------------------------------------------------- line reading
def line_options(cfg: CorpusConfig) -> LineOptions:
    """The shared line reader's options for a corpus: its bound and its encoding_errors mode."""
    return LineOptions(max_line_bytes=cfg.max_line_bytes, errors=cfg.encoding_errors, fix=_ENCODING_FIX,
                       encoding_flag=None,
                       limit_fix="put one sentence (layout: sentences) or one document (layout: documents) per "
                                 "line; if lines this long are intended, raise corpus.max_line_bytes")


_ENCODING_FIX = ("or set corpus.encoding_errors: replace (bad bytes become U+FFFD) or skip (drop those lines)")


def read_lines(p: Path, cfg: CorpusConfig, stats: ReadStats, what: str = "line") -> Iterator[tuple[int, str]]:
    """(line number, decoded line without its newline), by bertcli.io.text's rules."""
    return text_io.read_lines(p, line_options(cfg), stats, what)


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
            if fmt == "text":
                yield from _read_text(p, r, cfg, stats)
            else:
                yield from _read_file(p, fmt, r, cfg, stats)


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


def _value_doc(value, key: str, where: str) -> RawDoc | None:
    """A document from one field: a string, or a list of sentences (a null is no document)."""
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


def _table_docs(table: tables.Table, r: Resolved) -> Iterator[RawDoc]:
    """The documents of a Table's text field (csv/tsv rows with an empty text are no document)."""
    key = r.src.text_field
    if table.header is not None:          # a header: say at once that the column is absent
        names = table.names()
        if key not in names:
            raise _missing_field(key, names, table.header, r)
    for where, rec in table.records():
        if key not in rec:
            raise _missing_field(key, rec, where, r)
        value = rec[key]
        if isinstance(value, str) and not value.strip():
            continue
        doc = _value_doc(value, key, where)
        if doc is not None:
            yield doc


def _read_file(p: Path, fmt: str, r: Resolved, cfg: CorpusConfig, stats: ReadStats) -> Iterator[RawDoc]:
    if fmt == "csv" and _suffix(p)[0] == ".tsv":
        fmt = "tsv"                       # format: csv on a .tsv file: the one TSV rule still holds
    table = tables.open_table(p, line_options(cfg), stats, fmt=fmt, key=r.src.text_field)
    yield from _table_docs(table, r)


def _read_saved(r: Resolved) -> Iterator[RawDoc]:
    yield from _table_docs(tables.saved_table(Path(r.src.path), (r.src.split,)), r)


def _read_hub(r: Resolved) -> Iterator[RawDoc]:
    s = r.src
    table = tables.hub_table(s.path, s.name, s.split, where=r.key, local_hint="point corpus.sources at local files")
    yield from _table_docs(table, r)
