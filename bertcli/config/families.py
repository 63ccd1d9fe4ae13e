"""Model families as specs: everything that makes BERT, RoBERTa, ALBERT or ModernBERT what it is.

One frozen `FamilySpec` per family, in `FAMILIES`. The encoder, heads, checkpoint conversion,
recipe resolution and tokenizer read the spec's flags and tables; nothing outside this module
compares family names. Adding a family: docs/design.md, "Adding a model family".

This module is pure data (no torch, no other bertcli import), so `sections.py` can take the
family names from it and the tokenizer its special tokens.

A spec holds:
    defaults          recipe `model` fields left at null (recipe.resolve_model)
    special_tokens    role -> token, in vocabulary order (the order is the id); tokenizer kind
    model_type, architectures, hf_prefix, hf_keys, hf_defaults, names   the transformers side
    behaviour flags   positions, feed_forward, biases, norm placement, pair head, pooler, ...

CONTRACT for other stages (finetune, squad, export):
    family_spec(name) -> FamilySpec   (recipe loading restricts the names: a KeyError is a bug);
                                      model.config.spec is the spec of a built or loaded model
    spec.hf_prefix          backbone prefix of transformers' task models ('bert.', 'roberta.',
                            'albert.', 'model.'); task heads (`classifier`, `qa_outputs`) sit at the
                            top level
    spec.uses_token_types   whether the model reads token_type_ids (ONNX inputs, collators)
    spec.architectures[head]  transformers class for a head: pretraining, classification,
                            token, qa (the heads of load_checkpoint)
    spec.names              transformers' parameter names (HFNames); task heads: names.classifier,
                            names.token_classifier, names.qa (top level, no prefix)
    spec.task_head          how fine-tuning heads read the encoder: "plain" (dropout, linear on
                            each token / the pooler), "dense_tanh" (RoBERTa's sequence classifier:
                            dense, tanh, out_proj; its token heads are plain), "dense_gelu" (the
                            same with exact GELU: ELECTRA's classifier) or "prediction_head"
                            (ModernBERT: head.dense, act, head.norm, then dropout, classifier)
    position_offset(spec, pad_token_id)  the one place RoBERTa's padding_idx + 1 is computed

A *layout* is another transformers format of a family's encoder: `ELECTRA` is the BERT family
written as transformers' Electra (`electra.` prefix, no pooler, E != H through
`embeddings_project`, the dense -> gelu -> out_proj classifier, the replaced-token
discriminator head). Its spec is BERT's with the transformers side replaced; `spec.layout` names
it, and EncoderConfig.layout selects it (`layout_spec`). Layouts are not recipe families.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

ROLES = ("pad", "unk", "cls", "sep", "mask")

# The values of the behaviour flags; FamilySpec refuses any other when it is made.
TokenizerKind = Literal["wordpiece", "bpe", "unigram"]
PairTemplate = Literal["cls_sep", "double_sep"]
Positions = Literal["learned", "offset", "rotary"]
FeedForward = Literal["gelu", "geglu"]
NormPlacement = Literal["post", "pre"]
PairHead = Literal["nsp", "sop", "none"]
MlmActivation = Literal["hidden_act", "gelu"]
TaskHead = Literal["plain", "dense_tanh", "dense_gelu", "prediction_head"]
Attention = Literal["global", "alternating"]
Init = Literal["normal", "scaled"]


def _frozen(**kw) -> Mapping:
    return MappingProxyType(dict(kw))


@dataclass(frozen=True)
class HFNames:
    """transformers' parameter names, relative to the backbone prefix (`hf_prefix`) for the
    encoder and absolute for the heads. `None`: the family has no such tensor."""

    word: str = "embeddings.word_embeddings"
    position: str | None = "embeddings.position_embeddings"
    token_type: str | None = "embeddings.token_type_embeddings"
    embedding_norm: str = "embeddings.LayerNorm"
    projection: str = "encoder.embedding_hidden_mapping_in"
    layer: str = "encoder.layer.{}."                       # one stored layer
    qkv: tuple[str, ...] = ("attention.self.query", "attention.self.key", "attention.self.value")
    attn_out: str = "attention.output.dense"
    attn_norm: str = "attention.output.LayerNorm"
    ffn_in: str = "intermediate.dense"
    ffn_out: str = "output.dense"
    ffn_norm: str = "output.LayerNorm"
    final_norm: str = "encoder.final_layer_norm"          # bertcli's pre-LN extension for BERT
    pooler: str = "pooler.dense"
    mlm_dense: str = "cls.predictions.transform.dense"
    mlm_norm: str = "cls.predictions.transform.LayerNorm"
    mlm_bias: str = "cls.predictions.bias"
    decoder: str = "cls.predictions.decoder"              # tied weight (+ a bias alias in v4 files)
    pair: str | None = "cls.seq_relationship"
    cls_dense: str | None = None                       # sequence-classification head's own transform
    cls_norm: str | None = None
    classifier: str = "classifier"                        # sequence classification output layer
    token_classifier: str = "classifier"                  # *ForTokenClassification output layer
    qa: str = "qa_outputs"                                # *ForQuestionAnswering output layer (2 logits)


@dataclass(frozen=True)
class FamilySpec:
    name: str
    display: str                                # the paper's spelling, for messages
    doc: str                                    # one line for help texts
    # --- recipe defaults (fields of the `model` section left at null)
    defaults: Mapping = field(default_factory=_frozen)
    # --- tokenizer
    special_tokens: Mapping = field(default_factory=_frozen)  # role -> token, in id order
    tokenizer_kind: TokenizerKind = "wordpiece"  # the kind its shipped recipes use
    pair_template: PairTemplate = "cls_sep"     # cls_sep: [CLS] A [SEP] B [SEP]; double_sep: <s> A </s></s> B </s>
    mask_lstrip: bool = False                   # the mask token swallows the space before it
    tokenizer_classes: Mapping = field(default_factory=_frozen)  # kind -> transformers class
    hf_token_ids: tuple = ()                    # (config.json key, role) written from the tokenizer set
    # --- transformers
    model_type: str = ""
    architectures: Mapping = field(default_factory=_frozen)     # head -> class name
    hf_prefix: str = ""
    hf_keys: Mapping = field(default_factory=_frozen)           # EncoderConfig field -> config.json key
    hf_defaults: Mapping = field(default_factory=_frozen)       # transformers' defaults, by config.json key
    hf_fixed: Mapping = field(default_factory=_frozen)          # keys written as is; other values are refused
    hf_also: Mapping = field(default_factory=_frozen)           # extra config.json key -> field, written only
    names: HFNames = HFNames()
    hf_groups: bool = False                     # transformers stores shared layer groups (ALBERT)
    # --- behaviour
    positions: Positions = "learned"            # learned | offset (RoBERTa: from padding_idx + 1) | rotary
    position_padding_row: bool = False          # the position table has a padding row (RoBERTa)
    uses_token_types: bool = True               # tokenizers/exports feed token_type_ids (RoBERTa: all 0)
    token_type_embeddings: bool = True          # a token-type table (RoBERTa keeps a 1-row one)
    feed_forward: FeedForward = "gelu"          # gelu (dense, act, dense) | geglu (Wi -> 2I, act(x) * gate)
    biases: bool = True                         # linear layers and LayerNorms have biases
    norm: NormPlacement = "post"                # default placement: post | pre
    first_attention_norm: bool = True           # pre-LN: layer 0 normalizes its input (ModernBERT: identity)
    embedding_norm: bool = True
    always_project: bool = False                # an E -> H projection even when E == H (ALBERT)
    pair_head: PairHead = "nsp"                 # nsp | sop | none
    pair_dropout: bool = False                  # dropout before the pair head (AlbertSOPHead)
    pooler: bool = True                         # dense + tanh on [CLS]
    mlm_activation: MlmActivation = "hidden_act"  # hidden_act | gelu (RobertaLMHead always exact GELU)
    task_head: TaskHead = "plain"               # plain | dense_tanh (RoBERTa classifier) | prediction_head
    attention: Attention = "global"             # global | alternating (local windows, a global layer every n)
    init: Init = "normal"                       # normal(0, std) | scaled (truncated; outputs std / sqrt(2L))
    hf_dropout_elsewhere: bool = False          # transformers puts the dropouts in other places (training only)
    vocab_multiple: int = 8                     # tokenizer.extend rounds the embedding rows up to a multiple of this
    layout: str = ""                            # "": the family's own format; else a LAYOUTS name (electra)

    def __post_init__(self) -> None:
        # A misspelt flag would quietly take another branch of the encoder; refuse it here instead.
        for name, allowed in _flag_values().items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"FamilySpec {self.name!r}: {name}={getattr(self, name)!r} is not one of {allowed}")

    @property
    def token_ids(self) -> dict[str, int]:
        """role -> id of the family's own special tokens (they open the vocabulary)."""
        return {role: i for i, role in enumerate(self.special_tokens)}

    @property
    def pad_id(self) -> int:
        return self.token_ids["pad"]


