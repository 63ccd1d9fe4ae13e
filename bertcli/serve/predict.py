"""`bertcli predict`: every record of an input file through a checkpoint or an export bundle
(bertcli.export.predictor's `open_model`), as jsonl. Records are read, encoded and run in chunks,
so memory stays bounded on any input size.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bertcli.core import console, jsonout
from bertcli.core.fs import temporary_file
from bertcli.core.locks import run_lock
from bertcli.core.machine import use_threads
from bertcli.core.outputs import check_output_file, removing_on_signal
from bertcli.export.inputs import check_input, count_records, read_records
from bertcli.export.predictor import open_model


def check_output(out: Path | None, input_file: Path | None = None, model: Path | None = None,
                 force: bool = False) -> None:
    """Before any work: the output file is not the input, not a file of the model (bundle or
    checkpoint), not a directory, in a writable directory; an existing file only with --force."""
    if out is not None:
        check_output_file(out, force, [input_file], [model], "--out", "the predictions")


def run_predict(model: Path, input_file: Path, out: Path | None = None, task: str | None = None,
                batch_size: int = 32, top_k: int = 5, pooling: str = "mean", max_length: int | None = None,
                threads: int | None = None, allow_impossible: bool = False,
                encoding: str | None = None, force: bool = False) -> dict:
    """Predict every record of `input_file`; writes jsonl to `out` (stdout when None; a file is
    written under a temporary name and renamed when complete, under the output's lock; Ctrl-C
    or SIGTERM remove the temporary). Returns a summary."""
    check_input(input_file, encoding)
    check_output(out, input_file, model, force)
    if out is None:
        return _predict(model, input_file, None, task, batch_size, top_k, pooling, max_length, threads,
                        allow_impossible, encoding)
    with run_lock(Path(out)), removing_on_signal(temporary_file(Path(out))):
        check_output(out, input_file, model, force)      # again, holding the lock
        return _predict(model, input_file, Path(out), task, batch_size, top_k, pooling, max_length, threads,
                        allow_impossible, encoding)


def _predict(model, input_file, out, task, batch_size, top_k, pooling, max_length, threads, allow_impossible,
             encoding) -> dict:
    threads = use_threads(threads, "--threads")     # torch's or ONNX Runtime's; None: the free cores
    p = open_model(model, task=task, threads=threads, batch_size=batch_size, max_length=max_length,
                   top_k=top_k, pooling=pooling, allow_impossible=allow_impossible)
    total = count_records(input_file, encoding)
    n = 0
    tmp: Path | None = None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = temporary_file(out)
    sink = open(tmp, "w", encoding="utf-8") if tmp is not None else sys.stdout
    try:
        with console.progress(f"predicting ({p.task}, {p.backend.name})", total=total) as bar:
            for n, pred in enumerate(p.predict(read_records(input_file, encoding), bar=bar), 1):
                sink.write(jsonout.line({"index": n - 1, **pred}))
        if tmp is not None and out is not None:
            sink.close()
            os.replace(tmp, out)
    finally:
        if tmp is not None:
            sink.close()
            tmp.unlink(missing_ok=True)
    return {"task": p.task, "backend": p.backend.name, "records": n, "out": str(out) if out else "stdout"}
