"""transformers' config.json for every family, read and written from the family specs.

`to_hf_config` writes the spec's `hf_keys` (bertcli field -> transformers key), its fixed keys
and a `bertcli` block for what transformers cannot express; `from_hf_config` reads any
transformers directory of a known model_type back, with transformers' defaults for missing keys.
Parameter names are in bertcli.model.names (re-exported here).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertcli import __version__
from bertcli.config.families import FAMILIES, FamilySpec, spec_for_model_type
from bertcli.config.model import EncoderConfig
from bertcli.core.errors import UserError
from bertcli.core.paths import checkpoint_problem
from bertcli.model.names import decoder_keys, encoder_prefixes, is_encoder_param, weight_map  # noqa: F401 (re-exported)

# Heads whose config.json carries id2label / label2id.
LABELLED_HEADS = ("classification", "token")
# Per-token fine-tuning heads (model/task_heads.py): their transformers names are the spec's
# names.token_classifier / names.qa; transformers builds them without the pooler.
TOKEN_HEADS = ("token", "qa")


def uses_pooler(head: str) -> bool:
    """transformers builds *ForTokenClassification / *ForQuestionAnswering without the pooler."""
    return head not in TOKEN_HEADS


# transformers activations that are numerically bertcli's two.
ACT_ALIASES = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new"}


# --------------------------------------------------------------------------------------- config
def to_hf_config(c: EncoderConfig, head: str, dtype: str = "float32") -> dict[str, Any]:
    """config.json for `c`: transformers' keys for the model type, plus a `bertcli` block that
    keeps what transformers cannot express (pre-LN, sharing outside ALBERT, E != H in BERT)."""
    spec = c.spec
    d: dict[str, Any] = {"architectures": [spec.architectures[head]], "model_type": spec.model_type}
    d.update({key: getattr(c, name) for name, key in spec.hf_keys.items()})
    d.update({key: getattr(c, name) for key, name in spec.hf_also.items()})
    d.update(spec.hf_fixed)
    d.update({key: spec.token_ids[role] for key, role in spec.hf_token_ids})
    d.update(tie_word_embeddings=True, dtype=dtype, torch_dtype=dtype)  # transformers 4 reads torch_dtype
    if spec.hf_groups:
        d["num_hidden_groups"] = hf_groups(c)
    if spec.attention == "alternating":
        d.update(local_attention=c.local_attention, global_attn_every_n_layers=c.global_attn_every_n_layers,
                 layer_types=[layer_type(c, i) for i in range(c.num_hidden_layers)])
    if spec.positions == "rotary":
        d.update(global_rope_theta=c.global_rope_theta, local_rope_theta=c.local_rope_theta,
                 rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": c.global_rope_theta},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": c.local_rope_theta}})
    if spec.task_head == "prediction_head":
        d["classifier_pooling"] = c.classifier_pooling
    if head in LABELLED_HEADS:
        assert c.labels is not None, "a labelled head's EncoderConfig is built with its labels"
        d["id2label"] = {str(i): name for i, name in enumerate(c.labels)}
        d["label2id"] = {name: i for i, name in enumerate(c.labels)}
        if head == "classification":
            d["problem_type"] = "regression" if len(c.labels) == 1 else "single_label_classification"
    d["bertcli"] = {"version": __version__, "norm": c.norm, "sharing": c.sharing,
                    "num_hidden_groups": c.num_hidden_groups, "embedding_size": c.embedding_size}
    return d


def hf_groups(c: EncoderConfig) -> int:
    """ALBERT layer groups as transformers stores them: ours when every sublayer of a group is
    shared, else one group per layer (no sharing, or unrolled attention/ffn-only sharing)."""
    return c.num_hidden_groups if c.sharing == "all" else c.num_hidden_layers


def layer_type(c: EncoderConfig, layer: int) -> str:
    """transformers' name of layer `layer`'s attention: full_attention or sliding_attention."""
    return "full_attention" if c.is_global(layer) else "sliding_attention"


def from_hf_config(d: dict[str, Any], where: str, head: str) -> EncoderConfig:
    """EncoderConfig from a transformers config.json dict (any model type of a known family).
    A value of the wrong kind (a string for a size, a zero divisor, id2label keys that are not
    numbers) is a UserError naming the file, not a traceback."""
    try:
        return _from_hf_config(d, where, head)
    except (TypeError, ValueError, ZeroDivisionError, AttributeError, KeyError) as e:
        raise UserError(f"config.json holds a value bertcli cannot read ({type(e).__name__}: {e})", where=where,
                        fix="compare it with a config.json that transformers wrote for the same model type") from e


def _from_hf_config(d: dict[str, Any], where: str, head: str) -> EncoderConfig:
    spec = spec_for_model_type(d.get("model_type"))
    if spec is None:
        raise UserError(f"unsupported model_type {d.get('model_type')!r} in config.json", where=where,
                        fix="bertcli loads " + ", ".join(s.model_type for s in FAMILIES.values()) + " checkpoints")
    # Any, not Any | None: a missing key fails in int()/float() below as a UserError.
    get: Callable[..., Any] = {**spec.hf_defaults, **{k: v for k, v in d.items() if v is not None}}.get
    extra = d.get("bertcli") or {}
    _check_fixed(spec, get, where)
    act = ACT_ALIASES.get(get(spec.hf_keys["hidden_act"]))
    if act is None:
        raise UserError(f"{spec.hf_keys['hidden_act']} {get(spec.hf_keys['hidden_act'])!r} is not supported",
                        where=where, fix="bertcli implements gelu (exact) and gelu_new (tanh approximation)")
    value: dict[str, Any] = {name: get(key) for name, key in spec.hf_keys.items()}
    layers = int(value["num_hidden_layers"])
    sharing, groups = "none", 1
    if spec.hf_groups:
        hf = int(get("num_hidden_groups"))
        if hf < 1 or layers % hf:
            raise UserError(f"num_hidden_layers {layers} is not a multiple of num_hidden_groups {hf}", where=where)
        sharing = "none" if hf == layers and layers > 1 else "all"
        groups = 1 if sharing == "none" else hf
    rotary = spec.positions == "rotary"
    labels = None
    if head in LABELLED_HEADS and d.get("id2label"):
        id2label = {int(k): str(v) for k, v in d["id2label"].items()}
        labels = tuple(id2label[i] for i in sorted(id2label))
    c = EncoderConfig(
        family=spec.name,
        vocab_size=int(value["vocab_size"]),
        hidden_size=int(value["hidden_size"]),
        num_hidden_layers=layers,
        num_attention_heads=int(value["num_attention_heads"]),
        intermediate_size=int(value["intermediate_size"]),
        embedding_size=int(extra.get("embedding_size", value.get("embedding_size", value["hidden_size"]))),
        hidden_act=act,
        hidden_dropout_prob=float(value["hidden_dropout_prob"]),
        attention_probs_dropout_prob=float(value["attention_probs_dropout_prob"]),
        max_position_embeddings=int(value["max_position_embeddings"]),
        type_vocab_size=int(value.get("type_vocab_size", 1)),
        layer_norm_eps=float(value["layer_norm_eps"]),
        initializer_range=float(value["initializer_range"]),
        sharing=extra.get("sharing", sharing),
        num_hidden_groups=int(extra.get("num_hidden_groups", groups)),
        norm=extra.get("norm", spec.norm),
        classifier_dropout=float(value["classifier_dropout"] if value.get("classifier_dropout") is not None
                                 else value["hidden_dropout_prob"]),
        pad_token_id=int(value["pad_token_id"]),
        labels=labels,
        **(_attention_pattern(get, layers, where) if spec.attention == "alternating" else {}),
        **(_rope_thetas(get) if rotary else {}),
        **({"classifier_pooling": get("classifier_pooling", "cls")} if spec.task_head == "prediction_head" else {}),
    )
    return c.validate(where)


def _check_fixed(spec: FamilySpec, get, where: str) -> None:
    """Keys whose other values bertcli does not implement (a decoder, relative positions, biases
    where the family has none...)."""
    for key, want in spec.hf_fixed.items():
        have = get(key, want)
        if have != want:
            raise UserError(f"{key} {have!r} is not supported in a {spec.model_type} checkpoint", where=where,
                            fix=f"bertcli implements {spec.model_type} with {key}: {json.dumps(want)}")


def _attention_pattern(get, layers: int, where: str) -> dict[str, Any]:  # EncoderConfig **kwargs
    """Window and global period from `layer_types` (transformers 5) or `global_attn_every_n_layers`."""
    every = int(get("global_attn_every_n_layers", 3))
    types = get("layer_types")
    if types is not None:
        globals_ = [i for i, t in enumerate(types) if t == "full_attention"]
        every = globals_[1] - globals_[0] if len(globals_) > 1 else max(layers, 1)
        want = ["full_attention" if i % every == 0 else "sliding_attention" for i in range(layers)]
        if list(types) != want or (globals_ and globals_[0] != 0):
            raise UserError("layer_types is not a global layer every n layers starting at layer 0", where=where,
                            fix="bertcli implements ModernBERT's pattern (global_attn_every_n_layers)")
    return {"local_attention": int(get("local_attention", 128)), "global_attn_every_n_layers": every}


def _rope_thetas(get) -> dict[str, Any]:  # EncoderConfig **kwargs
    rope = get("rope_parameters") or {}
    full, sliding = rope.get("full_attention") or {}, rope.get("sliding_attention") or {}
    return {"global_rope_theta": float(full.get("rope_theta", get("global_rope_theta", 160000.0))),
            "local_rope_theta": float(sliding.get("rope_theta", get("local_rope_theta", 10000.0)))}


def transformers_caveats(c: EncoderConfig) -> list[str]:
    """What transformers cannot reproduce from a checkpoint of `c` (empty: it runs identically)."""
    spec, notes = c.spec, []
    if c.norm != spec.norm:
        notes.append(f"{c.norm}-LN: transformers has no {c.norm}-LN {spec.model_type}; it would load these "
                     f"weights into {spec.norm}-LN layers and compute different outputs (bertcli reads the "
                     "`bertcli.norm` key and runs it correctly)")
    if c.embedding_size != c.hidden_size and not spec.always_project:
        notes.append(f"embedding_size {c.embedding_size} != hidden_size {c.hidden_size} in a {c.family} "
                     f"model: transformers cannot load it (only {_factorizing()} factorizes embeddings)")
    if spec.hf_dropout_elsewhere and (c.hidden_dropout_prob or c.attention_probs_dropout_prob):
        notes.append(f"dropout: transformers' {spec.model_type} applies its dropouts at other places than "
                     "bertcli (outputs are the same in eval mode; training there would differ slightly)")
    if c.sharing != "none" and (not spec.hf_groups or c.sharing != "all"):
        notes.append(f"{c.sharing} cross-layer sharing in a {c.family} model is saved unrolled (one copy "
                     "per layer): transformers computes the same outputs but would train the copies apart")
    return notes


def _factorizing() -> str:
    return " / ".join(s.model_type.upper() for s in FAMILIES.values() if s.always_project)


def read_config(directory: str | Path, head: str = "pretraining") -> EncoderConfig:
    """The EncoderConfig of a checkpoint directory (config.json only)."""
    directory = Path(directory)
    path = directory / "config.json"
    problem = checkpoint_problem(directory)  # a file, a run directory, a missing final/: said so
    if problem is not None:
        raise problem
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"config.json is not valid JSON ({e})", where=str(path))
    if not isinstance(data, dict):
        raise UserError("config.json must hold a JSON object", where=str(path))
    return from_hf_config(data, str(path), head)


def confined_shard(directory: Path, name: object, index: Path) -> Path:
    """The shard file `name` of an index, refused unless it is a relative path that resolves
    (symlinks followed) inside `directory`: an index must not make bertcli read other files."""
    if not isinstance(name, str) or not name:
        raise UserError(f"the safetensors index names a shard {name!r} that is not a file name", where=str(index))
    root = Path(directory).resolve()
    path = Path(name)
    if path.is_absolute() or ".." in path.parts:
        raise UserError(f"the safetensors index names a shard outside the checkpoint directory: {name!r}",
                        where=str(index), fix="shards must be files inside the checkpoint directory, named relative to it")
    full = (Path(directory) / path).resolve()
    cache = hf_cache_root(Path(directory))
    if not full.is_relative_to(root) and not (cache is not None and full.is_relative_to(cache)):
        raise UserError(f"shard {name!r} resolves to {full}, outside the checkpoint directory {root} "
                        "(a symbolic link)", where=str(index),
                        fix="copy the shard into the checkpoint directory instead of linking to it")
    return Path(directory) / path


def hf_cache_root(directory: Path) -> Path | None:
    """The `models--ORG--NAME` folder of the Hugging Face cache when `directory` is one of its
    `snapshots/REVISION` folders (whose files are symlinks into `../../blobs/`), else None."""
    d = Path(directory).resolve()
    root = d.parent.parent
    if d.parent.name == "snapshots" and root.name.startswith("models--") and (root / "blobs").is_dir():
        return root.resolve()
    return None


def weight_files(directory: Path) -> list[Path]:
    """The safetensors file(s) of a checkpoint; a clear error for pickles or nothing at all."""
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.is_file():
        return [single]
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"unreadable safetensors index ({e!r})", where=str(index))
        return [confined_shard(directory, shard, index) for shard in shards]
    if list(directory.glob("pytorch_model*.bin")):
        raise UserError(
            "the checkpoint has only pytorch_model.bin, a pickle, which bertcli never loads "
            "(unpickling can run arbitrary code)", where=str(directory),
            fix=f"convert it once with transformers: python -c \"from transformers import "
                f"AutoModelForPreTraining as M; M.from_pretrained('{directory}').save_pretrained('{directory}')\" "
                "(writes model.safetensors)")
    raise UserError(f"no model.safetensors in {directory}", where=str(directory),
                    fix="a checkpoint needs its weights as model.safetensors (transformers' save_pretrained writes it)")


