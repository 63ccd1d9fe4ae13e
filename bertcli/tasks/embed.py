"""The `embed` head kind of export and predict: the encoder, its pooling and normalization as one
module, so an ONNX bundle outputs `sentence_embedding` [batch, hidden] directly and predict (on a
checkpoint or a bundle) gives the vectors `bertcli embed` writes.

The pooling is a sentence-transformers directory's own (bertcli.model.sentence), else mean
without normalization (`bertcli export --task embed` of a plain checkpoint: raw mean-pooled
features, in one graph). Registered in bertcli.tasks.heads.
"""

from __future__ import annotations

from pathlib import Path

from bertcli.core.errors import UserError
from bertcli.model.sentence import is_sentence_dir, read_sentence_dir, resolve
from bertcli.tasks.featurizer import TextFeaturizer


def load_encoder(directory: Path):
    """The bare encoder of any checkpoint (eval mode, CPU, `.config` set); its heads, if any,
    are not used (a fine-tuned classifier's or the MLM head)."""
    from bertcli.model.checkpoint import load_checkpoint

    model, _ = load_checkpoint(directory, head="pretraining")
    encoder = model.encoder
    encoder.config = model.config
    return encoder.eval()


def load_embed(directory: Path):
    """The bare encoder of `directory` with its Pooling attached (`encoder.embed_pooling`)."""
    src = resolve(directory)
    if src.encoder_dir != Path(directory):
        raise UserError(f"the encoder of this sentence-transformers directory is in {src.encoder_dir}, not at its "
                        "root", where=str(directory),
                        fix="move the Transformer module's files (config.json, weights, tokenizer) to the root and "
                            "set its path to \"\" in modules.json, as sentence-transformers writes it today")
    encoder = load_encoder(directory)
    encoder.embed_pooling = src.pooling  # a plain attribute, read by run_embed
    return encoder


def run_embed(encoder, input_ids, attention_mask, token_type_ids) -> dict:
    hidden = encoder(input_ids, attention_mask, token_type_ids).padded()          # [B, T, H]
    return {"sentence_embedding": encoder.embed_pooling(hidden.float(), attention_mask)}  # [B, H]


class EmbedFeaturizer(TextFeaturizer):
    """A text -> its embedding (the graph pools and normalizes)."""

    def decode(self, rec, windows, outputs) -> dict:
        return {"embedding": [float(v) for v in outputs[0]["sentence_embedding"]]}


def sentence_max_length(directory: Path) -> int | None:
    """A sentence-transformers directory's max_seq_length (None for another checkpoint)."""
    return read_sentence_dir(directory).max_seq_length if is_sentence_dir(directory) else None
