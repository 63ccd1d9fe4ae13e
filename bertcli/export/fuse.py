"""Fusions for the layout bertcli's encoder exports, which ONNX Runtime's transformer optimizer
does not recognize.

The traced encoder keeps its activations flat, [B*T, H] (the static layout of
bertcli.model.encoder), and computes attention from one fused qkv projection:

    x [N, H] -Gemm(Wqkv)-> [N, 3H] -Reshape-> [B, T, 3, h, d] -Transpose(2,0,3,1,4)-> q, k, v [B, h, T, d]
    softmax(q k^T * scale + mask) v -> [B, h, T, d] -Transpose(0,2,1,3)-> -Reshape-> [N, H]

The optimizer's attention and SkipLayerNormalization patterns expect transformers' [B, T, H]
graph, so they find nothing here. This module rewrites the span above into ONNX Runtime's
contrib `Attention` operator (one kernel: the qkv GEMM, the per-head products, the masked
softmax; what optimum gets from the optimizer on transformers' graph), and
Add + LayerNormalization into `SkipLayerNormalization`.

A span is rewritten only when every node between the projection and the output reshape is one
of the ops above and its mask is the padding mask of the graph's `attention_mask` input alone
(so ModernBERT's windowed layers, whose mask also depends on positions, stay as they are). The
result is checked against PyTorch like any exported graph (bertcli.export.run): a fused graph
that does not verify is not kept.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # onnx loads where a graph is rewritten
    import onnx

MS = "com.microsoft"
# the ops the exporter writes between the qkv projection and the attention output
INTERIOR = {"Slice", "Squeeze", "Shape", "Concat", "Reshape", "Transpose", "Mul", "MatMul", "Add", "Softmax",
            "IsNaN", "Where", "Gather", "Unsqueeze", "Cast", "Div", "Sqrt"}
# how the padding mask reaches the attention scores from the graph input
MASK_PATH = {"Cast", "Unsqueeze", "Where", "Not", "Equal", "Sub", "Mul", "Expand", "Reshape"}


class Graph:
    """Producer / consumer maps and initializers of an onnx GraphProto, for pattern matching."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        from onnx import numpy_helper

        self.proto = proto
        self.g = proto.graph
        self.inits = {i.name: i for i in self.g.initializer}
        self.array = lambda name: numpy_helper.to_array(self.inits[name])
        self.producer = {o: n for n in self.g.node for o in n.output}
        self.consumers: dict[str, list] = defaultdict(list)
        for n in self.g.node:
            for i in n.input:
                self.consumers[i].append(n)
        self.inputs = {i.name for i in self.g.input}
        self.outputs = {o.name for o in self.g.output}

    def sole(self, name: str, op: str):
        """The only consumer of `name`, when it is an `op`, else None."""
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and users[0].op_type == op and name not in self.outputs else None


def attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:   # an attribute's value: int, float, str, list ...
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _from_mask_only(g: Graph, name: str, seen: set) -> bool:
    """`name` is computed from the graph input attention_mask and constants only."""
    if name in g.inits or name == "attention_mask":
        return True
    if name in g.inputs:
        return False
    node = g.producer.get(name)
    if node is None or node.op_type not in MASK_PATH or len(seen) > 20:
        return False
    seen.add(name)
    return all(_from_mask_only(g, i, seen) for i in node.input if i)


