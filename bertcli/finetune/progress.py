"""Fine-tuning progress: the shared bar on a terminal; elsewhere (a pipe, a CI or SLURM log) one
line every `every_s` seconds with the figures pretraining's lines give:

    fine-tuning ner: step 20/180  epoch 1/3  loss 0.6931  lr 1.000e-03  elapsed 0m55s  eta 7m20s

and one when the last step is done. The loss is the mean since the previous line (the figure of
the steps it reports, not of the first batch)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator

from bertcli.core import console
from bertcli.train.metrics import _duration


class PlainFit:
    """The non-TTY lines (see the module docstring)."""

    def __init__(self, description: str, total: int, epochs: float, every_s: float = 10.0):
        self.description, self.total, self.epochs, self.every_s = description, total, epochs, every_s
        self.done, self.epoch = 0, 1
        self.losses: list[float] = []
        self.lr = math.nan
        self.start = self.last = time.monotonic()

    def advance(self, n: int = 1, loss: float | None = None, lr: float | None = None, epoch: int | None = None) -> None:
        self.done += n
        if loss is not None and math.isfinite(loss):
            self.losses.append(loss)
        if lr is not None:
            self.lr = lr
        if epoch is not None:
            self.epoch = epoch
        now = time.monotonic()
        if now - self.last >= self.every_s or self.done >= self.total:
            self.last = now
            self.line()

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else math.nan
        loss = sum(self.losses) / len(self.losses) if self.losses else math.nan
        self.losses = []
        text = (f"{self.description}: step {self.done:,}/{self.total:,}  epoch {self.epoch}/{self.epochs:g}  "
                f"loss {loss:.4f}  lr {self.lr:.3e}  elapsed {_duration(elapsed)}  eta {_duration(eta)}")
        console.log(text)
        return text


class _Bar:
    """The terminal bar, taking (and dropping) the figures the plain lines show."""

    def __init__(self, bar: console.Advancing) -> None:
        self.bar = bar

    def advance(self, n: int = 1, loss: float | None = None, lr: float | None = None, epoch: int | None = None) -> None:
        self.bar.advance(n)


@contextlib.contextmanager
def fit_progress(description: str, total: int, epochs: float) -> Iterator[PlainFit | _Bar]:
    if console.interactive():
        with console.progress(description, total=total) as bar:
            yield _Bar(bar)
    else:
        yield PlainFit(description, total, epochs)
