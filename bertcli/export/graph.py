"""Writing the ONNX graph: torch.onnx.export (the dynamo exporter), fp16, int8.

Why the dynamo exporter: with torch 2.13 the TorchScript exporter (dynamo=False) turns the
encoder's boolean-masked scaled_dot_product_attention into a graph that differs from PyTorch by
~1e-2 on padded batches; the dynamo exporter matches within 1e-8 and emits only standard
operators (MatMul, Gemm, LayerNormalization, Softmax, Where, ...), which ONNX Runtime and
TensorRT's parser both take. `optimize` then fuses it for ONNX Runtime (its transformer optimizer
and bertcli.export.fuse): the fused graph holds ONNX Runtime's contrib operators (com.microsoft
Attention, SkipLayerNormalization, Gelu), so a graph for another runtime is exported with
--no-optimize.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bertcli.export import fuse

# A protobuf file cannot exceed 2 GB; bigger models keep their weights in `model.onnx.data`.
EXTERNAL_DATA_BYTES = 1_800_000_000
MIN_OPSET = 17
DEFAULT_OPSET = 18  # the dynamo exporter's own; 17 is reached by its version converter


def parameter_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.state_dict().values())


def example_inputs(module, batch: int = 2, length: int = 16):
    """Inputs to trace with: a padded batch so the mask path is the traced one."""
    import torch

    c = module.config
    length = min(length, max_length(c))
    ids = torch.full((batch, length), 5 % c.vocab_size, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[-1, length // 2:] = 0
    tensors = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    return tuple(tensors[n] for n in module.input_names)


def max_length(c) -> int:
    """The longest sequence the position table allows (RoBERTa: 2 positions fewer)."""
    return c.max_position_embeddings - c.position_offset


def export_graph(module, path: Path, opset: int, fp16: bool = False) -> list[str]:
    """Trace `module` (heads.exportable) into `path`; returns the output names. Batch and
    sequence axes are dynamic, the sequence up to the model's maximum positions."""
    import torch

    if fp16:
        module = module.half()
    args = example_inputs(module)
    outputs = module.output_names(*args)
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    seq = torch.export.Dim("sequence", min=1, max=max_length(module.config))
    # The Dim names become the graph's axis names (batch, sequence): what trtexec's shape flags name.
    shapes = {name: {0: batch, 1: seq} for name in module.input_names}
    import logging
    import warnings

    quiet = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [q.level for q in quiet]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the exporter's chatter (opset conversion, torchvision) is not the user's concern
        for q in quiet:
            q.setLevel(logging.ERROR)
        program = torch.onnx.export(module, args, None, dynamo=True, opset_version=opset,
                                    input_names=list(module.input_names), output_names=outputs,
                                    dynamic_shapes=shapes, optimize=True, verbose=False)
        for q, level in zip(quiet, levels):
            q.setLevel(level)
    assert program is not None  # dynamo=True returns the program
    program.save(str(path), external_data=parameter_bytes(module) > EXTERNAL_DATA_BYTES)
    return outputs


def quantize_int8(src: Path, dst: Path) -> None:
    """ONNX Runtime dynamic quantization: int8 weights of MatMul/Gemm and of a fused graph's
    Attention (its qkv projection: QAttention), activations quantized on the fly per batch (no
    calibration data needed)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # the quantizer logs a pre-processing hint per call
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=False,
                     op_types_to_quantize=["MatMul", "Gemm", "Attention"], extra_options={"MatMulConstBOnly": True})


def graph_summary(path: Path) -> dict:
    """Opset, inputs and outputs (name, element type, shape with axis names) of a saved graph."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)

    def values(vs: Iterable[onnx.ValueInfoProto]) -> list[dict]:
        out = []
        for v in vs:
            t = v.type.tensor_type
            shape = [d.dim_param or d.dim_value for d in t.shape.dim]
            out.append({"name": v.name, "type": onnx.TensorProto.DataType.Name(t.elem_type).lower(), "shape": shape})
        return out

    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"opset": opset, "inputs": values(proto.graph.input), "outputs": values(proto.graph.output),
            "operators": sorted({f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in proto.graph.node})}


