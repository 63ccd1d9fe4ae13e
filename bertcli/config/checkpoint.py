"""A checkpoint directory described from its files, without loading a weight: config.json as an
EncoderConfig, the safetensors files it holds, its tokenizer's kind.

Everything that must judge a checkpoint before any work reads it through this module: recipe
loading (`model.init_from`), the stage keys (the adopted tokenizer's fingerprint), the tokenizer
stage's "adopt", fine-tuning's checks before data are read. bertcli.model.hf writes config.json
for every family and builds on the reader here; bertcli.model.checkpoint loads the weights.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertcli.config.families import DISCRIMINATOR_ARCHITECTURES, FAMILIES, LAYOUTS, FamilySpec, spec_for_model_type
from bertcli.config.model import EncoderConfig
from bertcli.core import jsonout
from bertcli.core.errors import UserError
from bertcli.core.paths import checkpoint_problem

# bertcli's own file beside a discriminator written in a family's own layout (no transformers
# class there has the replaced-token head): the head under transformers' Electra names
RTD_HEAD = "rtd_head.safetensors"
# Heads whose config.json carries id2label / label2id.
LABELLED_HEADS = ("classification", "token")
# transformers activations that are numerically bertcli's two.
ACT_ALIASES = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new"}
# The tokenizer files a checkpoint can carry that bertcli reads, and the ones it cannot.
READABLE = ("tokenizer.json", "vocab.txt")
SENTENCEPIECE = ("spiece.model", "sentencepiece.bpe.model")
_KINDS = {"WordPiece": "wordpiece", "BPE": "bpe", "Unigram": "unigram"}


# --------------------------------------------------------------------------------------- config.json
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
                        fix="bertcli loads " + ", ".join(s.model_type for s in (*FAMILIES.values(), *LAYOUTS.values()))
                            + " checkpoints")
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
        layout=spec.layout,
    )
    return c.validate(where)


def _check_fixed(spec: FamilySpec, get, where: str) -> None:
    """Keys whose other values bertcli does not implement (a decoder, relative positions, biases
    where the family has none...)."""
    for key, want in spec.hf_fixed.items():
        have = get(key, want)
        if have != want:
            raise UserError(f"{key} {have!r} is not supported in a {spec.model_type} checkpoint", where=where,
                            fix=f"bertcli implements {spec.model_type} with {key}: {jsonout.quote(want)}")


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


def read_config(directory: str | Path, head: str = "pretraining") -> EncoderConfig:
    """The EncoderConfig of a checkpoint directory (config.json only)."""
    directory = Path(directory)
    path = directory / "config.json"
    problem = checkpoint_problem(directory)  # a file, a run directory, a missing final/: said so
    if problem is not None:
        raise problem
    return from_hf_config(json_object(path), str(path), head)


def is_discriminator(directory: str | Path, architecture: str) -> bool:
    """An RTD discriminator: ElectraForPreTraining, or a family's encoder with bertcli's RTD_HEAD
    beside it. Its encoder is what features / export / predict read; it has no MLM head."""
    return architecture in DISCRIMINATOR_ARCHITECTURES or (Path(directory) / RTD_HEAD).is_file()


def rtd_generator(directory: str | Path) -> Path | None:
    """The generator/ beside an RTD discriminator (pretrain with train.objective: rtd writes one
    into final/ and every step checkpoint), or None: where MLM figures of the run come from."""
    g = Path(directory) / "generator"
    return g if (g / "config.json").is_file() else None


def json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path` (config.json, tokenizer_config.json); one message for a file
    that is not UTF-8 JSON or holds something else."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path.name} is not valid JSON ({e})", where=str(path))
    if not isinstance(data, dict):
        raise UserError(f"{path.name} must hold a JSON object", where=str(path))
    return data


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


# --------------------------------------------------------------------------------------- tokenizer
def tokenizer_source(path: Path) -> tuple[str, bool | None]:
    """(kind, lowercase or None) of a checkpoint's tokenizer, from its files alone; a UserError
    for one bertcli cannot read (sentencepiece only, none, a malformed tokenizer.json)."""
    path = Path(path)
    cfg_file = path / "tokenizer_config.json"
    config = json_object(cfg_file) if cfg_file.is_file() else {}
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