@functools.cache
def _flag_values() -> dict[str, tuple]:
    """field -> its allowed values, for every FamilySpec field typed as a Literal."""
    hints = typing.get_type_hints(FamilySpec)
    return {name: typing.get_args(h) for name, h in hints.items() if typing.get_origin(h) is Literal}


def position_offset(spec: FamilySpec, pad_token_id: int) -> int:
    """Index of the first position embedding: RoBERTa numbers positions from padding_idx + 1
    (fairseq's make_positions); learned and rotary positions start at 0."""
    return pad_token_id + 1 if spec.positions == "offset" else 0


_BERT_TOKENS = _frozen(pad="[PAD]", unk="[UNK]", cls="[CLS]", sep="[SEP]", mask="[MASK]")
_BERT_CLASSES = _frozen(wordpiece="BertTokenizer", unigram="AlbertTokenizer")
_BERT_HF = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
                initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=0)
# EncoderConfig field -> config.json key shared by BERT, RoBERTa and ALBERT
_COMMON_KEYS = {k: k for k in (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
    "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id")}
_BERT_KEYS = _frozen(**_COMMON_KEYS, classifier_dropout="classifier_dropout")
# learned absolute positions, an encoder: what bertcli implements of BertConfig / RobertaConfig
_BERT_FIXED = _frozen(position_embedding_type="absolute", is_decoder=False, add_cross_attention=False)

