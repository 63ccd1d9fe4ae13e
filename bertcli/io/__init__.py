"""Reading the user's files, the one way every command reads them (base layer: imports only
`bertcli.core.errors` and `bertcli.core.hub`).

    text.py     bytes -> lines: decompression, encodings (UTF-8, UTF-8/UTF-16 BOMs, --encoding),
                bounded lines (corpus.max_line_bytes), one message for bytes that do not decode
    tables.py   lines / files -> records: csv, tsv (the GLUE rule), jsonl, json, parquet,
                save_to_disk directories and hub names, each record with where it came from
    records.py  records -> checked values: a missing field, a null or a wrong JSON type is one
                message naming file, line (or row) and field
"""
