"""A fine-tuning run's records: `metrics.jsonl` and its trackers (`finetune.report_to`), live.

    with RunLog(final) as log:          around one run (engine.run_task)
        log.start(names, config)        trackers start before the first step (rank 0 only)
        fit(..., log=log)               each record: kept for metrics.jsonl, sent to the trackers
        log.close(tmp, summary)         metrics.jsonl and the tracker files into the model folder

The model folder is built under a temporary name after training (fs.building), so the trackers
write during training into a marked temporary of their own next to it (`.<final>.bertcli-tmp-*`),
whose files move into the model folder when the run ends: `wandb/`, `mlruns/`, `tensorboard/`
and `trackers.json` (train/trackers.py). A run that fails before that finishes its trackers and
removes the temporary, as it removes its model folder's.

Sweeps (finetune/sweep.py): `in_sweep(group, folder)` around each run names the tracker run's
group (W&B `group`, the MLflow tag `bertcli.group`; TensorBoard: each run's folder is a subdir of
the sweep's --out). A run of a `--resume`d sweep that was stopped by a signal (its results.json
has `interrupted`) is trained again from its first step: it continues the same tracker runs (the
ids in its trackers.json), and the steps its first attempt logged are not logged again (they are
the same figures: a sweep's runs are deterministic).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from bertcli.core import console
from bertcli.core.outputs import TEMP_MARKER, listed_files, temporary_dir
from bertcli.train.metrics import to_json_line
from bertcli.train.trackers import STATE, TRACKER_FILES, Trackers, report_names

# (group, run folder) of the sweep run in progress; None outside sweeps
_SWEEP: ContextVar[tuple[str, Path] | None] = ContextVar("bertcli_sweep_run", default=None)


@contextlib.contextmanager
def in_sweep(group: str, folder: Path) -> Iterator[None]:
    """Around one run of a sweep: its tracker run joins `group`, and continues the tracker runs
    of an earlier, interrupted attempt in `folder`."""
    token = _SWEEP.set((group, Path(folder).absolute()))
    try:
        yield
    finally:
        _SWEEP.reset(token)


def sweep_group() -> str | None:
    """The group of the sweep run in progress (None: a single run)."""
    current = _SWEEP.get()
    return None if current is None else current[0]


def _interrupted_attempt(final: Path) -> bool:
    """`final` holds an earlier attempt of this very run of a resumed sweep, stopped by a signal,
    whose tracker state bertcli wrote."""
    current = _SWEEP.get()
    if current is None or current[1] != Path(final).absolute():
        return False
    try:
        results = json.loads((final / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(results, dict) and "interrupted" in results and STATE in (listed_files(final) or set())


class RunLog:
    """The records of one fine-tuning run (`fit`'s `log` callback) and its live trackers."""

    def __init__(self, final: Path):
        self.final = Path(final)
        self.records: list[dict] = []
        self.trackers: Trackers | None = None
        self.dir: Path | None = None        # the trackers' temporary, while the run trains

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.trackers is not None:       # not closed: the run failed; its tracker runs end here
            self.trackers.finish()
            self.trackers = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def start(self, names: Sequence[str] | str, config: dict) -> None:
        """Start the trackers named (none: only metrics.jsonl is kept)."""
        names = report_names(names)
        if not names:
            return
        self.dir = temporary_dir(self.final)
        again = _interrupted_attempt(self.final)
        if again:                            # the earlier attempt's runs and stores, continued
            listed = listed_files(self.final) or set()
            for name in TRACKER_FILES:
                src = self.final / name
                if any(f == name or f.startswith(name + "/") for f in listed) and not src.is_symlink():
                    if src.is_dir():
                        shutil.copytree(src, self.dir / name, symlinks=True)
                    else:
                        shutil.copy2(src, self.dir / name)
        # resume_step 0: the state is read, and steps are skipped up to the last one logged
        self.trackers = Trackers(names, self.dir, resume_step=0 if again else None)
        self.trackers.start(config)
        console.log(f"trackers ({', '.join(names)}): live in {self.dir}" + (", continuing the interrupted attempt's "
                    "runs" if again else "") + f"; moved into {self.final} when the run ends")

    def __call__(self, record: dict) -> None:
        self.records.append(record)
        if self.trackers is not None:
            self.trackers.log(record, record["step"])

    def close(self, folder: Path, summary: dict[str, Any]) -> None:
        """metrics.jsonl into `folder` (the model folder under construction); the trackers'
        final figures, their end, and their files moved in beside it."""
        (folder / "metrics.jsonl").write_text("".join(to_json_line(r) for r in self.records), encoding="utf-8")
        if self.trackers is None:
            return
        self.trackers.summary(summary)
        self.trackers.finish()
        self.trackers = None
        assert self.dir is not None
        for entry in sorted(self.dir.iterdir()):
            if entry.name != TEMP_MARKER:
                os.replace(entry, folder / entry.name)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
