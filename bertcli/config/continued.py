"""Continued pretraining at recipe load: `model.init_from` fills the model (and tokenizer) keys
from the checkpoint's config.json and tokenizer files, before recipe.resolve fills the family
defaults. A recipe key given in the file or by --set that contradicts the checkpoint is one
UserError naming both values. Dropout, initializer_range and classifier_pooling may differ on
purpose; max_position_embeddings may grow. The tokenizer keys (kind, special tokens) are the
checkpoint tokenizer's. The weights are loaded later, by bertcli.model.init_from.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertcli.config.checkpoint import read_config, rtd_generator, tokenizer_source, weight_files
from bertcli.core.errors import UserError

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe

# ModelConfig keys that the checkpoint fixes (the shapes and the computation).
SHAPE_KEYS = ("family", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "embedding_size", "hidden_act", "type_vocab_size", "layer_norm_eps", "sharing", "num_hidden_groups",
              "norm", "local_attention", "global_attn_every_n_layers", "global_rope_theta", "local_rope_theta")
# Keys that may change on purpose: the recipe's value when it gives one, else the checkpoint's.
FREE_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "initializer_range",
             "classifier_pooling")


def _given(recipe: Recipe, section: str) -> frozenset:
    """Keys the recipe file or --set gave in `section` (all of them for a recipe built in Python)."""
    keys = getattr(recipe, "given_keys", None)
    return keys.get(section, frozenset()) if keys is not None else frozenset()


def resolve_init_from(recipe: Recipe) -> None:
    """Fill the model (and tokenizer) keys from `model.init_from`'s config.json; refuse
    `tokenizer.extend` without it. In place, before recipe.resolve fills family defaults."""
    m, t = recipe.model, recipe.tokenizer
    if m.init_from is None:
        if t.extend is not None:
            raise UserError("tokenizer.extend adds tokens to an adopted tokenizer, but this recipe trains its "
                            "tokenizer (no model.init_from)", where=f"{recipe.source}: tokenizer.extend",
                            fix="start from a checkpoint (model.init_from: DIR or --init-from DIR), or set "
                                "tokenizer.vocab_size instead to train a larger vocabulary")
        return

    path = Path(m.init_from)
    where = f"{recipe.source}: model.init_from"
    if not path.is_dir():
        raise UserError(f"model.init_from {path} is not a directory", where=where,
                        fix="give a checkpoint directory written by bertcli or transformers' save_pretrained")
    c = read_config(path)
    weight_files(path)                      # weights there, as safetensors (a pickle-only checkpoint says how)
    given = _given(recipe, "model")
    ckpt_values = {k: getattr(c, k) for k in SHAPE_KEYS + FREE_KEYS + ("max_position_embeddings",)}
    ckpt_values["family"] = c.family
    clash = [(k, getattr(m, k), ckpt_values[k]) for k in SHAPE_KEYS
             if k in given and getattr(m, k) is not None and not _same(getattr(m, k), ckpt_values[k])]
    if "vocab_size" in given and m.vocab_size is not None and m.vocab_size != c.vocab_size:
        clash.append(("vocab_size", m.vocab_size, c.vocab_size))
    mpe = m.max_position_embeddings
    if "max_position_embeddings" in given and mpe is not None and mpe < c.max_position_embeddings:
        clash.append(("max_position_embeddings", mpe, c.max_position_embeddings))
    if clash:
        shown = "; ".join(f"model.{k} is {a!r} in the recipe, {b!r} in the checkpoint" for k, a, b in clash)
        raise UserError(f"the recipe contradicts the checkpoint model.init_from {path}: {shown}",
                        where=f"{recipe.source}: model", fix="remove those keys from the recipe (with init_from the "
                        "model's shape is the checkpoint's; only dropout may change and max_position_embeddings grow)")
    for k in SHAPE_KEYS:
        setattr(m, k, ckpt_values[k])
    for k in FREE_KEYS:
        if k not in given or getattr(m, k) is None:
            setattr(m, k, ckpt_values[k])
    if "max_position_embeddings" not in given or mpe is None:
        m.max_position_embeddings = c.max_position_embeddings
    m.vocab_size = None                     # follows the checkpoint (and tokenizer.extend), not a recipe key
    kind, lowercase = tokenizer_source(path)
    tgiven = _given(recipe, "tokenizer")
    for key, have in (("kind", kind), ("special_tokens", c.family)):
        if key in tgiven and getattr(t, key) is not None and getattr(t, key) != have:
            raise UserError(f"tokenizer.{key} is {getattr(t, key)!r} in the recipe, but the tokenizer adopted from "
                            f"{path} is {have!r}", where=f"{recipe.source}: tokenizer.{key}",
                            fix="remove the key: with model.init_from the checkpoint's tokenizer is adopted, not trained")
        setattr(t, key, have)
    if lowercase is not None and "lowercase" not in tgiven:
        t.lowercase = lowercase
    gen_dir = rtd_generator(path)
    if recipe.train.objective == "rtd" and gen_dir is not None:
        _generator_from(recipe, gen_dir)


def _generator_from(recipe: Recipe, gen_dir: Path) -> None:
    """train.objective rtd from an RTD checkpoint with generator/: model.generator takes that
    generator's shape (its weights are restored); a recipe value that contradicts it is refused.
    Without generator/, the generator starts fresh at the configured shape."""
    g, want = read_config(gen_dir), recipe.model.generator
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    clash = [(k, getattr(want, k), getattr(g, k)) for k in keys if getattr(want, k) not in (None, getattr(g, k))]
    if clash:
        shown = "; ".join(f"model.generator.{k} is {a!r} in the recipe, {b!r} in {gen_dir}" for k, a, b in clash)
        raise UserError(f"the recipe contradicts the generator it continues: {shown}",
                        where=f"{recipe.source}: model.generator",
                        fix="remove those keys (the generator keeps its shape), or start from the discriminator alone "
                            "(a directory without generator/: the generator then starts fresh)")
    for k in keys:
        setattr(want, k, getattr(g, k))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
    return a == b