BERT = FamilySpec(
    name="bert", display="BERT", doc="BertForPreTraining: MLM + NSP head",
    defaults=_frozen(max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu",
                     sharing="none"),
    special_tokens=_BERT_TOKENS, tokenizer_kind="wordpiece", tokenizer_classes=_BERT_CLASSES,
    model_type="bert", hf_prefix="bert.", hf_keys=_BERT_KEYS, hf_defaults=_frozen(**_BERT_HF), hf_fixed=_BERT_FIXED,
    architectures=_frozen(pretraining="BertForPreTraining", classification="BertForSequenceClassification",
                          token="BertForTokenClassification",
                          qa="BertForQuestionAnswering"),
    pair_head="nsp",
)

ROBERTA = FamilySpec(
    name="roberta", display="RoBERTa", doc="RobertaForMaskedLM: MLM head only",
    defaults=_frozen(max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, hidden_act="gelu",
                     sharing="none"),
    special_tokens=_frozen(cls="<s>", pad="<pad>", sep="</s>", unk="<unk>", mask="<mask>"),
    tokenizer_kind="bpe", pair_template="double_sep", mask_lstrip=True,
    tokenizer_classes=_frozen(bpe="RobertaTokenizer"),
    hf_token_ids=(("bos_token_id", "cls"), ("eos_token_id", "sep")),
    model_type="roberta", hf_prefix="roberta.", hf_keys=_BERT_KEYS, hf_fixed=_BERT_FIXED,
    hf_defaults=_frozen(**{**_BERT_HF, "vocab_size": 50265, "pad_token_id": 1}),
    architectures=_frozen(pretraining="RobertaForMaskedLM", classification="RobertaForSequenceClassification",
                          token="RobertaForTokenClassification",
                          qa="RobertaForQuestionAnswering"),
    names=HFNames(mlm_dense="lm_head.dense", mlm_norm="lm_head.layer_norm", mlm_bias="lm_head.bias",
                  decoder="lm_head.decoder", pair=None, cls_dense="classifier.dense",
                  classifier="classifier.out_proj"),
    positions="offset", position_padding_row=True, uses_token_types=False, pair_head="none", pooler=False,
    mlm_activation="gelu", task_head="dense_tanh",
)