def _match_attention(g: Graph, gemm, num_heads: int, hidden: int):
    """(interior nodes, the output Reshape, scale) of one attention span starting at the qkv
    Gemm, or None when the span is not exactly the pattern."""
    w = gemm.input[1] if len(gemm.input) > 1 else ""
    # (a bias of zeros -- a freshly initialized model -- is dropped by the exporter: no third input)
    if attr(gemm, "transB", 0) != 1 or attr(gemm, "transA", 0) != 0 or w not in g.inits \
            or (len(gemm.input) > 2 and gemm.input[2] and gemm.input[2] not in g.inits) \
            or attr(gemm, "alpha", 1.0) != 1.0 or attr(gemm, "beta", 1.0) != 1.0:
        return None
    if tuple(g.inits[w].dims) != (3 * hidden, hidden):
        return None
    r1 = g.sole(gemm.output[0], "Reshape")
    r2 = r1 and g.sole(r1.output[0], "Reshape")
    tr = r2 and g.sole(r2.output[0], "Transpose")
    if tr is None or r2 is None or list(attr(tr, "perm")) != [2, 0, 3, 1, 4]:
        return None
    # [B, T, 3, h, d]: B and T computed, the rest constants (the exporter concatenates them)
    split = g.producer.get(r2.input[1])
    dims = [g.array(i).reshape(-1) for i in split.input[2:]] if split is not None and split.op_type == "Concat" \
        and all(i in g.inits for i in split.input[2:]) else None
    if dims is None or [int(v) for d in dims for v in d] not in ([3, num_heads, -1], [3, num_heads, hidden // num_heads]):
        return None
    interior, frontier, end = [], [tr.output[0]], None
    seen = {id(tr)}
    while frontier:
        name = frontier.pop()
        for node in g.consumers.get(name, []):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.op_type == "Transpose" and list(attr(node, "perm") or []) == [0, 2, 1, 3]:
                out = g.sole(node.output[0], "Reshape")
                if out is None or end is not None:
                    return None
                end = (node, out)
                continue
            if node.op_type not in INTERIOR or any(o in g.outputs for o in node.output):
                return None
            interior.append(node)
            frontier.extend(node.output)
    if end is None or len(interior) > 60:
        return None
    inside = {o for n in interior + [tr, end[0]] for o in n.output}
    # every interior input comes from the span, a constant, or the padding mask
    for node in interior:
        for i in node.input:
            if i and i not in inside and i not in g.inits and not _from_mask_only(g, i, set()):
                return None
    # nothing outside the span reads an interior value
    for node in interior:
        for o in node.output:
            if any(id(c) not in seen for c in g.consumers.get(o, [])):
                return None
    if sum(n.op_type == "Softmax" for n in interior) != 1 or sum(n.op_type == "MatMul" for n in interior) != 2:
        return None
    scale = 1.0
    for node in interior:
        consts = [i for i in node.input if i in g.inits]
        if node.op_type in ("Mul", "Div") and len(consts) == 1 and g.array(consts[0]).size == 1 \
                and g.array(consts[0]).dtype.kind == "f":
            v = float(g.array(consts[0]).reshape(()))
            if node.op_type == "Div":
                v = 1.0 / v
            scale *= v
        elif node.op_type in ("Div", "Sqrt"):
            return None                          # a scale computed at run time: not this pattern
    end_shape = g.array(end[1].input[1]) if end[1].input[1] in g.inits else None
    if end_shape is None or list(end_shape) != [-1, hidden]:
        return None
    return interior, [r1, r2, tr, *end], scale


def fuse_attention(proto, num_heads: int, hidden: int) -> int:
    """Rewrite every matching attention span of `proto` (in place) into contrib Attention;
    returns how many."""
    from onnx import helper, numpy_helper

    g = Graph(proto)
    if "attention_mask" not in g.inputs or "input_ids" not in g.inputs:
        return 0
    spans = []
    for node in list(g.g.node):
        if node.op_type == "Gemm":
            m = _match_attention(g, node, num_heads, hidden)
            if m is not None:
                spans.append((node, *m))
    if not spans:
        return 0
    new_inits, new_nodes = [], []
    shape3, mask32 = "bertcli_fuse/shape_bth", "bertcli_fuse/mask_int32"
    new_inits.append(numpy_helper.from_array(np.array([hidden], dtype=np.int64), "bertcli_fuse/hidden"))
    new_inits.append(numpy_helper.from_array(np.array([-1, hidden], dtype=np.int64), "bertcli_fuse/shape_nh"))
    new_nodes += [helper.make_node("Shape", ["input_ids"], ["bertcli_fuse/bt"], name="bertcli_fuse/Shape"),
                  helper.make_node("Concat", ["bertcli_fuse/bt", "bertcli_fuse/hidden"], [shape3], axis=0,
                                   name="bertcli_fuse/Concat"),
                  helper.make_node("Cast", ["attention_mask"], [mask32], to=6, name="bertcli_fuse/Cast")]
    transposed: dict[str, str] = {}
    remove: set[int] = set()
    for k, (gemm, interior, edges, scale) in enumerate(spans):
        w = gemm.input[1]
        if w not in transposed:          # ALBERT's layers share one weight: transpose it once
            transposed[w] = f"{w}/attention_t"
            new_inits.append(numpy_helper.from_array(np.ascontiguousarray(g.array(w).T), transposed[w]))
        x3, a = f"bertcli_fuse/{k}/x", f"bertcli_fuse/{k}/attention"
        bias = gemm.input[2] if len(gemm.input) > 2 and gemm.input[2] else f"bertcli_fuse/{k}/zero_bias"
        if bias not in g.inits:
            new_inits.append(numpy_helper.from_array(np.zeros(3 * hidden, dtype=g.array(w).dtype), bias))
        new_nodes += [helper.make_node("Reshape", [gemm.input[0], shape3], [x3], name=f"bertcli_fuse/{k}/Reshape_in"),
                      helper.make_node("Attention", [x3, transposed[w], bias, mask32], [a], domain=MS,
                                       num_heads=num_heads, scale=float(scale), name=f"bertcli_fuse/{k}/Attention"),
                      helper.make_node("Reshape", [a, "bertcli_fuse/shape_nh"], [edges[-1].output[0]],
                                       name=f"bertcli_fuse/{k}/Reshape_out")]
        remove.update(id(n) for n in [gemm, *interior, *edges])
    _replace(proto, remove, new_nodes, new_inits)
    return len(spans)


def fuse_skip_layer_norm(proto) -> int:
    """Add(a, b) -> LayerNormalization over the last axis, where the Add feeds nothing else and
    neither side is a constant: contrib SkipLayerNormalization (one pass over [N, H])."""
    from onnx import helper

    g = Graph(proto)
    new_nodes: list = []
    remove: set[int] = set()
    for ln in g.g.node:
        if ln.op_type != "LayerNormalization" or attr(ln, "axis", -1) != -1 or len(ln.input) < 3 or len(ln.output) != 1:
            continue
        add = g.producer.get(ln.input[0])
        if add is None or add.op_type != "Add" or g.sole(add.output[0], "LayerNormalization") is None:
            continue
        if any(i in g.inits or i in g.inputs for i in add.input) or ln.input[1] not in g.inits:
            continue
        new_nodes.append(helper.make_node("SkipLayerNormalization", [add.input[0], add.input[1], ln.input[1], ln.input[2]],
                                          [ln.output[0]], domain=MS, epsilon=float(attr(ln, "epsilon", 1e-5)),
                                          name=f"{ln.name or ln.output[0]}/skip"))
        remove.update((id(add), id(ln)))
    if new_nodes:
        _replace(proto, remove, new_nodes, [])
    return len(new_nodes)


def _replace(proto, remove: set, new_nodes: list, new_inits: list) -> None:
    """Drop the `remove`d nodes, add the new ones, and sort the graph topologically again."""
    kept = [n for n in proto.graph.node if id(n) not in remove] + new_nodes
    available = {i.name for i in proto.graph.input} | {i.name for i in proto.graph.initializer} \
        | {i.name for i in new_inits} | {""}
    ordered, pending = [], kept
    while pending:
        rest = []
        for n in pending:
            if all(i in available for i in n.input):
                ordered.append(n)
                available.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError(f"fusion left {len(rest)} nodes with missing inputs (first: {rest[0].op_type})")
        pending = rest
    used = {i for n in ordered for i in n.input}
    inits = [i for i in proto.graph.initializer if i.name in used] + [i for i in new_inits if i.name in used]
    del proto.graph.node[:]
    proto.graph.node.extend(ordered)
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(inits)
    if not any(o.domain == MS for o in proto.opset_import):
        from onnx import helper

        proto.opset_import.append(helper.make_opsetid(MS, 1))
    # value_info of removed intermediate values would only confuse shape inference
    names = {o for n in ordered for o in n.output}
    keep = [v for v in proto.graph.value_info if v.name in names]
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(keep)
