"""One interface over PyTorch and ONNX Runtime: `run(feed) -> {output name: float32 array}`.

`feed` holds int64 arrays [B, T] named like the graph's inputs (input_ids, attention_mask,
token_type_ids where used). Both backends take the same feed and return the same names, so
predict, verification and the benchmark never care which one runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from bertcli.core.errors import UserError
from bertcli.core.machine import choose_threads

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


def ort_threads(threads: int | None) -> int:
    """ONNX Runtime's intra-op threads: the count asked for, else the choice training makes
    (bertcli.core.machine.choose_threads: OMP_NUM_THREADS, else the cores other jobs leave free).
    ORT's own default, a thread per core that spins between operators, stalls on a machine
    shared with other jobs."""
    if threads:
        return int(threads)
    return int(choose_threads(None, "--threads").count)


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
        options.intra_op_num_threads = ort_threads(threads)
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(path), options, providers=list(providers or ["CPUExecutionProvider"]))
        except Exception as e:  # onnxruntime raises its own exception types for bad files
            raise UserError(f"ONNX Runtime cannot load {Path(path).name}: {e}".strip(), where=str(path),
                            fix="export the model again with `bertcli export`")
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.path = Path(path)
        self.expected: dict[str, tuple] | None = None
        self.sizes: dict[str, int] = {}

    def expect(self, outputs: dict[str, tuple[str, ...]], sizes: Mapping[str, int | None], optional: Sequence[str] = ()) -> None:
        """Check the graph's outputs against what a task's decoder reads before anything runs
        (a foreign graph must be a message, not an IndexError in a decoder): every output of
        `outputs` (name -> axis names) but the `optional` ones is there, of a float type, with
        as many axes, and every fixed axis named in `sizes` ("labels", "vocab", "hidden") of
        that size. Afterwards only those outputs are run, and each result is checked too."""
        fixed = {k: v for k, v in sizes.items() if v is not None}
        declared = {o.name: o for o in self.session.get_outputs()}
        have = ", ".join(f"{n} {list(o.shape)}" for n, o in declared.items()) or "none"
        fix = "predict runs graphs written by `bertcli export` for this checkpoint; export it again"
        for name, axes in outputs.items():
            o = declared.get(name)
            if o is None:
                if name in optional:
                    continue
                raise UserError(f"the ONNX graph has no output {name!r} {list(axes)}, which this task reads "
                                f"(its outputs: {have})", where=str(self.path), fix=fix)
            if o.type not in ("tensor(float)", "tensor(float16)", "tensor(double)"):
                raise UserError(f"graph output {name} is {o.type}, not floating-point scores", where=str(self.path),
                                fix=fix)
            shape = list(o.shape) if o.shape is not None else None
            if shape is not None and len(shape) != len(axes):
                raise UserError(f"graph output {name} has {len(shape)} axes {shape}; this task needs "
                                f"{len(axes)} {list(axes)}", where=str(self.path), fix=fix)
            for dim, axis in zip(shape or [], axes):
                if isinstance(dim, int) and axis in fixed and dim != fixed[axis]:
                    raise UserError(f"graph output {name} has {dim} on its {axis} axis; the model's config.json "
                                    f"says {fixed[axis]}", where=str(self.path),
                                    fix="config.json (labels, vocab_size, hidden_size) does not belong to this "
                                        "model.onnx; " + fix)
        self.expected = {n: tuple(a) for n, a in outputs.items() if n in declared}
        self.sizes = dict(fixed)
        self.output_names = list(self.expected)

    def _check_result(self, name: str, out: np.ndarray, batch: int, seq: int) -> None:
        assert self.expected is not None, "run() checks results only once expect() has set expected"
        axes = self.expected[name]
        want = {"batch": batch, "sequence": seq, **self.sizes}
        if out.ndim != len(axes) or any(a in want and d != want[a] for d, a in zip(out.shape, axes)):
            raise UserError(f"graph output {name} came back with shape {list(out.shape)}; this task needs "
                            f"{[want.get(a, a) for a in axes]} ({', '.join(axes)})", where=str(self.path),
                            fix="predict runs graphs written by `bertcli export` for this checkpoint; export it again")

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outs = self.session.run(self.output_names, {n: feed[n] for n in self.input_names})
        except Exception as e:  # onnxruntime's own types: a graph that cannot run on these inputs
            if self.expected is None:
                raise
            raise UserError(f"ONNX Runtime failed running {self.path.name}: {str(e).splitlines()[0][:300]}",
                            where=str(self.path), fix="export the model again with `bertcli export`") from None
        result = {n: np.asarray(o, dtype=np.float32) for n, o in zip(self.output_names, outs)}
        if self.expected is not None:
            batch, seq = feed["input_ids"].shape
            for name, out in result.items():
                self._check_result(name, out, batch, seq)
        return result
