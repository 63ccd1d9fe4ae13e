"""transformers' side of the tests that compare with it: a transformers config of every family at
the size of helpers.models.tiny_section, and its model classes (imports transformers)."""

from __future__ import annotations

import transformers as tf

from bertcli.config.families import family_spec
from helpers.models import PAD, VOCAB

TOL = dict(atol=1e-5, rtol=0)


CASES = {  # family -> transformers config keys (besides the common tiny sizes)
    "bert": dict(num_hidden_layers=2, max_position_embeddings=40),
    "roberta": dict(num_hidden_layers=2, max_position_embeddings=42, type_vocab_size=1, layer_norm_eps=1e-5),
    "albert": dict(embedding_size=16, num_hidden_layers=4, max_position_embeddings=40, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0),
    "modernbert": dict(num_hidden_layers=4, max_position_embeddings=64, local_attention=8,
                       global_attn_every_n_layers=3, global_rope_theta=160000.0, local_rope_theta=10000.0,
                       bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2),
}


def hf_config(family: str, **extra):
    common = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, intermediate_size=37,
                  pad_token_id=PAD[family])
    return tf.AutoConfig.for_model(family_spec(family).model_type, **{**common, **CASES[family], **extra})


def hf_class(family: str, head: str):
    return getattr(tf, family_spec(family).architectures[head])


HF_PRETRAINING = {f: hf_class(f, "pretraining") for f in CASES}
