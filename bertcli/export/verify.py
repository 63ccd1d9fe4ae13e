"""Built-in verification: ONNX Runtime against PyTorch on real tokenized inputs.

The batches cover one short sentence, sentence pairs (second segment: token type 1), a batch of
mixed lengths with padding, and the longest sequence the model takes (its maximum positions).
Each output's largest absolute difference over all real (unpadded) positions is reported; padded
positions are excluded because no prediction reads them.

Tolerances (max |ONNX Runtime - PyTorch fp32|, relative ones scale with the output's range
r = max(1, max |PyTorch output|)):
    fp32   1e-4 absolute          the same arithmetic, reordered by the runtime
    fp16   2e-2 x r               10-bit mantissas through every layer
    int8   dynamic quantization changes values, not just rounding: the check is that the
           decisions survive (argmax agreement on the real positions, reported) and that the
           difference stays under 0.5 x r (a broken graph is far off)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertcli.export.backend import pad_batch
from bertcli.model.finite import require_finite_outputs

TOLERANCE = {"fp32": ("absolute", 1e-4), "fp16": ("relative", 2e-2), "int8": ("relative", 0.5)}

SENTENCES = [
    "The cat sat on the mat.",
    "Exceptions are raised when an error is detected during execution.",
    "A module is a file containing Python definitions and statements; its name is the file name.",
    "Paris is the capital of France.",
    "Which city is the capital of France?",
    "The quick brown fox jumps over the lazy dog while the band plays on, and nobody notices.",
    "Numbers are created by numeric literals or as the result of built-in functions and operators.",
    "It was raining.",
]


def verification_batches(tokenizer, pad_id: int, names: list[str], max_len: int):
    """[(description, feed)] of real tokenized text, several batch sizes and lengths."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer.to_str())
    tok.no_padding()
    tok.enable_truncation(max_length=max_len, strategy="longest_first")
    long_text = " ".join(SENTENCES * (1 + 4 * max_len // sum(len(s) for s in SENTENCES)))
    plans: list[tuple[str, list]] = [
        ("1 sentence", [SENTENCES[0]]),
        ("2 pairs", [(SENTENCES[4], SENTENCES[3]), (SENTENCES[1], SENTENCES[2])]),
        ("8 mixed lengths", SENTENCES),
        (f"1 x {max_len} tokens (the maximum)", [long_text]),
        ("3 with padding to the maximum", [long_text, SENTENCES[7], (SENTENCES[5], long_text)]),
    ]
    batches = []
    for label, texts in plans:
        encs = tok.encode_batch(texts)
        feed = pad_batch(encs, pad_id, names, multiple=1)
        batches.append((f"{label}: {feed['input_ids'].shape[0]}x{feed['input_ids'].shape[1]}", feed))
    return batches


@dataclass
class Check:
    precision: str
    max_abs_diff: dict[str, float]     # per output, over all batches
    agreement: dict[str, float]        # argmax agreement per output (int8 / fp16)
    tolerance: dict[str, float]        # per output, in absolute terms
    batches: list[str]
    verified: bool = True              # False: this runtime could not run the graph
    note: str = ""

    @property
    def passed(self) -> bool:
        return not self.verified or all(self.max_abs_diff[n] <= self.tolerance[n] for n in self.max_abs_diff)

    def as_dict(self) -> dict:
        return {"precision": self.precision, "verified": self.verified, "passed": self.passed,
                "max_abs_diff": self.max_abs_diff, "tolerance": self.tolerance,
                "tolerance_rule": "{} {:g}".format(*TOLERANCE[self.precision]),
                "argmax_agreement": self.agreement, "batches": self.batches, "note": self.note}


def real_positions(name: str, out: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Rows of an output at real tokens: per-token outputs [B, T, ...] keep mask == 1."""
    if out.ndim >= 2 and out.shape[:2] == mask.shape:
        return out[mask.astype(bool)]
    return out


def check_reference(reference, batches, checkpoint: Path) -> None:
    """The PyTorch outputs every graph is verified against are finite on the first verification
    batch (real positions): a checkpoint with NaN weights would export a graph of NaN, and a
    difference of NaN passes no tolerance and fails none. Refused, naming the checkpoint."""
    for _, feed in batches[:1]:
        outs = reference.run(feed)
        require_finite_outputs({n: real_positions(n, o, feed["attention_mask"]) for n, o in outs.items()},
                               checkpoint, "outputs")


def compare(reference, candidate, batches, precision: str) -> Check:
    """Run both backends on every batch; the largest difference per output and the tolerance."""
    diffs: dict[str, float] = {}
    scale: dict[str, float] = {}
    agree: dict[str, list[float]] = {}
    for _, feed in batches:
        want, got = reference.run(feed), candidate.run(feed)
        for name, w in want.items():
            w = real_positions(name, w, feed["attention_mask"])
            g = real_positions(name, got[name], feed["attention_mask"])
            diffs[name] = max(diffs.get(name, 0.0), float(np.abs(w - g).max()))
            scale[name] = max(scale.get(name, 1.0), float(np.abs(w).max()))
            if w.shape[-1] > 1:
                agree.setdefault(name, []).append(float((w.argmax(-1) == g.argmax(-1)).mean()))
    kind, value = TOLERANCE[precision]
    tol = {n: value if kind == "absolute" else value * scale[n] for n in diffs}
    return Check(precision, diffs, {n: float(np.mean(v)) for n, v in agree.items()}, tol,
                 [label for label, _ in batches])
