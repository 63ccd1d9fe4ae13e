"""What a fine-tuning run tells its user beyond the scores: which epoch is kept
(`finetune.select`), whether the run ended at chance, the test splits' scores, and a stop by
signal. Pure functions of the engine's history; the engine calls them (no torch here).
"""

from __future__ import annotations

import math
import signal

from bertcli.core import console


# ------------------------------------------------------------------------------ the kept epoch
def keeps(select: str, score: float | None, loss: float | None, best_score: float | None,
          best_loss: float | None) -> bool:
    """Whether the epoch just evaluated replaces the kept one. `last`, or no dev score (None):
    always. `best`: a higher dev score; at an equal score the later epoch when its training loss
    is lower (the same dev figure with a better fit of the training data), else the earlier stays."""
    if select == "last" or score is None or best_score is None:
        return True
    if score != score:                     # nan (a degenerate metric) never wins
        return False
    if best_score != best_score or score > best_score:
        return True
    if score == best_score:
        return loss is not None and best_loss is not None and loss < best_loss
    return False


# ------------------------------------------------------------------------------ chance level
def noise(baseline: float, n: int, metric: str) -> float:
    """How far a dev metric may sit from the baseline by chance alone (about two standard
    errors): 2 sqrt(b (1 - b) / n) for an accuracy against the majority-class accuracy b on n
    examples; 2 / sqrt(n) for the others (F1, MCC, correlations, whose null spread on n examples
    is about 1 / sqrt(n))."""
    n = max(1, n)
    if metric.endswith("accuracy") and 0.0 < baseline < 1.0:
        return 2.0 * math.sqrt(baseline * (1.0 - baseline) / n)
    return 2.0 / math.sqrt(n)


def chance_report(history: list[dict], baselines: dict[str, tuple[str, float, int]]) -> dict | None:
    """A finding when every epoch's main dev metric was no better than the majority-class
    baseline (at most noise above it; below it is no better) on every dev split; None otherwise
    (or when no baseline is known).
    `baselines`: dev split -> (main metric, baseline value, examples)."""
    if not baselines or not history:
        return None
    for h in history:
        for name, (metric, base, n) in baselines.items():
            value = h["dev"].get(name, {}).get(metric)
            if value is None or not (value - base <= noise(base, n, metric)):   # below it is no better
                return None
    losses = [h["train_loss"] for h in history if h.get("train_loss") is not None]
    name, (metric, base, n) = next(iter(baselines.items()))
    return {"metric": metric, "baseline": base, "tolerance": noise(base, n, metric), "dev_examples": n,
            "values": [h["dev"][name][metric] for h in history],
            "train_loss_first": losses[0] if losses else None, "train_loss_last": losses[-1] if losses else None}


def chance_message(task: str, found: dict, lr: float, lr_source: str) -> str:
    """The warning: what was seen, and the learning rate as the first thing to change."""
    first, last = found["train_loss_first"], found["train_loss_last"]
    if first is not None and last is not None and last < first:
        loss = f"while the training loss fell ({first:.4f} -> {last:.4f})"
    elif first is not None and last is not None:
        loss = f"and the training loss did not fall ({first:.4f} -> {last:.4f})"
    else:
        loss = "(no training loss was recorded)"
    values = ", ".join(f"{100 * v:.1f}" for v in found["values"])
    how = "chosen by finetune.learning_rate: auto" if lr_source == "auto" else "as set"
    return (f"warning: {task} ended at chance: dev {found['metric']} {values} in every epoch is no better "
            f"(noise +-{100 * found['tolerance']:.1f}) than the majority-class baseline {100 * found['baseline']:.1f} (n = "
            f"{found['dev_examples']:,}), {loss}. Try the learning rate first: it was {lr:g} ({how}); "
            f"e.g. --lr {lr * 10:g} (then more --epochs, or more training data)")


def warn_if_chance(task: str, history: list[dict], baselines: dict, lr: float, lr_source: str) -> dict | None:
    """Log the chance warning when the run ended at chance; the finding for results.json."""
    found = chance_report(history, baselines)
    if found is not None:
        console.log(chance_message(task, found, lr, lr_source))
    return found


# ------------------------------------------------------------------------------ signals
class Interrupted(SystemExit):
    """SIGINT / SIGTERM stopped fine-tuning. The process exits with 128 + the signal number (as
    the shell reports a death by that signal) after the engine said what it kept; Python
    callers may catch it (`results`: what was written, or None)."""

    def __init__(self, signum: int, results: dict | None = None):
        super().__init__(128 + signum)
        self.signum, self.results = signum, results


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
