"""transformers' config.json for every family, read and written from the family specs.

`to_hf_config` writes the spec's `hf_keys` (bertcli field -> transformers key), its fixed keys
and a `bertcli` block for what transformers cannot express; `from_hf_config` reads any
transformers directory of a known model_type back, with transformers' defaults for missing keys.
Parameter names are in bertcli.model.names (re-exported here).
"""

from __future__ import annotations

from typing import Any

from bertcli.config.checkpoint import LABELLED_HEADS
from bertcli.config.families import FAMILIES, LAYOUTS
from bertcli.config.model import EncoderConfig
from bertcli.core.version import __version__
from bertcli.model.names import decoder_keys, encoder_prefixes, is_encoder_param, weight_map  # noqa: F401 (re-exported)

# Per-token fine-tuning heads (model/task_heads.py): their transformers names are the spec's
# names.token_classifier / names.qa; transformers builds them without the pooler.
TOKEN_HEADS = ("token", "qa")


def uses_pooler(head: str) -> bool:
    """transformers builds *ForTokenClassification / *ForQuestionAnswering without the pooler."""
    return head not in TOKEN_HEADS


# --------------------------------------------------------------------------------------- config
def to_hf_config(c: EncoderConfig, head: str, dtype: str = "float32") -> dict[str, Any]:
    """config.json for `c`: transformers' keys for the model type, plus a `bertcli` block that
    keeps what transformers cannot express (pre-LN, sharing outside ALBERT, E != H in BERT)."""
    spec = c.spec
    # a discriminator outside the Electra layout: the family's pretraining class (the RTD head is bertcli's own file)
    arch = spec.architectures.get(head) or spec.architectures["pretraining"]
    d: dict[str, Any] = {"architectures": [arch], "model_type": spec.model_type}
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


def transformers_caveats(c: EncoderConfig) -> list[str]:
    """What transformers cannot reproduce from a checkpoint of `c` (empty: it runs identically)."""
    spec, notes = c.spec, []
    if c.norm != spec.norm:
        notes.append(f"{c.norm}-LN: transformers has no {c.norm}-LN {spec.model_type}; it would load these "
                     f"weights into {spec.norm}-LN layers and compute different outputs (bertcli reads the "
                     "`bertcli.norm` key and runs it correctly)")
    if c.embedding_size != c.hidden_size and "embedding_size" not in spec.hf_keys:
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
    return " / ".join(s.model_type.upper() for s in (*FAMILIES.values(), *LAYOUTS.values())
                      if "embedding_size" in s.hf_keys)
