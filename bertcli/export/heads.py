"""What can be exported: the head kinds (bertcli.tasks.heads, one `HeadKind` record per head,
shared with fine-tuning and predict), how a checkpoint's kind is found, and the module that is
traced for it.

The traced module always uses the encoder's static (padded) layout: no unpadding, no sparse
last layer, so the graph has no data-dependent shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

from bertcli.config.checkpoint import is_discriminator
from bertcli.core import jsonout
from bertcli.core.errors import UserError
from bertcli.tasks.heads import HEADS, HeadKind, architecture, head_kind, register  # noqa: F401 (re-exported)


# ------------------------------------------------------------------------------------ choosing
def read_json(path: Path) -> dict:
    """A JSON object from `path`; one message for a file that is unreadable, not JSON, or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {Path(path).name}: {e}", where=str(path),
                        fix="the file is damaged; write it again (export the model again for a bundle)") from None
    if not isinstance(data, dict):
        raise UserError(f"{Path(path).name} holds a JSON {type(data).__name__}, not an object", where=str(path),
                        fix="the file is damaged; write it again (export the model again for a bundle)")
    return data


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


# export_info.json keys predict reads: key -> (what it must be, check); null is allowed for all
EXPORT_INFO = {
    "task": ("a task name (string)", lambda v: isinstance(v, str) and v.strip() != ""),
    "max_sequence_length": ("a positive integer", _count),
    "vocab_size": ("a positive integer", _count),
    "labels": ("a list of label names (strings)", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "files": ("an object of file name -> size in bytes (or null)",
              lambda v: isinstance(v, dict) and all(isinstance(k, str) and (x is None or (isinstance(x, int)
                                                    and not isinstance(x, bool) and x >= 0)) for k, x in v.items())),
}


def read_export_info(path: Path) -> dict:
    """export_info.json, validated by type like config.json is (a wrong type is one message naming
    the key)."""
    path = Path(path)
    info = read_json(path)
    fix = "export_info.json is written by `bertcli export`: export the model again (or fix the key by hand)"
    for key, (want, ok) in EXPORT_INFO.items():
        if info.get(key) is not None and not ok(info[key]):
            raise UserError(f"export_info.json key {key!r} is {jsonout.quote(info[key])[:100]}, not {want}",
                            where=f"{path}: {key}", fix=fix)
    return info


def check_bundle_files(info: dict, directory: Path) -> None:
    """Every file export_info.json lists is in the bundle with the size it was exported with
    (called after the checks that say more specifically what does not belong together)."""
    for name, size in (info.get("files") or {}).items():
        f = Path(directory) / name
        if size is None or "/" in name or "\\" in name or name.startswith("."):   # markers: not the model's
            continue
        if not f.is_file():
            raise UserError(f"bundle file {name} is missing (listed in export_info.json)", where=str(f),
                            fix="copy the whole bundle directory again, or export the model again")
        if f.stat().st_size != size:
            raise UserError(f"bundle file {name} is {f.stat().st_size:,} bytes, {size:,} when it was exported "
                            "(cut short or changed)", where=str(f),
                            fix="copy the whole bundle directory again, or export the model again")


def get_kind(task: str) -> HeadKind:
    """The head kind of a task name or alias; old bundles' and checkpoints' names included."""
    return head_kind(task)


def detect_kind(directory: Path, task: str | None = None) -> HeadKind:
    """The head kind named by `task`, else the one config.json's architectures names; a bare
    encoder (BertModel, or no architectures) exports as features."""
    if task:
        return get_kind(task)
    if (Path(directory) / "modules.json").is_file():      # a sentence-transformers directory: its embeddings
        return HEADS["embed"]
    arch = architecture(directory)
    if not arch or is_discriminator(directory, arch):   # an RTD discriminator exports as its encoder
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
    """The graph's inputs: token_type_ids only where they can be other than 0 -- the family reads
    them (not RoBERTa, ModernBERT) and the model has more than one type (type_vocab_size 1:
    every id is 0, and the encoder adds type 0's row itself when it gets none)."""
    names = ["input_ids", "attention_mask"]
    if config.spec.uses_token_types and config.type_vocab_size > 1:
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
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.input_names = input_names(config)
            self.config = config

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
            out = kind.run(self.model, input_ids, attention_mask, token_type_ids)
            return tuple(t.float() for t in out.values())

        def output_names(self, input_ids, attention_mask, token_type_ids=None) -> list[str]:
            with torch.no_grad():
                return list(kind.run(self.model, input_ids, attention_mask, token_type_ids))

    return Exportable().eval()
