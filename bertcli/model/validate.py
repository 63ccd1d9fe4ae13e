"""Checks of a checkpoint directory before anything is built from it (the read side).

    check_checkpoint(directory, c, head)  config.json's shapes against the safetensors headers
                                          (no tensor read, no weights allocated), then the
                                          directory's tokenizer against the model

config.json is input like any other: a `vocab_size` of 10^12 must be a message, not an attempt to
allocate terabytes. The expected shape of every encoder tensor comes from a model built on
PyTorch's `meta` device (shapes without storage), named through `weight_map`, so the check
follows whatever the modules and the name mapping are, for every family.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from bertcli.config.checkpoint import weight_files
from bertcli.core.errors import UserError
from bertcli.model.hf import is_encoder_param, weight_map
from bertcli.tokenization.load import LOADABLE, check_tokenizer, load_tokenizer

FIX = "config.json and model.safetensors do not belong together (or config.json was edited)"


def header_shapes(directory: Path, rename: Callable[[str], str] = lambda k: k) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of every tensor of the checkpoint, from the safetensors headers only."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for path in weight_files(Path(directory)):
        try:
            with safe_open(str(path), framework="pt") as f:
                for key in f.keys():
                    shapes[rename(key)] = tuple(f.get_slice(key).get_shape())
        except Exception as e:  # SafetensorError, OSError: a damaged or missing file
            raise UserError(f"cannot read the safetensors header: {str(e)[:300]}", where=str(path),
                            fix="the safetensors file is damaged or incomplete; save the checkpoint again")
    return shapes


def _base(shapes: dict, prefix: str) -> str | None:
    """The backbone prefix the stored names use: the family's (task models), none (a bare
    encoder's `embeddings.*`), or None when they are not this family's tensors."""
    if any(k.startswith(prefix) for k in shapes):
        return prefix
    return "" if any(k.startswith("embeddings.") for k in shapes) else None


def check_shapes(directory: Path, c, head: str, rename: Callable[[str], str] = lambda k: k) -> None:
    """Every encoder tensor config.json describes is in the weights with the shape the config
    gives it; UserError naming the config key that disagrees otherwise. Reads headers only."""
    import torch

    from bertcli.model.encoder import Encoder
    where = str(Path(directory) / "config.json")
    shapes = header_shapes(directory, rename)
    base = _base(shapes, c.spec.hf_prefix)
    if base is None:
        return  # not this family's tensors at all: load_checkpoint says so, naming the prefixes
    wmap = weight_map(c, head, base)
    # Tensors the config describes (layers, projections) must all be there, before building anything.
    wanted = [(ours, parts) for ours, copies in wmap.items() if is_encoder_param(ours) for parts in copies]
    absent = [(ours, p) for ours, parts in wanted for p in parts if p not in shapes]
    if absent:
        layers = {m.group(1) for k in shapes if (m := re.search(r"(?:\.layer|_layer_groups)\.(\d+)\.", k))}
        layer_count = f"num_hidden_layers {c.num_hidden_layers}, the weights hold {len(layers) or 'no'} stored layers"
        raise UserError(f"{len(absent):,} encoder tensors described by config.json are missing from the weights "
                        f"(first: {absent[0][1]}; {_keys_of(absent[0][0], c)}; {layer_count})", where=where, fix=FIX)
    with torch.device("meta"):  # shapes without storage: nothing is allocated
        expected = {f"encoder.{n}": tuple(p.shape) for n, p in Encoder(c).named_parameters()}
    for ours, parts in wanted:
        if ours not in expected:
            continue
        stored = [shapes[p] for p in parts]
        got = (sum(s[0] for s in stored), *stored[0][1:]) if stored and stored[0] else stored[0]
        if tuple(got) != expected[ours]:
            raise UserError(f"{parts[0]} has shape {tuple(stored[0])} but config.json describes "
                            f"{expected[ours]} ({_keys_of(ours, c)})", where=where, fix=FIX)


def _keys_of(ours: str, c) -> str:
    """The config.json keys (and values) that decide the shape of a bertcli parameter."""
    keys = ("hidden_size", "embedding_size") if ours.startswith("encoder.proj") else \
        ("vocab_size", "embedding_size") if ".word." in ours else \
        ("max_position_embeddings", "embedding_size") if ".position." in ours else \
        ("type_vocab_size", "embedding_size") if ".token_type." in ours else \
        ("hidden_size", "intermediate_size") if ".ffn." in ours else ("hidden_size", "embedding_size")
    return ", ".join(f"{k} {getattr(c, k):,}" for k in keys)


def check_checkpoint(directory: Path, c, head: str, rename: Callable[[str], str] = lambda k: k) -> None:
    """What load_checkpoint calls before building the model: shapes, then the tokenizer when
    the directory has one."""
    check_shapes(directory, c, head, rename)
    if any((Path(directory) / n).is_file() for n in LOADABLE):
        check_tokenizer(load_tokenizer(directory), c, str(directory))
