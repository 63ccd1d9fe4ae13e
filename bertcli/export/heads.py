"""What can be exported: the head kinds (bertcli.finetune.heads, one `HeadKind` record per head,
shared with fine-tuning and predict), how a checkpoint's kind is found, and the module that is
traced for it.

The traced module always uses the encoder's static (padded) layout: no unpadding, no sparse
last layer, so the graph has no data-dependent shapes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from bertcli.core.errors import UserError
from bertcli.finetune.heads import HEADS, HeadKind, architecture, head_kind, register  # noqa: F401 (re-exported)


# ------------------------------------------------------------------------------------ choosing
def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {Path(path).name}: {e}", where=str(path))


def get_kind(task: str) -> HeadKind:
    """The head kind of a task name or alias; old bundles' and checkpoints' names included."""
    return head_kind(task)


def detect_kind(directory: Path, task: Optional[str] = None) -> HeadKind:
    """The head kind named by `task`, else the one config.json's architectures names; a bare
    encoder (BertModel, or no architectures) exports as features."""
    if task:
        return get_kind(task)
    arch = architecture(directory)
    if not arch:
        return HEADS["features"]
    for kind in HEADS.values():
        if any(arch.endswith(s) for s in kind.suffixes if s != "Model"):
            return kind
    if arch.endswith("Model"):
        return HEADS["features"]
    raise UserError(f"bertcli cannot export a {arch} checkpoint", where=str(Path(directory) / "config.json"),
                    fix="exportable heads: " + ", ".join(f"{k.name} (*{'/*'.join(k.suffixes)})" for k in HEADS.values())
                        + "; --task features exports the bare encoder of any checkpoint")


# ----------------------------------------------------------------------------- traced module
def input_names(config) -> list[str]:
    """The graph's inputs: token_type_ids only where the family reads them."""
    names = ["input_ids", "attention_mask"]
    if config.spec.uses_token_types:
        names.append("token_type_ids")
    return names


def exportable(kind: HeadKind, model):
    """The nn.Module that is traced (and that the PyTorch backend runs): inputs in `input_names`
    order (token_type_ids last, absent where the family has one type), a tuple of float32
    outputs in the kind's order."""
    import torch

    encoder = model if hasattr(model, "embeddings") else model.encoder
    encoder.static = True
    config = encoder.config

    class Exportable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.input_names = input_names(config)
            self.config = config

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            out = kind.run(self.model, input_ids, attention_mask, token_type_ids)
            return tuple(t.float() for t in out.values())

        def output_names(self, input_ids, attention_mask, token_type_ids=None) -> list[str]:
            with torch.no_grad():
                return list(kind.run(self.model, input_ids, attention_mask, token_type_ids))

    return Exportable().eval()
