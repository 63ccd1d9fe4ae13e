"""transformers' parameter names of every bertcli parameter, from the family's `HFNames`.

`weight_map` pairs every bertcli parameter with the transformers name(s) it is stored under.
One bertcli tensor can be several transformers tensors: the fused Q/K/V projection is saved as
query, key and value (concatenated on dim 0) where transformers keeps them apart, and a sublayer
shared across layers is saved once per layer that uses it whenever transformers cannot express
the sharing (BERT/RoBERTa, ALBERT's attention- or ffn-only sharing): unrolled copies give
transformers exactly bertcli's outputs.
"""

from __future__ import annotations

from bertcli.config.families import DISCRIMINATOR, FamilySpec
from bertcli.config.model import EncoderConfig

WeightMap = dict[str, list[tuple[str, ...]]]


def weight_map(c: EncoderConfig, head: str, base: str | None = None) -> WeightMap:
    """bertcli parameter name -> list of copies, each a tuple of transformers names whose tensors
    concatenate (dim 0) to it. `base` is the encoder's prefix (default: the family's, e.g.
    "bert."; "" for encoder-only directories)."""
    spec = c.spec
    n = spec.names
    b = spec.hf_prefix if base is None else base
    kinds = ("weight", "bias") if spec.biases else ("weight",)
    m: WeightMap = {}

    def add(ours: str, *theirs: str) -> None:
        m.setdefault(ours, []).append(tuple(theirs))

    def linear(ours: str, theirs: str | None, bias: bool = spec.biases) -> None:
        assert theirs is not None, f"{spec.name} names no transformers tensor for {ours}"
        for kind in ("weight", "bias") if bias else ("weight",):
            add(f"{ours}.{kind}", f"{theirs}.{kind}")

    emb = "encoder.embeddings"
    add(f"{emb}.word.weight", f"{b}{n.word}.weight")
    if spec.positions != "rotary":
        add(f"{emb}.position.weight", f"{b}{n.position}.weight")
    if spec.token_type_embeddings:
        add(f"{emb}.token_type.weight", f"{b}{n.token_type}.weight")
    linear(f"{emb}.norm", b + n.embedding_norm)
    if c.has_projection:
        linear("encoder.proj", b + n.projection, bias=True)

    # hf_groups with "all" sharing: one stored layer per group (transformers' ALBERT layout);
    # otherwise one per layer, shared sublayers unrolled
    slots = [(g, g) for g in range(c.num_hidden_groups)] if spec.hf_groups and c.sharing == "all" else c.layer_plan
    for i, (a, f) in enumerate(slots):
        p = b + n.layer.format(i)
        for kind in kinds:
            add(f"encoder.attention.{a}.qkv.{kind}", *(f"{p}{x}.{kind}" for x in n.qkv))
        linear(f"encoder.attention.{a}.out", p + n.attn_out)
        if i > 0 or spec.first_attention_norm or c.norm == "post":
            linear(f"encoder.attention.{a}.norm", p + n.attn_norm)
        linear(f"encoder.ffn.{f}.inp", p + n.ffn_in)
        linear(f"encoder.ffn.{f}.out", p + n.ffn_out)
        linear(f"encoder.ffn.{f}.norm", p + n.ffn_norm)
    if c.norm == "pre":
        linear("encoder.final_norm", b + n.final_norm)
    if c.has_pooler and head not in ("token", "qa"):  # transformers' per-token heads have no pooler
        linear("encoder.pooler", b + n.pooler, bias=True)

    if head == "discriminator":  # replaced-token detection (ElectraForPreTraining's head)
        linear("discriminator_head.dense", DISCRIMINATOR[0])
        linear("discriminator_head.prediction", DISCRIMINATOR[1])
    elif head == "pretraining":
        linear("mlm.dense", n.mlm_dense)
        linear("mlm.norm", n.mlm_norm)
        add("mlm.bias", n.mlm_bias)
        if spec.pair_head != "none":
            linear("pair", n.pair, bias=True)
    else:  # fine-tuning heads
        if spec.task_head == "prediction_head":  # ModernBERT: head.dense, act, head.norm first
            linear("transform.dense", n.cls_dense)
            linear("transform.norm", n.cls_norm)
        if head == "token":
            linear("classifier", n.token_classifier, bias=True)
        elif head == "qa":
            linear("qa_outputs", n.qa, bias=True)
        else:
            if spec.task_head in ("dense_tanh", "dense_gelu"):
                linear("dense", n.cls_dense, bias=True)
            linear("classifier", n.classifier, bias=True)
    return m


def is_encoder_param(name: str) -> bool:
    """Parameters a checkpoint must have; the others (pooler, heads) may be initialized fresh."""
    return name.startswith("encoder.") and not name.startswith("encoder.pooler.")


def decoder_keys(spec: FamilySpec) -> tuple[str, str]:
    """transformers' names of the tied decoder weight and its bias alias (not saved since v5;
    ModernBERT's decoder bias is the MLM bias itself)."""
    return spec.names.decoder + ".weight", spec.names.decoder + ".bias"


def encoder_prefixes(spec: FamilySpec, base: str) -> tuple[str, ...]:
    """Name prefixes of the backbone's tensors (`bert.embeddings`, `bert.encoder`, `bert.pooler`;
    `model.embeddings`, `model.layers`, `model.final_norm`)."""
    n = spec.names
    names = (n.word, n.layer, n.final_norm) + ((n.pooler,) if spec.pooler else ())
    return tuple(dict.fromkeys(base + name.split(".")[0] for name in names))
