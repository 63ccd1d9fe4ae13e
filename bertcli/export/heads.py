"""What can be exported: one `HeadKind` per task, and the module that is traced for it.

A head kind declares
    task         the name used by --task, export_info.json and predict ("classification", ...)
    suffixes     the endings of config.json `architectures` it answers to ("ForSequenceClassification")
    load(dir)    the bertcli model in eval mode, or a UserError when the checkpoint lacks the head
    run(model, input_ids, attention_mask, token_type_ids) -> {output name: tensor}, in output order
    outputs      every output it may produce, with its axes ("batch", "sequence" are dynamic;
                 other names are fixed sizes, e.g. "labels")

so a new head (question answering, token classification) plugs in with one `register(...)` call
where its model class lives; export, verification and the PyTorch backend of predict need nothing
else. The traced module always uses the encoder's static (padded) layout: no unpadding, no sparse
last layer, so the graph has no data-dependent shapes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from bertcli.errors import UserError, did_you_mean


@dataclass(frozen=True)
class HeadKind:
    task: str
    suffixes: tuple[str, ...]
    load: Callable[[Path], object]
    run: Callable[..., dict]
    outputs: dict[str, tuple[str, ...]]
    description: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)


HEADS: dict[str, HeadKind] = {}


def register(kind: HeadKind) -> HeadKind:
    """Make a head kind exportable (and predictable); the last registration of a task wins."""
    HEADS[kind.task] = kind
    return kind


# ------------------------------------------------------------------------------ built-in kinds
def _load_mlm(directory: Path):
    from bertcli.model.checkpoint import load_checkpoint

    model, report = load_checkpoint(directory, head="pretraining")
    if any(n.endswith("bias") and ("predictions" in n or "lm_head" in n) for n in report.fresh):
        raise UserError(f"{directory} has no masked-LM head, so it cannot be exported for fill-mask",
                        where=str(directory), fix="export it with --task features (the bare encoder), or give "
                                                  "a pretraining checkpoint")
    return model


def _run_mlm(model, input_ids, attention_mask, token_type_ids) -> dict:
    out = model.encoder(input_ids, attention_mask, token_type_ids)
    logits = model.mlm(out.padded(), model.encoder.embeddings.word.weight)   # [B, T, V]
    return {"logits": logits}


def _load_classifier(directory: Path):
    from bertcli.model.checkpoint import load_checkpoint

    model, report = load_checkpoint(directory, head="classification")
    if any(n.startswith("classifier") for n in report.fresh):
        raise UserError(f"{directory} has no trained classifier (its weights are missing)", where=str(directory),
                        fix="fine-tune it first, or export it with --task features")
    return model


def _run_classifier(model, input_ids, attention_mask, token_type_ids) -> dict:
    return {"logits": model(input_ids, attention_mask, token_type_ids)}    # [B, C]


def checkpoint_head(directory: Path) -> str:
    """The load_checkpoint head that matches config.json's architectures."""
    from bertcli.model.hf import read_config

    arch = architecture(directory)
    heads = read_config(directory).spec.architectures
    return next((head for head, name in heads.items() if name == arch), "pretraining")


def _load_encoder(directory: Path):
    """The bare encoder of any checkpoint (its heads are not read); a fresh pooler is left out."""
    from bertcli.model.checkpoint import load_checkpoint

    model, report = load_checkpoint(directory, head=checkpoint_head(directory))
    encoder: Any = model.encoder              # an Encoder; `pooled` and `config` are added for the export
    encoder.pooled = encoder.pooler is not None and not any("pooler" in n for n in report.fresh)
    encoder.config = model.config
    return encoder


def _run_encoder(encoder, input_ids, attention_mask, token_type_ids) -> dict:
    out = encoder(input_ids, attention_mask, token_type_ids)
    result = {"last_hidden_state": out.padded()}                        # [B, T, H]
    if encoder.pooled:
        result["pooler_output"] = encoder.pool(out)                    # [B, H]
    return result


def _load_fine_tuned(head: str, param: str, what: str):
    def load(directory: Path):
        from bertcli.model.checkpoint import load_checkpoint

        model, report = load_checkpoint(directory, head=head)
        if any(n.startswith(param) for n in report.fresh):
            raise UserError(f"{directory} has no trained {what} head ({param} is missing)", where=str(directory),
                            fix="fine-tune it first, or export it with --task features")
        return model
    return load


def _run_token(model, input_ids, attention_mask, token_type_ids) -> dict:
    return {"logits": model(input_ids, attention_mask, token_type_ids)}    # [B, T, C]


def _run_qa(model, input_ids, attention_mask, token_type_ids) -> dict:
    start, end = model(input_ids, attention_mask, token_type_ids)          # 2 x [B, T]
    return {"start_logits": start, "end_logits": end}


register(HeadKind("fill-mask", ("ForPreTraining", "ForMaskedLM"), _load_mlm, _run_mlm,
                  {"logits": ("batch", "sequence", "vocab")}, "masked-LM logits at every position",
                  aliases=("mlm", "pretraining")))
register(HeadKind("classification", ("ForSequenceClassification",), _load_classifier, _run_classifier,
                  {"logits": ("batch", "labels")}, "sequence classification / regression logits",
                  aliases=("sequence-classification", "classify", "glue")))
register(HeadKind("features", ("Model",), _load_encoder, _run_encoder,
                  {"last_hidden_state": ("batch", "sequence", "hidden"), "pooler_output": ("batch", "hidden")},
                  "the bare encoder's hidden states (and pooled [CLS] where the family has a pooler)",
                  aliases=("feature-extraction", "encoder")))
register(HeadKind("token-classification", ("ForTokenClassification",), _load_fine_tuned("token", "classifier", "token"),
                  _run_token, {"logits": ("batch", "sequence", "labels")}, "per-token label logits (NER)",
                  aliases=("ner", "token")))
register(HeadKind("question-answering", ("ForQuestionAnswering",), _load_fine_tuned("qa", "qa_outputs", "span"),
                  _run_qa, {"start_logits": ("batch", "sequence"), "end_logits": ("batch", "sequence")},
                  "answer-span start and end logits (SQuAD)", aliases=("qa", "squad")))


# ------------------------------------------------------------------------------------ choosing
def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {Path(path).name}: {e}", where=str(path))


def architecture(directory: Path) -> str:
    """config.json's first `architectures` entry ("" when there is none)."""
    archs = read_json(Path(directory) / "config.json").get("architectures") or [""]
    return str(archs[0])


def get_kind(task: str) -> HeadKind:
    key = task.strip().lower().replace("_", "-")
    for kind in HEADS.values():
        if key == kind.task or key in kind.aliases:
            return kind
    raise UserError(f"unknown task {task!r}" + did_you_mean(key, list(HEADS)),
                    fix="tasks: " + ", ".join(HEADS))


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
                    fix="exportable heads: " + ", ".join(f"{k.task} (*{'/*'.join(k.suffixes)})" for k in HEADS.values())
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
