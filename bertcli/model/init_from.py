"""Continued pretraining: start a run from a checkpoint (`model.init_from`) instead of random weights.

    resolve_init_from(recipe)   at recipe load (recipe.resolve), before any work: the model keys
                                come from the checkpoint's config.json; a recipe key given in the
                                file or by --set that contradicts it is one UserError naming both
                                values. Dropout, initializer_range and classifier_pooling may
                                differ on purpose; max_position_embeddings may grow. The tokenizer
                                keys (kind, special tokens) are the checkpoint tokenizer's.
    init_model(recipe, tok)     the PreTrainingModel: every tensor of the checkpoint the model has,
                                heads it lacks initialized as a new model's, a grown position table
                                and an extended vocabulary filled in -> (model, notes for the summary)
    weights_sha256(path)        what `--resume` compares (a checkpoint replaced under the same path)

Nothing here imports torch at module level: recipe loading calls the first function.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from bertcli.core.errors import UserError
from bertcli.model.hf import read_config, weight_files
from bertcli.tokenization.extend import init_new_rows

# ModelConfig keys that the checkpoint fixes (the shapes and the computation).
SHAPE_KEYS = ("family", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "embedding_size", "hidden_act", "type_vocab_size", "layer_norm_eps", "sharing", "num_hidden_groups",
              "norm", "local_attention", "global_attn_every_n_layers", "global_rope_theta", "local_rope_theta")
# Keys that may change on purpose: the recipe's value when it gives one, else the checkpoint's.
FREE_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "initializer_range",
             "classifier_pooling")
# The tokenizer files a checkpoint can carry that bertcli reads, and the ones it cannot.
READABLE = ("tokenizer.json", "vocab.txt")
SENTENCEPIECE = ("spiece.model", "sentencepiece.bpe.model")
_KINDS = {"WordPiece": "wordpiece", "BPE": "bpe", "Unigram": "unigram"}


def _given(recipe, section: str) -> frozenset:
    """Keys the recipe file or --set gave in `section` (all of them for a recipe built in Python)."""
    keys = getattr(recipe, "given_keys", None)
    return keys.get(section, frozenset()) if keys is not None else frozenset()


def resolve_init_from(recipe) -> None:
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


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
    return a == b


def tokenizer_source(path: Path) -> tuple[str, bool | None]:
    """(kind, lowercase or None) of a checkpoint's tokenizer, from its files alone; a UserError
    for one bertcli cannot read (sentencepiece only, none, a malformed tokenizer.json)."""
    path = Path(path)
    config: dict = {}
    cfg_file = path / "tokenizer_config.json"
    if cfg_file.is_file():
        try:
            config = json.loads(cfg_file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"tokenizer_config.json is not valid JSON: {e}", where=str(cfg_file))
        if not isinstance(config, dict):
            raise UserError("tokenizer_config.json does not hold a JSON object", where=str(cfg_file))
    lowercase = config.get("do_lower_case") if isinstance(config.get("do_lower_case"), bool) else None
    if (path / "tokenizer.json").is_file():
        try:
            obj = json.loads((path / "tokenizer.json").read_text(encoding="utf-8"))
            kind = _KINDS.get(obj["model"]["type"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
            raise UserError(f"the checkpoint's tokenizer.json cannot be read ({type(e).__name__}: {e})",
                            where=str(path / "tokenizer.json"),
                            fix="save the tokenizer again with transformers (AutoTokenizer.from_pretrained(DIR)"
                                ".save_pretrained(DIR)) or with `bertcli tokenize`")
        if kind is None:
            raise UserError(f"the checkpoint's tokenizer is a {obj['model'].get('type')!r} model; bertcli reads "
                            "WordPiece, BPE and Unigram tokenizers", where=str(path / "tokenizer.json"))
        return kind, lowercase
    if (path / "vocab.txt").is_file():
        return "wordpiece", lowercase if lowercase is not None else True
    spm = [n for n in SENTENCEPIECE if (path / n).is_file()]
    if spm:
        raise UserError(f"the checkpoint's tokenizer is a sentencepiece model ({spm[0]}) without tokenizer.json, "
                        "which bertcli cannot read", where=str(path / spm[0]),
                        fix=f"convert it once with transformers (needs `pip install sentencepiece protobuf`): python -c "
                            f"\"from transformers import AutoTokenizer as T; T.from_pretrained('{path}')"
                            f".save_pretrained('{path}')\" (writes tokenizer.json)")
    raise UserError(f"the checkpoint {path} has no tokenizer (tokenizer.json, or vocab.txt for WordPiece)",
                    where=str(path), fix="save the model's tokenizer into the directory (tokenizer.save_pretrained(DIR))")


def tokenizer_fingerprint(path: Path) -> str:
    """sha256 of the checkpoint's tokenizer files: part of the adopt stage's cache key."""
    h = hashlib.sha256()
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        f = Path(path) / name
        if f.is_file():
            h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def weights_sha256(path: Path) -> str:
    """sha256 of config.json and the weight files of a checkpoint (read, never written to)."""
    h = hashlib.sha256((Path(path) / "config.json").read_bytes())
    for f in weight_files(Path(path)):
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------- weights
def init_model(recipe, tok, extension=None):
    """The PreTrainingModel of `recipe.model.init_from`, on the CPU in train mode, with the recipe's
    dropout. `tok`: the adopted tokenizer (TokenizerInfo); `extension`: the tokenizer stage's
    new tokens (bertcli.tokenization.extend.Extension) or None. Returns (model, notes)."""
    import torch

    from bertcli.model.checkpoint import load_checkpoint
    from bertcli.model.heads import PreTrainingModel

    src = Path(recipe.model.init_from)
    loaded, report = load_checkpoint(src, "pretraining")
    c0, m = loaded.config, recipe.model
    vocab = c0.vocab_size
    if extension is not None and extension.vocab_size > vocab:
        vocab = extension.vocab_size
    if tok.vocab_size > vocab:
        raise UserError(f"the adopted tokenizer has {tok.vocab_size:,} tokens, the checkpoint {vocab:,} embeddings",
                        where=str(src), fix="the tokenizer files do not belong to this model")
    c = c0.replace(hidden_dropout_prob=m.hidden_dropout_prob, attention_probs_dropout_prob=m.attention_probs_dropout_prob,
                   classifier_dropout=m.classifier_dropout, initializer_range=m.initializer_range,
                   classifier_pooling=m.classifier_pooling, max_position_embeddings=m.max_position_embeddings,
                   vocab_size=vocab)
    model = PreTrainingModel(c)          # fresh heads as a new model's; every loaded tensor is copied over
    notes = [f"started from {src} ({c0.family}, {c0.num_hidden_layers} layers, H {c0.hidden_size}, "
             f"{c0.vocab_size:,} embeddings)"]
    if report.fresh:
        notes.append("initialized as a new model's (not in the checkpoint): " + ", ".join(report.fresh))
    notes += report.notes
    target, source = model.state_dict(), loaded.state_dict()
    with torch.no_grad():
        for name, t in source.items():
            dst = target[name]
            if dst.shape == t.shape:
                dst.copy_(t)
            elif name == "encoder.embeddings.position.weight":
                notes.append(grow_positions(dst, t, c.position_offset))
            elif name in ("encoder.embeddings.word.weight", "mlm.bias"):
                dst[: t.shape[0]].copy_(t)
            else:
                raise RuntimeError(f"{name}: {tuple(t.shape)} -> {tuple(dst.shape)}")
        if extension is not None and extension.tokens:
            notes.append(init_new_rows(model, extension, c0.vocab_size))
    if c.max_position_embeddings > c0.max_position_embeddings and c.spec.positions == "rotary":
        notes.append(f"max_position_embeddings {c0.max_position_embeddings:,} -> {c.max_position_embeddings:,} "
                     "(rotary positions: no table to grow)")
    del loaded
    return model.train(), notes


def grow_positions(dst, src, offset: int) -> str:
    """A longer learned position table [P', E] from [P, E]: the old rows kept, the new ones
    copies of the old usable rows (those after the `offset` reserved ones) in order, repeated,
    as RoBERTa-long / Longformer (Beltagy et al. 2020, section 5) did."""
    old, new = src.shape[0], dst.shape[0]
    dst[:old].copy_(src)
    usable = src[offset:]
    for start in range(old, new, usable.shape[0]):
        n = min(usable.shape[0], new - start)
        dst[start:start + n].copy_(usable[:n])
    return (f"max_position_embeddings {old:,} -> {new:,}: the new rows are copies of the {usable.shape[0]:,} "
            f"learned positions, repeated (as RoBERTa-long / Longformer)")
