"""Continued pretraining's weights: the PreTrainingModel of `model.init_from`.

    init_model(recipe, tok)     every tensor of the checkpoint the model has, heads it lacks
                                initialized as a new model's, a grown position table and an
                                extended vocabulary filled in -> (model, notes for the summary)

The recipe's keys were filled from the checkpoint's files at recipe load (bertcli.config.continued);
what `--resume` compares is bertcli.config.checkpoint.weights_sha256.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bertcli.config.checkpoint import rtd_generator
from bertcli.core.errors import UserError
from bertcli.tokenization.extend import init_new_rows

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe
    from bertcli.model.electra import RTDModel
    from bertcli.model.heads import PreTrainingModel
    from bertcli.tokenization.extend import Extension
    from bertcli.tokenization.load import TokenizerInfo


def init_model(recipe: Recipe, tok: TokenizerInfo,
               extension: Extension | None = None) -> tuple[PreTrainingModel, list[str]]:
    """The PreTrainingModel of `recipe.model.init_from`, on the CPU in train mode, with the recipe's
    dropout. `tok`: the adopted tokenizer (TokenizerInfo); `extension`: the tokenizer stage's
    new tokens (bertcli.tokenization.extend.Extension) or None. Returns (model, notes)."""
    import torch

    from bertcli.model.checkpoint import load_checkpoint
    from bertcli.model.heads import PreTrainingModel

    assert recipe.model.init_from is not None, "init_model is continued pretraining: a recipe with model.init_from"
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


def init_rtd(rtd: RTDModel, start: PreTrainingModel, src: Path) -> list[str]:
    """Continued RTD pretraining: `rtd` (a fresh RTDModel) takes the discriminator's encoder from
    `start` (init_model's PreTrainingModel of `src`: vocabulary and positions already grown), the
    RTD head from `src` where it has one (ElectraForPreTraining's discriminator_predictions, or
    rtd_head.safetensors beside another family's checkpoint), and the generator from
    `src/generator` where that exists (its embeddings are the discriminator's, shared). What is
    not there keeps the fresh model's initialization. Returns notes for the summary."""
    import torch

    from bertcli.model.checkpoint import load_checkpoint
    from bertcli.model.electra import Discriminator
    from bertcli.model.heads import PreTrainingModel

    notes = []
    with torch.no_grad():
        _copy(rtd.encoder, start.encoder, skip=("pooler.",))       # a BERT-layout pooler has no ELECTRA place
        disc, report = load_checkpoint(src, "discriminator")
        assert isinstance(disc, Discriminator)
        if any(n.startswith("discriminator_predictions") for n in report.fresh):
            notes.append(f"the RTD head starts fresh ({src} has none: not an RTD checkpoint)")
        else:
            rtd.discriminator_head.load_state_dict(disc.discriminator_head.state_dict())
        gen_dir = rtd_generator(src)
        if gen_dir is None:
            notes.append(f"the generator starts fresh ({src} has no generator/)")
            return notes
        gen, _ = load_checkpoint(gen_dir, "pretraining")
        assert isinstance(gen, PreTrainingModel)
        # the shared tables (word, position, type, their norm) came with the discriminator
        _copy(rtd.generator, gen.encoder, skip=("embeddings.", "pooler."))
        mlm = gen.mlm.state_dict()
        for name, dst in rtd.generator_mlm.state_dict().items():
            dst[: mlm[name].shape[0]].copy_(mlm[name])             # mlm.bias: an extended vocabulary grows it
        notes.append(f"the generator continues from {gen_dir}")
    return notes


def _copy(dst, src, skip: tuple[str, ...]) -> None:
    """Every tensor of module `src` into the same-named one of `dst`, but the names starting with `skip`."""
    target = dst.state_dict()
    for name, t in src.state_dict().items():
        if not name.startswith(skip):
            target[name].copy_(t)
