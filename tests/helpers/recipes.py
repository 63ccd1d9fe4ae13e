"""Recipes' keys as the tests set them: a short pretraining run's --set items (TINY), the shipped
classify recipe's `finetune` section, and every numeric key of a recipe (FIELDS) with the --set
items that put a value there."""

from __future__ import annotations

import dataclasses
import types
import typing

from bertcli.config.recipe import Recipe

TINY = ["corpus.sources=[{path: builtin, max_documents: 80}]", "corpus.validation_fraction=0.1",
        "tokenizer.vocab_size=600", "data.max_seq_length=64", "data.dupe_factor=1",
        "model.hidden_size=64", "model.num_hidden_layers=2", "model.num_attention_heads=2",
        "model.intermediate_size=128", "train.batch_size=16", "train.max_steps=40", "train.warmup_steps=4",
        "train.learning_rate=3e-3", "train.log_every=1", "train.eval_every=20", "train.save_every=10",
        "train.eval_batches=8"]


def classify_config(*sets):
    """The `finetune` section of the shipped classify recipe with --set items `sets`."""
    from bertcli.config.recipe import load_recipe

    return load_recipe("classify", list(sets)).finetune


def numeric_fields(cls=Recipe, prefix=""):
    """(key path for --set, field, base type) of every int / float field reachable from Recipe;
    list sections by their first element, mapping sections by an example key."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        # `Optional[X]` and `X | None` (types.UnionType on Python >= 3.10) alike
        base = args[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) and args else tp
        origin = typing.get_origin(base)
        if dataclasses.is_dataclass(base):
            yield from numeric_fields(base, f"{prefix}{f.name}.")
        elif origin is list and dataclasses.is_dataclass(typing.get_args(base)[0]):
            yield from ((f"{prefix}{f.name}[0].{p}", fld, t) for p, fld, t in
                        numeric_fields(typing.get_args(base)[0], ""))
        elif origin is dict and dataclasses.is_dataclass(typing.get_args(base)[1]):
            yield from numeric_fields(typing.get_args(base)[1], f"{prefix}{f.name}.rte.")
        elif base in (int, float):
            yield f"{prefix}{f.name}", f, base


FIELDS = list(numeric_fields())


# What a list section's element needs besides the key under test.
LIST_BASE = {"corpus.sources": "path: builtin", "train.phases": "name: p"}


def set_items(path: str, value: str) -> list[str]:
    """--set items that put `value` at `path` (list elements are set through the whole list)."""
    if "[0]." in path:
        section, key = path.split("[0].")
        return [f"{section}=[{{{LIST_BASE[section]}, {key}: {value}}}]"]
    return [f"{path}={value}"]
