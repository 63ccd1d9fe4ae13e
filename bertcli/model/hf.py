"""transformers' config keys and parameter names for the three families.

`weight_map` pairs every bertcli parameter with the transformers name(s) it is stored under.
One bertcli tensor can be several transformers tensors: the fused Q/K/V projection is saved as
query, key and value (concatenated on dim 0), and a sublayer shared across layers is saved once
per layer that uses it whenever transformers cannot express the sharing (BERT/RoBERTa, ALBERT's
attention- or ffn-only sharing): unrolled copies give transformers exactly bertcli's outputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from bertcli import __version__
from bertcli.errors import UserError
from bertcli.model.config import FAMILIES, EncoderConfig

BASE = {"bert": "bert.", "roberta": "roberta.", "albert": "albert."}
ARCHITECTURES = {
    ("bert", "pretraining"): "BertForPreTraining",
    ("roberta", "pretraining"): "RobertaForMaskedLM",
    ("albert", "pretraining"): "AlbertForPreTraining",
    ("bert", "classification"): "BertForSequenceClassification",
    ("roberta", "classification"): "RobertaForSequenceClassification",
    ("albert", "classification"): "AlbertForSequenceClassification",
}
@dataclass(frozen=True)
class HeadSpec:
    """A per-token fine-tuning head (model/task_heads.py) as transformers names it."""

    architecture: str        # class suffix after the family's prefix (Bert, Roberta, Albert)
    params: tuple[str, ...]  # bertcli module names = transformers names (.weight, .bias)


HEAD_SPECS = {
    "token": HeadSpec("ForTokenClassification", ("classifier",)),
    "qa": HeadSpec("ForQuestionAnswering", ("qa_outputs",)),
}
CLASS_PREFIX = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert"}
# Heads whose config.json carries id2label / label2id; heads built on the pooler.
LABELLED_HEADS = ("classification", "token")


def uses_pooler(head: str) -> bool:
    """transformers builds *ForTokenClassification / *ForQuestionAnswering without the pooler."""
    return head not in HEAD_SPECS


def architecture_name(family: str, head: str) -> str:
    if head in HEAD_SPECS:
        return CLASS_PREFIX[family] + HEAD_SPECS[head].architecture
    return ARCHITECTURES[(family, head)]


# transformers' defaults for keys an older config.json may leave out.
HF_DEFAULTS = {
    "bert": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
                 initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=0),
    "roberta": dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                    attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
                    initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=1),
    "albert": dict(vocab_size=30000, embedding_size=128, hidden_size=4096, num_hidden_layers=12,
                   num_attention_heads=64, intermediate_size=16384, hidden_act="gelu_new",
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=512,
                   type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=0,
                   num_hidden_groups=1, inner_group_num=1, classifier_dropout_prob=0.1),
}
# transformers activations that are numerically bertcli's two.
ACT_ALIASES = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new"}


# --------------------------------------------------------------------------------------- config
def to_hf_config(c: EncoderConfig, head: str, dtype: str = "float32") -> dict[str, Any]:
    """config.json for `c`: transformers' keys for the model type, plus a `bertcli` block that
    keeps what transformers cannot express (pre-LN, sharing outside ALBERT, E != H in BERT)."""
    d: dict[str, Any] = {
        "architectures": [architecture_name(c.family, head)],
        "model_type": c.family,
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "intermediate_size": c.intermediate_size,
        "hidden_act": c.hidden_act,
        "hidden_dropout_prob": c.hidden_dropout_prob,
        "attention_probs_dropout_prob": c.attention_probs_dropout_prob,
        "max_position_embeddings": c.max_position_embeddings,
        "type_vocab_size": c.type_vocab_size,
        "initializer_range": c.initializer_range,
        "layer_norm_eps": c.layer_norm_eps,
        "pad_token_id": c.pad_token_id,
        "tie_word_embeddings": True,
        "dtype": dtype,
        "torch_dtype": dtype,  # transformers 4 reads this key, 5 reads `dtype`
    }
    if c.family == "albert":
        d.update(embedding_size=c.embedding_size, num_hidden_groups=hf_albert_groups(c), inner_group_num=1,
                 classifier_dropout_prob=c.classifier_dropout, bos_token_id=2, eos_token_id=3)
    else:
        d.update(classifier_dropout=c.classifier_dropout, position_embedding_type="absolute",
                 is_decoder=False, add_cross_attention=False)
        if c.family == "roberta":
            d.update(bos_token_id=0, eos_token_id=2)
    if head in LABELLED_HEADS:
        d["id2label"] = {str(i): name for i, name in enumerate(c.labels)}
        d["label2id"] = {name: i for i, name in enumerate(c.labels)}
    if head == "classification":
        d["problem_type"] = "regression" if len(c.labels) == 1 else "single_label_classification"
    d["bertcli"] = {"version": __version__, "norm": c.norm, "sharing": c.sharing,
                    "num_hidden_groups": c.num_hidden_groups, "embedding_size": c.embedding_size}
    return d


def hf_albert_groups(c: EncoderConfig) -> int:
    """ALBERT layer groups as transformers stores them: ours when every sublayer of a group is
    shared, else one group per layer (no sharing, or unrolled attention/ffn-only sharing)."""
    return c.num_hidden_groups if c.sharing == "all" else c.num_hidden_layers


def from_hf_config(d: dict[str, Any], where: str, head: str) -> EncoderConfig:
    """EncoderConfig from a transformers config.json dict (any bert / roberta / albert one).
    A value of the wrong kind (a string for a size, a zero divisor, id2label keys that are not
    numbers) is a UserError naming the file, not a traceback."""
    try:
        return _from_hf_config(d, where, head)
    except (TypeError, ValueError, ZeroDivisionError, AttributeError) as e:
        raise UserError(f"config.json holds a value bertcli cannot read ({type(e).__name__}: {e})", where=where,
                        fix="compare it with a config.json that transformers wrote for the same model type") from e


def _from_hf_config(d: dict[str, Any], where: str, head: str) -> EncoderConfig:
    family = d.get("model_type")
    if family not in FAMILIES:
        raise UserError(f"unsupported model_type {family!r} in config.json", where=where,
                        fix="bertcli loads bert, roberta and albert checkpoints")
    get = {**HF_DEFAULTS[family], **{k: v for k, v in d.items() if v is not None}}.get
    extra = d.get("bertcli") or {}
    if get("position_embedding_type", "absolute") != "absolute":
        raise UserError(f"position_embedding_type {get('position_embedding_type')!r} is not supported",
                        where=where, fix="bertcli implements learned absolute positions only")
    if get("is_decoder", False) or get("add_cross_attention", False):
        raise UserError("a decoder checkpoint (is_decoder / add_cross_attention)", where=where,
                        fix="bertcli loads bidirectional encoders only")
    act = ACT_ALIASES.get(get("hidden_act"))
    if act is None:
        raise UserError(f"hidden_act {get('hidden_act')!r} is not supported", where=where,
                        fix="bertcli implements gelu (exact) and gelu_new (tanh approximation)")
    layers = int(get("num_hidden_layers"))
    if family == "albert":
        if int(get("inner_group_num")) != 1:
            raise UserError(f"inner_group_num {get('inner_group_num')} is not supported", where=where,
                            fix="bertcli implements ALBERT with one layer per group (inner_group_num 1)")
        hf_groups = int(get("num_hidden_groups"))
        if hf_groups < 1 or layers % hf_groups:
            raise UserError(f"num_hidden_layers {layers} is not a multiple of num_hidden_groups {hf_groups}",
                            where=where)
        sharing = "none" if hf_groups == layers and layers > 1 else "all"
        groups = 1 if sharing == "none" else hf_groups
        embedding_size = int(get("embedding_size"))
        classifier_dropout = get("classifier_dropout_prob")
    else:
        sharing, groups, embedding_size = "none", 1, int(get("hidden_size"))
        classifier_dropout = get("classifier_dropout", get("hidden_dropout_prob"))
    sharing = extra.get("sharing", sharing)
    groups = int(extra.get("num_hidden_groups", groups))
    labels = None
    if head in LABELLED_HEADS and d.get("id2label"):
        id2label = {int(k): str(v) for k, v in d["id2label"].items()}
        labels = tuple(id2label[i] for i in sorted(id2label))
    c = EncoderConfig(
        family=family,
        vocab_size=int(get("vocab_size")),
        hidden_size=int(get("hidden_size")),
        num_hidden_layers=layers,
        num_attention_heads=int(get("num_attention_heads")),
        intermediate_size=int(get("intermediate_size")),
        embedding_size=int(extra.get("embedding_size", embedding_size)),
        hidden_act=act,
        hidden_dropout_prob=float(get("hidden_dropout_prob")),
        attention_probs_dropout_prob=float(get("attention_probs_dropout_prob")),
        max_position_embeddings=int(get("max_position_embeddings")),
        type_vocab_size=int(get("type_vocab_size")),
        layer_norm_eps=float(get("layer_norm_eps")),
        initializer_range=float(get("initializer_range")),
        sharing=sharing,
        num_hidden_groups=groups,
        norm=extra.get("norm", "post"),
        classifier_dropout=float(classifier_dropout),
        pad_token_id=int(get("pad_token_id")),
        labels=labels,
    )
    return c.validate(where)


def transformers_caveats(c: EncoderConfig) -> list[str]:
    """What transformers cannot reproduce from a checkpoint of `c` (empty: it runs identically)."""
    notes = []
    if c.norm == "pre":
        notes.append("pre-LN: transformers has no pre-LN BERT/RoBERTa/ALBERT; it would load these "
                     "weights into post-LN layers and compute different outputs (bertcli reads the "
                     "`bertcli.norm` key and runs it correctly)")
    if c.embedding_size != c.hidden_size and c.family != "albert":
        notes.append(f"embedding_size {c.embedding_size} != hidden_size {c.hidden_size} in a {c.family} "
                     "model: transformers cannot load it (only ALBERT factorizes embeddings)")
    if c.sharing != "none" and (c.family != "albert" or c.sharing != "all"):
        notes.append(f"{c.sharing} cross-layer sharing in a {c.family} model is saved unrolled (one copy "
                     "per layer): transformers computes the same outputs but would train the copies apart")
    return notes


def read_config(directory: Union[str, Path], head: str = "pretraining") -> EncoderConfig:
    """The EncoderConfig of a checkpoint directory (config.json only)."""
    directory = Path(directory)
    path = directory / "config.json"
    if not directory.is_dir():
        raise UserError(f"checkpoint directory {directory} does not exist",
                        fix="give a directory written by bertcli or transformers' save_pretrained")
    if not path.is_file():
        raise UserError(f"no config.json in {directory}", where=str(directory),
                        fix="a checkpoint is a Hugging Face model directory (config.json + model.safetensors)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"config.json is not valid JSON ({e})", where=str(path))
    if not isinstance(data, dict):
        raise UserError("config.json must hold a JSON object", where=str(path))
    return from_hf_config(data, str(path), head)


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
        return [directory / shard for shard in shards]
    if list(directory.glob("pytorch_model*.bin")):
        raise UserError(
            "the checkpoint has only pytorch_model.bin, a pickle, which bertcli never loads "
            "(unpickling can run arbitrary code)", where=str(directory),
            fix=f"convert it once with transformers: python -c \"from transformers import "
                f"AutoModelForPreTraining as M; M.from_pretrained('{directory}').save_pretrained('{directory}')\" "
                "(writes model.safetensors)")
    raise UserError(f"no model.safetensors in {directory}", where=str(directory),
                    fix="a checkpoint needs its weights as model.safetensors (transformers' save_pretrained writes it)")


# ---------------------------------------------------------------------------------- weight names
def _pair(ours: str, theirs: str) -> list[tuple[str, str]]:
    return [(f"{ours}.weight", f"{theirs}.weight"), (f"{ours}.bias", f"{theirs}.bias")]


def weight_map(c: EncoderConfig, head: str, base: Optional[str] = None) -> dict[str, list[tuple[str, ...]]]:
    """bertcli parameter name -> list of copies, each a tuple of transformers names whose tensors
    concatenate (dim 0) to it. `base` is the encoder's prefix (default: the family's, e.g.
    "bert."; "" for encoder-only directories)."""
    b = BASE[c.family] if base is None else base
    m: dict[str, list[tuple[str, ...]]] = {}

    def add(ours: str, *theirs: str) -> None:
        m.setdefault(ours, []).append(tuple(theirs))

    def linear(ours: str, theirs: str) -> None:
        for o, t in _pair(ours, theirs):
            add(o, t)

    emb = "encoder.embeddings"
    add(f"{emb}.word.weight", f"{b}embeddings.word_embeddings.weight")
    add(f"{emb}.position.weight", f"{b}embeddings.position_embeddings.weight")
    add(f"{emb}.token_type.weight", f"{b}embeddings.token_type_embeddings.weight")
    linear(f"{emb}.norm", f"{b}embeddings.LayerNorm")
    if c.has_projection:
        linear("encoder.proj", f"{b}encoder.embedding_hidden_mapping_in")

    if c.family == "albert":
        names = dict(q="attention.query", k="attention.key", v="attention.value", out="attention.dense",
                     norm1="attention.LayerNorm", inp="ffn", out2="ffn_output", norm2="full_layer_layer_norm")
        # "all": one stored layer per group (transformers' layout); otherwise one per layer, unrolled
        slots = [(g, g) for g in range(c.num_hidden_groups)] if c.sharing == "all" else c.layer_plan
        prefixes = [f"{b}encoder.albert_layer_groups.{s}.albert_layers.0." for s in range(len(slots))]
    else:
        names = dict(q="attention.self.query", k="attention.self.key", v="attention.self.value",
                     out="attention.output.dense", norm1="attention.output.LayerNorm",
                     inp="intermediate.dense", out2="output.dense", norm2="output.LayerNorm")
        slots = c.layer_plan
        prefixes = [f"{b}encoder.layer.{i}." for i in range(len(slots))]
    for (a, f), p in zip(slots, prefixes):
        for kind in ("weight", "bias"):
            add(f"encoder.attention.{a}.qkv.{kind}", *(f"{p}{names[x]}.{kind}" for x in "qkv"))
        linear(f"encoder.attention.{a}.out", p + names["out"])
        linear(f"encoder.attention.{a}.norm", p + names["norm1"])
        linear(f"encoder.ffn.{f}.inp", p + names["inp"])
        linear(f"encoder.ffn.{f}.out", p + names["out2"])
        linear(f"encoder.ffn.{f}.norm", p + names["norm2"])
    if c.norm == "pre":
        linear("encoder.final_norm", f"{b}encoder.final_layer_norm")
    if c.has_pooler and uses_pooler(head):
        linear("encoder.pooler", f"{b}pooler" if c.family == "albert" else f"{b}pooler.dense")

    if head == "pretraining":
        mlm, pair = {"bert": ("cls.predictions.", "cls.seq_relationship"), "roberta": ("lm_head.", None),
                     "albert": ("predictions.", "sop_classifier.classifier")}[c.family]
        transform = "cls.predictions.transform." if c.family == "bert" else mlm
        linear("mlm.dense", transform + "dense")
        linear("mlm.norm", transform + ("layer_norm" if c.family == "roberta" else "LayerNorm"))
        add("mlm.bias", mlm + "bias")
        if pair:
            linear("pair", pair)
    elif head in HEAD_SPECS:                      # per-token heads: same names in every family
        for name in HEAD_SPECS[head].params:
            linear(name, name)
    elif c.family == "roberta":
        linear("dense", "classifier.dense")
        linear("classifier", "classifier.out_proj")
    else:
        linear("classifier", "classifier")
    return m


def is_encoder_param(name: str) -> bool:
    """Parameters a checkpoint must have; the others (pooler, heads) may be initialized fresh."""
    return name.startswith("encoder.") and not name.startswith("encoder.pooler.")


def decoder_keys(family: str) -> tuple[str, str]:
    """transformers' names of the tied decoder weight and its bias alias (not saved since v5)."""
    p = {"bert": "cls.predictions.", "roberta": "lm_head.", "albert": "predictions."}[family]
    return p + "decoder.weight", p + "decoder.bias"