ALBERT = FamilySpec(
    name="albert", display="ALBERT", doc="AlbertForPreTraining: MLM + SOP head, factorized embeddings, shared layers",
    defaults=_frozen(max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu_new",
                     sharing="all", embedding_size=128, classifier_dropout=0.1),
    special_tokens=_frozen(pad="<pad>", unk="<unk>", cls="[CLS]", sep="[SEP]", mask="[MASK]"),
    tokenizer_kind="unigram", tokenizer_classes=_BERT_CLASSES,
    hf_token_ids=(("bos_token_id", "cls"), ("eos_token_id", "sep")),
    model_type="albert", hf_prefix="albert.",
    hf_keys=_frozen(**_COMMON_KEYS, embedding_size="embedding_size", classifier_dropout="classifier_dropout_prob"),
    hf_fixed=_frozen(inner_group_num=1),  # one layer per group
    hf_defaults=_frozen(**{**_BERT_HF, "vocab_size": 30000, "embedding_size": 128, "hidden_size": 4096,
                           "num_attention_heads": 64, "intermediate_size": 16384, "hidden_act": "gelu_new",
                           "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                           "num_hidden_groups": 1, "inner_group_num": 1, "classifier_dropout_prob": 0.1}),
    architectures=_frozen(pretraining="AlbertForPreTraining", classification="AlbertForSequenceClassification",
                          token="AlbertForTokenClassification",
                          qa="AlbertForQuestionAnswering"),
    names=HFNames(layer="encoder.albert_layer_groups.{}.albert_layers.0.",
                  qkv=("attention.query", "attention.key", "attention.value"), attn_out="attention.dense",
                  attn_norm="attention.LayerNorm", ffn_in="ffn", ffn_out="ffn_output",
                  ffn_norm="full_layer_layer_norm", pooler="pooler", mlm_dense="predictions.dense",
                  mlm_norm="predictions.LayerNorm", mlm_bias="predictions.bias", decoder="predictions.decoder",
                  pair="sop_classifier.classifier"),
    hf_groups=True, always_project=True, pair_head="sop", pair_dropout=True,
)

# Warner et al. 2024, "Smarter, Better, Faster, Longer" (ModernBERT), as transformers'
# ModernBertForMaskedLM: rotary positions (theta 160k global / 10k local), GeGLU, no biases
# (the decoder keeps one), pre-norm with an identity first attention norm and a final norm,
# a global layer every third layer and a 128-token window (+-64) elsewhere.
MODERNBERT = FamilySpec(
    name="modernbert", display="ModernBERT",
    doc="ModernBertForMaskedLM: rotary, GeGLU, no biases, pre-norm, alternating local/global attention",
    defaults=_frozen(max_position_embeddings=8192, type_vocab_size=1, layer_norm_eps=1e-5, hidden_act="gelu",
                     sharing="none", classifier_dropout=0.0, local_attention=128, global_attn_every_n_layers=3,
                     global_rope_theta=160000.0, local_rope_theta=10000.0),
    # ModernBERT's tokens, in the order of their ids there (50280-50284)
    special_tokens=_frozen(unk="[UNK]", cls="[CLS]", sep="[SEP]", pad="[PAD]", mask="[MASK]"),
    tokenizer_kind="bpe", mask_lstrip=True,
    hf_token_ids=(("bos_token_id", "cls"), ("cls_token_id", "cls"), ("eos_token_id", "sep"),
                  ("sep_token_id", "sep")),
    model_type="modernbert", hf_prefix="model.",
    hf_keys=_frozen(vocab_size="vocab_size", hidden_size="hidden_size", num_hidden_layers="num_hidden_layers",
                    num_attention_heads="num_attention_heads", intermediate_size="intermediate_size",
                    hidden_act="hidden_activation", hidden_dropout_prob="mlp_dropout",
                    attention_probs_dropout_prob="attention_dropout",
                    max_position_embeddings="max_position_embeddings", initializer_range="initializer_range",
                    layer_norm_eps="norm_eps", pad_token_id="pad_token_id", classifier_dropout="classifier_dropout"),
    hf_also=_frozen(embedding_dropout="hidden_dropout_prob"),
    hf_defaults=_frozen(vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
                        num_attention_heads=12, hidden_activation="gelu", max_position_embeddings=8192,
                        initializer_range=0.02, norm_eps=1e-5, pad_token_id=50283, attention_dropout=0.0,
                        mlp_dropout=0.0, embedding_dropout=0.0, classifier_dropout=0.0, local_attention=128,
                        global_attn_every_n_layers=3, classifier_pooling="cls"),
    hf_fixed=_frozen(norm_bias=False, attention_bias=False, mlp_bias=False, decoder_bias=True,
                     classifier_bias=False, classifier_activation="gelu"),
    architectures=_frozen(pretraining="ModernBertForMaskedLM", classification="ModernBertForSequenceClassification",
                          token="ModernBertForTokenClassification", qa="ModernBertForQuestionAnswering"),
    names=HFNames(word="embeddings.tok_embeddings", position=None, token_type=None, embedding_norm="embeddings.norm",
                  layer="layers.{}.", qkv=("attn.Wqkv",), attn_out="attn.Wo", attn_norm="attn_norm",
                  ffn_in="mlp.Wi", ffn_out="mlp.Wo", ffn_norm="mlp_norm", final_norm="final_norm",
                  mlm_dense="head.dense", mlm_norm="head.norm", mlm_bias="decoder.bias", decoder="decoder",
                  pair=None, cls_dense="head.dense", cls_norm="head.norm", classifier="classifier",
                  token_classifier="classifier", qa="classifier"),
    positions="rotary", uses_token_types=False, token_type_embeddings=False, feed_forward="geglu", biases=False,
    norm="pre", first_attention_norm=False, pair_head="none", pooler=False, mlm_activation="gelu",
    task_head="prediction_head", attention="alternating", init="scaled", hf_dropout_elsewhere=True,
    vocab_multiple=64,   # ModernBERT pads its 50,280-token vocabulary to 50,368 = 787 x 64
)

# ELECTRA (Clark et al. 2020) as transformers' Electra classes: the BERT family's encoder under
# `electra.`, no pooler, E -> H by `embeddings_project` when E != H. Heads: pretraining =
# ElectraForMaskedLM (the generator: dense H->E, exact GELU, LN, tied decoder), discriminator =
# ElectraForPreTraining (dense, hidden_act, dense_prediction), classification = dense -> gelu ->
# out_proj on the first token.
ELECTRA = dataclasses.replace(
    BERT, display="ELECTRA", doc="ElectraForPreTraining: the BERT family in transformers' Electra layout",
    model_type="electra", hf_prefix="electra.", layout="electra",
    hf_keys=_frozen(**_COMMON_KEYS, embedding_size="embedding_size", classifier_dropout="classifier_dropout"),
    hf_defaults=_frozen(**{**_BERT_HF, "embedding_size": 128, "hidden_size": 256, "num_attention_heads": 4,
                           "intermediate_size": 1024}),
    architectures=_frozen(pretraining="ElectraForMaskedLM", discriminator="ElectraForPreTraining",
                          classification="ElectraForSequenceClassification", token="ElectraForTokenClassification",
                          qa="ElectraForQuestionAnswering"),
    names=HFNames(projection="embeddings_project", mlm_dense="generator_predictions.dense",
                  mlm_norm="generator_predictions.LayerNorm", mlm_bias="generator_lm_head.bias",
                  decoder="generator_lm_head", pair=None, cls_dense="classifier.dense",
                  classifier="classifier.out_proj"),
    pair_head="none", pooler=False, mlm_activation="gelu", task_head="dense_gelu",
)
# transformers' name of the replaced-token detection head (ElectraDiscriminatorPredictions),
# also the names of bertcli's own rtd_head.safetensors beside another family's discriminator
DISCRIMINATOR = ("discriminator_predictions.dense", "discriminator_predictions.dense_prediction")

FAMILIES: Mapping[str, FamilySpec] = MappingProxyType({s.name: s for s in (BERT, ROBERTA, ALBERT, MODERNBERT)})
# layout name -> (spec); each is one family's encoder in another transformers format
LAYOUTS: Mapping[str, FamilySpec] = MappingProxyType({ELECTRA.layout: ELECTRA})
# config.json architectures of a replaced-token discriminator (ElectraForPreTraining): an encoder
# with no MLM head, which fill-mask cannot use and features / export read as the bare encoder
DISCRIMINATOR_ARCHITECTURES = frozenset(s.architectures["discriminator"] for s in LAYOUTS.values())
FAMILY_NAMES: tuple[str, ...] = tuple(FAMILIES)
# every family's mask token: fill-mask and predict accept any of them in a text, whatever the model's
MASK_SPELLINGS = tuple(dict.fromkeys(s.special_tokens["mask"] for s in FAMILIES.values()))
# The names as a type, for the recipe sections (a type checker cannot read them from FAMILIES).
FamilyName = Literal["bert", "roberta", "albert", "modernbert"]
if typing.get_args(FamilyName) != FAMILY_NAMES:
    raise ImportError(f"FamilyName lists {typing.get_args(FamilyName)}, FAMILIES has {FAMILY_NAMES}: make them agree")


def family_spec(name: str) -> FamilySpec:
    """The spec of a family (`bert`, `roberta`, `albert`, ...)."""
    return FAMILIES[name]


def layout_spec(family: str, layout: str) -> FamilySpec:
    """The spec of `family` written in `layout` ("": the family's own)."""
    if not layout:
        return FAMILIES[family]
    spec = LAYOUTS[layout]
    if spec.name != family:
        raise KeyError(f"the {layout} layout is a {spec.name} layout, not {family}'s")
    return spec


def spec_for_model_type(model_type) -> FamilySpec | None:
    """The family (or layout) whose transformers model_type this is, or None."""
    return next((s for s in (*FAMILIES.values(), *LAYOUTS.values()) if s.model_type == model_type), None)
