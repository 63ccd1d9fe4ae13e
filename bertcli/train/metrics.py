"""What a run shows and records: `metrics.jsonl` (one JSON object per logged step) and a live
view (rich on a TTY, plain lines otherwise); train.report_to's trackers are bertcli/train/trackers.py.

Only the main process writes. After a resume, the lines past the checkpoint's step are dropped
so the file reads like an uninterrupted run.

The file is strict JSON (RFC 8259: no NaN / Infinity tokens, which most JSON readers refuse): a
value that is not finite is written as null and its key listed in `"nonfinite"`, e.g.
`{"step": 7, "loss": null, ..., "nonfinite": ["loss", "mlm_loss"]}`. Readers get such values
back as nan (`read_metrics`), so a null never reaches a format string.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.progress import ProgressColumn
from rich.text import Text

from bertcli.core import console, jsonout
from bertcli.core.fs import write_text_atomic
from bertcli.core.paths import saving

if TYPE_CHECKING:  # LiveView imports Progress when it opens a live view
    from rich.progress import Progress, TaskID

# Fields that measure the machine, not the model: they differ between two runs of one recipe.
TIMING_KEYS = ("tokens_per_s", "train_seconds")


class MetricsLog:
    """Appends records to `path` (flushed per line, so a SIGKILL loses at most a torn last line)."""

    def __init__(self, path: Path, resume_step: int | None = None, enabled: bool = True):
        self.path, self.enabled = Path(path), enabled
        self._file = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = read_metrics(self.path, up_to_step=resume_step) if resume_step is not None else []
        with saving(self.path, "the metrics log"):
            write_text_atomic(self.path, "".join(to_json_line(r) for r in kept))
            self._file = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        if self._file is not None:
            with saving(self.path, "the metrics log"):
                self._file.write(to_json_line(record))
                self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def to_json_line(record: dict) -> str:
    """One strict-JSON line: non-finite floats become null, their keys listed in "nonfinite"."""
    bad = [k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        record = {**{k: (None if k in bad else v) for k, v in record.items() if k != "nonfinite"},
                  "nonfinite": sorted(set(bad) | set(record.get("nonfinite") or ()))}
    return jsonout.dumps(record) + "\n"


def read_metrics(path: Path, up_to_step: int | None = None) -> list[dict]:
    """The records of a metrics.jsonl (a torn last line is skipped), optionally up to a step.
    Keys listed in a record's "nonfinite" read back as nan (the file holds null there)."""
    records: list[dict] = []
    if not Path(path).is_file():
        return records
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and "step" in r and (up_to_step is None or r["step"] <= up_to_step):
            for k in r.get("nonfinite") or ():
                if r.get(k) is None:
                    r[k] = math.nan
            records.append(r)
    return records


def _num(value) -> float:
    """A record's value for a format string: a null (a non-finite value as written) is nan."""
    return math.nan if value is None else value


def format_record(r: dict, pair_name: str | None) -> str:
    """One short line: step, losses, accuracies, lr, throughput."""
    parts = [f"loss {_num(r['loss']):.4f}", f"mlm_acc {_num(r['mlm_acc']):.4f}"]
    if pair_name and r.get("pair_acc") is not None:
        parts.append(f"{pair_name}_acc {r['pair_acc']:.4f}")
    parts += [f"lr {_num(r['lr']):.3e}", f"{_num(r['tokens_per_s']):,.0f} tok/s"]
    if "val_loss" in r:
        parts.append("| " + format_validation(r, pair_name))
    return "  ".join(parts)


def format_validation(r: dict, pair_name: str | None) -> str:
    """The validation part of a record, short enough for one line of an 80-column terminal."""
    text = f"val loss {_num(r['val_loss']):.4f} mlm_acc {_num(r['val_mlm_acc']):.4f}"
    if pair_name and r.get("val_pair_acc") is not None:
        text += f" {pair_name}_acc {r['val_pair_acc']:.4f}"
    return text


