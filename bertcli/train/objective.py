"""The training objective behind `train.objective` as the loop sees it: `mlm` is the loop's own
(no object); `rtd` (ELECTRA) is an `RTDObjective` the loop calls for a micro-batch's losses.

The loop's step loss is  mlm_sum * world / M  +  pair_sum * pair_scale;  for RTD the pair slot
carries the discriminator's BCE sum and pair_scale = world * RTD_WEIGHT / T_real (T_real: real
tokens of the global batch), so that the loss is MLM + 50 x RTD with both terms means over the
global batch, whatever the accumulation and process count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bertcli.config.generator import generator_shape
from bertcli.config.model import EncoderConfig
from bertcli.core import console
from bertcli.model.checkpoint import save_checkpoint
from bertcli.model.electra import RTD_WEIGHT, Discriminator, RTDModel, RTDOutput, generator_config, rtd_layout
from bertcli.model.heads import PreTrainingModel
from bertcli.model.init_from import init_rtd


class RTDObjective:
    def losses(self, model, b: dict, autocast) -> tuple[torch.Tensor, ...]:
        """(generator MLM sum, its correct count, discriminator BCE sum, its correct count, mlm labels)."""
        with autocast():
            out = model(b["input_ids"], b["attention_mask"], b.get("token_type_ids"), b["mlm_positions"],
                        b["mlm_labels"], b["rtd_uniform"])
        assert isinstance(out, RTDOutput)
        return out.mlm_sum, out.mlm_correct, out.rtd_sum, out.rtd_correct, b["mlm_labels"]

    @staticmethod
    def summarize(s: dict, rec: dict, prefix: str) -> dict:
        """The loop's record with the discriminator's figures: rtd_loss (mean BCE per real token),
        rtd_acc (replaced-or-not accuracy), and loss = mlm_loss + RTD_WEIGHT * rtd_loss."""
        tokens = s["tokens"]
        rtd_loss = s["pair_loss"] / tokens if tokens else float("nan")
        rec[prefix + "rtd_loss"] = rtd_loss
        rec[prefix + "rtd_acc"] = s["pair_correct"] / tokens if tokens else float("nan")
        rec[prefix + "loss"] = rec[prefix + "mlm_loss"] + RTD_WEIGHT * rtd_loss
        return rec

    @staticmethod
    def pair_scale(world_size: int, global_tokens: float) -> float:
        return world_size * RTD_WEIGHT / max(1.0, global_tokens)


def build_rtd(c: EncoderConfig, recipe, start: torch.nn.Module | None = None) -> RTDModel:
    """Generator + discriminator for the recipe; the discriminator has the built model's config,
    in the layout its checkpoints are written in (ELECTRA's for the BERT family: rtd_layout).
    With model.init_from, `start` (the model loaded from it) and the checkpoint's RTD head and
    generator/ give the weights (bertcli.model.init_from.init_rtd)."""
    m = recipe.model
    c = rtd_layout(c)
    rtd = RTDModel(c, generator_config(c, *generator_shape(m.generator, c.hidden_size, c.num_hidden_layers,
                                                           c.num_attention_heads)))
    if m.init_from is not None and start is not None:
        assert isinstance(start, PreTrainingModel), "init_model builds a PreTrainingModel"
        for note in init_rtd(rtd, start, Path(m.init_from)):
            console.log(f"init: {note}")
    return rtd


def save_rtd(model: torch.nn.Module, directory: Path, tokenizer_dir: Path) -> list[str]:
    """The discriminator in `directory`, the generator as an MLM checkpoint in `directory/generator`.

    ELECTRA layout (BERT family): ElectraForPreTraining (encoder + discriminator_predictions) and
    ElectraForMaskedLM. Other families: the family's encoder under its own names (no MLM head:
    the discriminator has none), the RTD head in bertcli's own rtd_head.safetensors beside it
    (save_checkpoint), and the family's MLM checkpoint of the generator."""
    rtd: Any = model
    while not isinstance(rtd, RTDModel):   # inside torch.compile / DDP wrappers
        rtd = getattr(rtd, "_orig_mod", None) or rtd.module
    with torch.random.fork_rng():   # building the view must not move the training's random streams
        disc = Discriminator(rtd.config)
    disc.encoder, disc.discriminator_head = rtd.encoder, rtd.discriminator_head
    notes = save_checkpoint(disc, directory, tokenizer_dir=tokenizer_dir)
    save_checkpoint(_view(rtd.generator_config, rtd.generator, rtd.generator_mlm), Path(directory) / "generator",
                    tokenizer_dir=tokenizer_dir)
    return notes


def _view(c: EncoderConfig, encoder, mlm) -> PreTrainingModel:
    """A PreTrainingModel holding `encoder` and `mlm` for save_checkpoint's layout."""
    with torch.random.fork_rng():   # building the view must not move the training's random streams
        view = PreTrainingModel(c)
    view.encoder, view.mlm = encoder, mlm
    return view
