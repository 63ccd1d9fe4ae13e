"""One interface over PyTorch and ONNX Runtime: `run(feed) -> {output name: float32 array}`.

`feed` holds int64 arrays [B, T] named like the graph's inputs (input_ids, attention_mask,
token_type_ids where used). Both backends take the same feed and return the same names, so
predict, verification and the benchmark never care which one runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from bertcli.core.errors import UserError

EXTRA_HINT = "pip install 'bertcli[export]'   (onnx, onnxruntime, onnxscript)"


def require_onnx(what: str = "bertcli export") -> None:
    """A UserError naming the install command when the `export` extra is missing."""
    missing = []
    for name in ("onnx", "onnxruntime", "onnxscript"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise UserError(f"{what} needs {', '.join(missing)}, which are not installed",
                        fix=f"install the export extra: {EXTRA_HINT}")


def pad_batch(encodings: Sequence, pad_id: int, names: Sequence[str], multiple: int = 8) -> dict[str, np.ndarray]:
    """`tokenizers.Encoding`s -> right-padded int64 arrays [B, T], T the longest rounded up to
    `multiple` (fewer distinct shapes for the runtimes' caches)."""
    longest = max(len(e.ids) for e in encodings)
    width = -(-longest // multiple) * multiple
    ids = np.full((len(encodings), width), pad_id, dtype=np.int64)
    types = np.zeros_like(ids)
    mask = np.zeros_like(ids)
    for row, e in enumerate(encodings):
        n = len(e.ids)
        ids[row, :n], types[row, :n], mask[row, :n] = e.ids, e.type_ids, 1
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    return {n: feed[n] for n in names}


class TorchBackend:
    """The traced module itself (heads.exportable), run eagerly in fp32."""

    name = "torch"

    def __init__(self, module, threads: int | None = None):
        self.module = module
        self.input_names = list(module.input_names)
        self.output_names: list[str] | None = None
        if threads:
            import torch

            torch.set_num_threads(threads)

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        args = [torch.from_numpy(feed[n]) for n in self.input_names]
        with torch.inference_mode():
            if self.output_names is None:
                self.output_names = self.module.output_names(*args)
            outs = self.module(*args)
        return {n: o.numpy() for n, o in zip(self.output_names, outs)}


class OrtBackend:
    """An onnxruntime InferenceSession on the CPU (or the providers given)."""

    name = "onnx"

    def __init__(self, path: Path, threads: int | None = None, providers: Sequence[str] | None = None):
        require_onnx("running an ONNX model")
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(path), options, providers=list(providers or ["CPUExecutionProvider"]))
        except Exception as e:  # onnxruntime raises its own exception types for bad files
            raise UserError(f"ONNX Runtime cannot load {Path(path).name}: {e}".strip(), where=str(path),
                            fix="export the model again with `bertcli export`")
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self.session.run(self.output_names, {n: feed[n] for n in self.input_names})
        return {n: np.asarray(o, dtype=np.float32) for n, o in zip(self.output_names, outs)}
