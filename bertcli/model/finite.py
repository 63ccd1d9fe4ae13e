"""Finite outputs or a message. A checkpoint whose weights hold NaN or huge values (training that
diverged, an edited file) computes NaN or infinite outputs, and every number downstream of
them (a vector, a probability, a correlation, an nDCG over NaN vectors) would be written as if
it were a result. Serving commands check what the model computed before writing it and refuse,
naming the checkpoint; training checks its model before saving it (`check_trained`) and reports
the run as diverged (errors.Diverged, naming the learning rate).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bertcli.core.errors import Diverged, UserError


def all_finite(outputs: Any, masked: bool = False) -> bool:
    """Whether every tensor or array in `outputs` (a tensor, an array, or tuples, lists,
    mappings and dataclasses of them; anything else is ignored) holds finite numbers only.
    `masked`: -inf is allowed too, the value a task's forward gives positions that can never be
    chosen (SQuAD's padding, out of the softmax); nan and +inf still fail."""
    if hasattr(outputs, "isfinite"):                     # a torch tensor
        if not outputs.is_floating_point():
            return True
        ok = outputs.isfinite() | (outputs == float("-inf")) if masked else outputs.isfinite()
        return bool(ok.all())
    if hasattr(outputs, "dtype") and hasattr(outputs, "shape"):          # a numpy array
        import numpy as np

        if not np.issubdtype(outputs.dtype, np.floating):
            return True
        return bool((np.isfinite(outputs) | (masked & (outputs == -np.inf))).all())
    if isinstance(outputs, dict):
        return all(all_finite(v, masked) for v in outputs.values())
    if isinstance(outputs, (list, tuple)):
        return all(all_finite(v, masked) for v in outputs)
    if dataclasses.is_dataclass(outputs) and not isinstance(outputs, type):
        return all(all_finite(getattr(outputs, f.name), masked) for f in dataclasses.fields(outputs))
    return True


def require_finite_outputs(outputs: Any, checkpoint: str | Path | None, what: str) -> None:
    """A UserError naming the checkpoint when its model computed a NaN or an infinity in
    `outputs` (`what`: "embeddings", "MLM logits", ...): nothing is written from it."""
    if all_finite(outputs):
        return
    name = f"{checkpoint}" if checkpoint is not None else "the model"
    raise UserError(f"{name} computes {what} that are not finite numbers (NaN or infinity): its weights are "
                    f"broken, e.g. by training that diverged; nothing was written from them",
                    fix="use a checkpoint whose training converged (a lower learning rate, or an earlier "
                        "checkpoint of the run)")


def check_trained(outputs: Any, what: str, learning_rate: float | str, flag: str, masked: bool = False) -> None:
    """After training, before saving: outputs computed on a held-back (dev or validation)
    batch must be finite (`masked`: or -inf, see all_finite), else the run diverged
    (errors.Diverged, the message naming the learning rate and `flag`, the setting to lower)
    and nothing is saved as a result."""
    if all_finite(outputs, masked):
        return
    lr = f"{learning_rate:g}" if isinstance(learning_rate, (int, float)) else str(learning_rate)
    lower = f", e.g. {learning_rate / 10:g}" if isinstance(learning_rate, (int, float)) else ""
    raise Diverged(f"{what} diverged at learning rate {lr}: the trained model's outputs on a held-back batch are "
                   f"not finite numbers (NaN or infinity), so it was not saved as a result",
                   fix=f"train again with a lower learning rate ({flag}){lower}")