# The operators ONNX Runtime's transformer optimizer fuses into (its get_fused_operator_statistics
# list, less the quantized ones): the count of each that the optimizer added is what was fused.
FUSED_OPS = ("EmbedLayerNormalization", "Attention", "MultiHeadAttention", "Gelu", "FastGelu", "BiasGelu",
             "GemmFastGelu", "LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
             "SkipSimplifiedLayerNormalization", "RotaryEmbedding")


def op_counts(proto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in proto.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def optimize(src: Path, dst: Path, num_heads: int, hidden_size: int,
             external: bool = False) -> tuple[dict[str, int], str]:
    """ONNX Runtime's transformer optimizer (model type bert, the config's heads and width) on
    the graph at `src`, then bertcli's own fusions for the flat layout the optimizer does not
    recognize (bertcli.export.fuse: contrib Attention, SkipLayerNormalization); written to `dst`
    when anything was fused. Returns (fused operator -> how many were added, note); ({}, why)
    when nothing was written: nothing matched or the fusions failed, and the plain graph stands.

    Only the optimizer's own Python fusions run (opt_level 0): the runtime's graph optimizations
    are hardware-specific and are applied by every session at load time anyway."""
    import logging

    import onnx

    proto = onnx.load(str(src))
    before = op_counts(proto)
    notes = []
    quiet = logging.getLogger("onnxruntime.transformers")     # it logs each fusion pass at INFO / WARNING
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        proto = optimize_model(str(src), model_type="bert", num_heads=num_heads, hidden_size=hidden_size,
                               opt_level=0).model
    except Exception as e:  # the optimizer raises whatever its pattern code hits on an unexpected graph
        notes.append(f"ONNX Runtime's transformer optimizer failed ({_why(e)})")
    finally:
        quiet.setLevel(level)
    try:
        work = onnx.ModelProto()
        work.CopyFrom(proto)
        fuse.fuse_attention(work, num_heads, hidden_size)
        fuse.fuse_skip_layer_norm(work)
        proto = work
    except Exception as e:  # a pattern this module did not foresee: the graph so far stands
        notes.append(f"bertcli's attention / layer-norm fusions failed ({_why(e)})")
    after = op_counts(proto)
    fused = {op: after.get(op, 0) - before.get(op, 0) for op in FUSED_OPS if after.get(op, 0) > before.get(op, 0)}
    if not fused:
        return {}, "not optimized: " + ("; ".join(notes) or "nothing in the graph matched a fusion") \
            + "; the plain graph is kept"
    try:
        onnx.save_model(proto, str(dst), save_as_external_data=external, location=Path(dst).name + ".data")
    except Exception as e:  # e.g. a full disk: the plain graph is still there
        for leftover in Path(dst).parent.glob(Path(dst).name + "*"):
            leftover.unlink()
        return {}, f"not optimized: writing the fused graph failed ({_why(e)}); the plain graph is kept"
    return fused, "fused: " + ", ".join(f"{op} x{n}" for op, n in fused.items()) + "".join(f" ({n})" for n in notes)


def _why(e: Exception) -> str:
    first = str(e).splitlines()[0][:200] if str(e) else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def move_graph(src: Path, dst: Path) -> None:
    """Rename a saved graph; one with external data is saved again under the new name (the
    graph file names its data file)."""
    import os

    data = Path(str(src) + ".data")
    if not data.exists():
        os.replace(src, dst)
        return
    import onnx

    proto = onnx.load(str(src))
    onnx.save_model(proto, str(dst), save_as_external_data=True, location=Path(dst).name + ".data")
    Path(src).unlink()
    data.unlink()
