"""Writing the ONNX graph: torch.onnx.export (the dynamo exporter), fp16, int8.

Why the dynamo exporter: with torch 2.13 the TorchScript exporter (dynamo=False) turns the
encoder's boolean-masked scaled_dot_product_attention into a graph that differs from PyTorch by
~1e-2 on padded batches; the dynamo exporter matches within 1e-8 and emits only standard
operators (MatMul, Gemm, LayerNormalization, Softmax, Where, ...), which ONNX Runtime and
TensorRT's parser both take.
"""

from __future__ import annotations

from pathlib import Path

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
    """ONNX Runtime dynamic quantization: int8 weights of MatMul/Gemm, activations quantized on
    the fly per batch (no calibration data needed)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # the quantizer logs a pre-processing hint per call
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=False,
                     op_types_to_quantize=["MatMul", "Gemm"], extra_options={"MatMulConstBOnly": True})


def graph_summary(path: Path) -> dict:
    """Opset, inputs and outputs (name, element type, shape with axis names) of a saved graph."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)

    def values(vs):
        out = []
        for v in vs:
            t = v.type.tensor_type
            shape = [d.dim_param or d.dim_value for d in t.shape.dim]
            out.append({"name": v.name, "type": onnx.TensorProto.DataType.Name(t.elem_type).lower(), "shape": shape})
        return out

    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"opset": opset, "inputs": values(proto.graph.input), "outputs": values(proto.graph.output),
            "operators": sorted({f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in proto.graph.node})}