def _rate(tokens_per_s: float) -> str:
    if not math.isfinite(tokens_per_s):
        return "? tok/s"
    if tokens_per_s >= 10_000:
        return f"{tokens_per_s / 1000:,.0f}k tok/s"
    if tokens_per_s >= 1000:
        return f"{tokens_per_s / 1000:.1f}k tok/s"
    return f"{tokens_per_s:.0f} tok/s"


def live_fields(r: dict) -> str:
    """The live view's metrics: throughput, loss and MLM accuracy, in at most ~32 characters."""
    return f"{_rate(_num(r['tokens_per_s']))}  loss {_num(r['loss']):.3f}  acc {_num(r['mlm_acc']):.3f}"


class _Clock(ProgressColumn):
    """A rich column `elapsed<remaining` (tqdm's convention), compact enough for 80 columns."""

    def render(self, task) -> Text:
        left = task.time_remaining
        budget = task.fields.get("budget")
        if budget is not None and task.elapsed is not None:   # train.max_time ends the run first
            left = max(0.0, budget - task.elapsed) if left is None else min(left, max(0.0, budget - task.elapsed))
        return Text(f"{_clock(task.elapsed)}<{_clock(left) if left is not None else '?'}")


class LiveView:
    """A progress bar with the latest metrics on a TTY; a plain line per logged step otherwise.

    The live line is laid out for an 80-column terminal first: bar, step/total,
    elapsed<remaining, tok/s, loss, MLM accuracy (~75 characters at 1M steps)."""

    def __init__(self, max_steps: int, start_step: int, pair_name: str | None, enabled: bool = True,
                 budget: float | None = None, first_log_step: int | None = None, rich_console=None):
        self.max_steps, self.start_step, self.pair_name = max_steps, start_step, pair_name
        self.budget = budget  # train.max_time in seconds: the run may end before max_steps
        self.enabled = enabled and not console.quiet()
        self.first_log_step = first_log_step
        self.rich_console = rich_console           # tests render into their own console
        self.start = time.monotonic()
        self._progress: Progress | None = None
        self._task: TaskID | None = None            # set with _progress

    def __enter__(self) -> LiveView:
        if self.enabled and (self.rich_console is not None or console.interactive()):
            from rich.progress import BarColumn, Progress, TextColumn

            self._progress = Progress(BarColumn(bar_width=8), TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
                                      _Clock(), TextColumn("{task.fields[line]}"),
                                      console=self.rich_console or console.err, refresh_per_second=4)
            self._progress.start()
            first = f"first figures at step {self.first_log_step:,}" if self.first_log_step else "first step..."
            self._task = self._progress.add_task("pretrain", total=self.max_steps, completed=self.start_step,
                                                 line=first, budget=self.budget)
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def step(self, step: int) -> None:
        if self._progress is not None:
            assert self._task is not None           # __enter__ sets both
            self._progress.update(self._task, completed=step)

    def record(self, r: dict) -> None:
        if not self.enabled:
            return
        if self._progress is not None:
            assert self._task is not None           # __enter__ sets both
            self._progress.update(self._task, completed=r["step"], line=live_fields(r))
            if "val_loss" in r:
                self._progress.console.print(f"step {r['step']:,}/{self.max_steps:,}  "
                                             f"{format_validation(r, self.pair_name)}", markup=False)
            return
        done = r["step"] - self.start_step
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (self.max_steps - r["step"]) if done > 0 else float("nan")
        if self.budget is not None and "train_seconds" in r:
            eta = min(eta, max(0.0, self.budget - r["train_seconds"]))
        console.log(f"step {r['step']}/{self.max_steps}  {format_record(r, self.pair_name)}  "
                    f"elapsed {_duration(elapsed)}  eta {_duration(eta)}")

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.console.print(text, markup=False)
        else:
            console.log(text)


def _clock(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
