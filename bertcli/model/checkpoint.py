"""Checkpoints are Hugging Face directories: config.json (transformers' keys + a `bertcli` block),
model.safetensors (transformers' parameter names), tokenizer files.

Loading takes any transformers directory of a known family (bert, roberta, albert, ...): with or without the base
prefix (`bert.` ...; a bare BertModel / sentence-embedding directory has none), with or without
heads. Heads and pooler missing from the checkpoint are initialized fresh and listed in the
LoadReport; a missing encoder tensor, a shape that contradicts config.json or a tensor the config
does not describe is a UserError. Weights are read with safetensors only, never unpickled.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from bertcli.config.checkpoint import LABELLED_HEADS, RTD_HEAD, read_config, weight_files
from bertcli.config.families import DISCRIMINATOR, FamilySpec
from bertcli.config.model import EncoderConfig
from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.core.fs import write_atomic
from bertcli.model.electra import Discriminator
from bertcli.model.heads import PreTrainingModel, SequenceClassifier, default_labels
from bertcli.model.hf import (
    decoder_keys,
    encoder_prefixes,
    is_encoder_param,
    to_hf_config,
    transformers_caveats,
    uses_pooler,
    weight_map,
)
from bertcli.model.manifest import verify_checkpoint, write_manifest
from bertcli.model.task_heads import MODELS as TASK_MODELS
from bertcli.model.task_heads import SpanExtractor, TokenClassifier
from bertcli.model.validate import check_checkpoint, header_shapes

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                   "vocab.json", "merges.txt", "added_tokens.json", "spiece.model", "sentencepiece.bpe.model")
Model = PreTrainingModel | SequenceClassifier | TokenClassifier | SpanExtractor | Discriminator
MODEL_CLASSES = (PreTrainingModel, SequenceClassifier, TokenClassifier, SpanExtractor, Discriminator)
HEADS = ("pretraining", "classification", *TASK_MODELS, "discriminator")

_logged: set[str] = set()


@dataclass
class LoadReport:
    """What load_checkpoint did beyond copying tensors."""

    directory: Path
    fresh: list[str] = field(default_factory=list)   # transformers names initialized fresh
    unused: list[str] = field(default_factory=list)  # tensors of the checkpoint this model has no use for
    notes: list[str] = field(default_factory=list)   # anything else the user should know

    @property
    def warnings(self) -> list[str]:
        out = list(self.notes)
        if self.fresh:
            out.append(f"initialized fresh (not in {self.directory}): " + ", ".join(self.fresh))
        return out


def _warn_once(message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        console.log(f"warning: {message}")


def unwrap(model: nn.Module) -> Model:
    """The bertcli model inside torch.compile / DDP wrappers."""
    while not isinstance(model, MODEL_CLASSES):
        inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
        if inner is None:
            raise TypeError(f"not a bertcli model: {type(model).__name__}")
        model = inner
    return model


def head_of(model: Model) -> str:
    if isinstance(model, (TokenClassifier, SpanExtractor)):
        return model.head
    if isinstance(model, Discriminator):
        return "discriminator"
    return "classification" if isinstance(model, SequenceClassifier) else "pretraining"


# ------------------------------------------------------------------------------------------ save
def save_checkpoint(model: nn.Module, directory: str | Path, tokenizer_dir: str | Path | None = None) -> list[str]:
    """Write config.json, model.safetensors and the tokenizer files into `directory` (each file
    under a temporary name, renamed when complete). A Discriminator of a family without an
    Electra class keeps its RTD head in bertcli's own RTD_HEAD file beside them (in the manifest
    too), and its config.json names the family's pretraining class, whose MLM head the
    directory lacks. Returns the caveats for transformers users (also logged once per process)."""
    model = unwrap(model)
    c, head = model.config, head_of(model)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = model.state_dict()
    tensors: dict[str, Tensor] = {}
    wmap = weight_map(c, head)
    unmapped = set(state) - set(wmap)
    if unmapped:  # a parameter without a transformers name would be silently lost
        raise RuntimeError(f"no transformers name for {sorted(unmapped)}")
    for ours, copies in wmap.items():
        t = state[ours].detach()
        for parts in copies:
            for name, chunk in zip(parts, t.chunk(len(parts), 0)):
                tensors[name] = chunk.to("cpu", copy=True).contiguous()
    from safetensors.torch import save_file

    files = {"model.safetensors": tensors}
    if head == "discriminator" and head not in c.spec.architectures:   # no transformers class holds the RTD head
        files[RTD_HEAD] = {name: tensors.pop(name) for name in list(tensors) if name.startswith(DISCRIMINATOR)}
    for name, part in files.items():
        write_atomic(directory / name, lambda p, t=part: save_file(t, str(p), metadata={"format": "pt"}))
    written = [*files, "config.json"]
    if tokenizer_dir is not None:
        written += copy_tokenizer(tokenizer_dir, directory)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    config = to_hf_config(c, head, dtype)
    write_atomic(directory / "config.json",
            lambda p: p.write_text(jsonout.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8"))
    write_manifest(directory, written)  # last: sizes and sha256 of what it wrote, verified before any load
    notes = transformers_caveats(c)
    for note in notes:
        _warn_once(note)
    return notes


def copy_tokenizer(tokenizer_dir: str | Path, directory: Path) -> list[str]:
    src = Path(tokenizer_dir)
    found = [n for n in TOKENIZER_FILES if (src / n).is_file()]
    if not found:
        raise UserError(f"no tokenizer files in {src}", where=str(src),
                        fix="give the tokenizer directory written by `bertcli tokenize` (tokenizer.json, ...)")
    for name in found:
        write_atomic(directory / name, lambda p, n=name: shutil.copyfile(src / n, p))
    return found


# ------------------------------------------------------------------------------------------ load
def read_weights(directory: Path) -> dict[str, Tensor]:
    """All tensors of model.safetensors (or of the shards its index lists)."""
    state: dict[str, Tensor] = {}
    for path in weight_files(directory):
        state.update(read_file(path, where=str(directory)))
    return state


def read_file(path: Path, where: str | None = None) -> dict[str, Tensor]:
    """The tensors of one safetensors file; a UserError naming `where` (default: the file)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise UserError(f"cannot read the weights: {e}", where=where or str(path),
                        fix="the safetensors file is damaged or incomplete; save the checkpoint again")


def _legacy_name(key: str) -> str:
    # TF-converted checkpoints name LayerNorm parameters gamma / beta.
    if key.endswith(".gamma"):
        return key[:-6] + ".weight"
    if key.endswith(".beta"):
        return key[:-5] + ".bias"
    return key


def _base_prefix(state: Collection[str], spec: FamilySpec, where: str) -> str:
    base = spec.hf_prefix
    if any(k.startswith(base) for k in state):
        return base
    if any(k.startswith("embeddings.") for k in state):
        return ""  # encoder-only directory (BertModel, sentence-embedding models)
    raise UserError(f"the weights hold no {base}* or embeddings.* tensors: not a {spec.model_type} model",
                    where=where, fix="check that config.json and model.safetensors belong together")


def _gather(state: dict[str, Tensor], copies: list[tuple[str, ...]]) -> list[Tensor] | None:
    """The tensor of each stored copy (parts concatenated), or None unless every copy is there
    (a checkpoint missing one layer's copy must not load layer 0 in its place)."""
    out = []
    for parts in copies:
        if not all(p in state for p in parts):
            return None
        out.append(state[parts[0]] if len(parts) == 1 else torch.cat([state[p] for p in parts], 0))
    return out


def missing_heads(directory: str | Path) -> set[str]:
    """The pretraining heads ("mlm", "pair") of which the checkpoint stores no complete copy, by
    load_checkpoint's own name map, read from the safetensors headers (no tensor is read):
    load_checkpoint would start them fresh, with random weights, and any figure of theirs would
    change from run to run."""
    directory = Path(directory)
    c = read_config(directory)
    stored = set(header_shapes(directory, _legacy_name))
    wmap = weight_map(c, "pretraining", _base_prefix(stored, c.spec, str(directory / "model.safetensors")))
    bias_alias = decoder_keys(c.spec)[1]

    def complete(ours: str) -> bool:
        if all(p in stored for parts in wmap[ours] for p in parts):
            return True
        return ours == "mlm.bias" and bias_alias in stored

    return {head for head in ("mlm", "pair") if not all(complete(o) for o in wmap if o.startswith(head + "."))}


def load_checkpoint(directory: str | Path, head: str = "pretraining", num_labels: int | None = None,
                    labels: Sequence[str] | None = None,
                    dropout: float | None = None) -> tuple[Model, LoadReport]:
    """Load any HF directory of a known family as a PreTrainingModel, a SequenceClassifier
    (head="classification") or a TokenClassifier (head="token") with `labels` / `num_labels`
    (default: the checkpoint's own classifier labels), or a SpanExtractor (head="qa"); heads the
    checkpoint lacks start fresh and are listed in the report. `dropout` replaces the hidden, attention and classifier
    dropout rates of config.json (fine-tuning regularization is not pretraining's). Returns the
    model (eval mode, CPU, fp32) and a report."""
    directory = Path(directory)
    c = read_config(directory, head)
    if dropout is not None:
        c = c.replace(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, classifier_dropout=dropout)
    check_checkpoint(directory, c, head, _legacy_name)  # shapes vs headers, tokenizer vs model: before any allocation
    report = LoadReport(directory)
    state = {_legacy_name(k): v for k, v in read_weights(directory).items()}
    if head == "discriminator" and (directory / RTD_HEAD).is_file():  # a family-layout discriminator's head
        state.update(read_file(directory / RTD_HEAD))
    where = str(directory / "model.safetensors")
    base = _base_prefix(state, c.spec, where)

    if head not in HEADS:
        raise ValueError(f"unknown head {head!r}; one of {HEADS}")
    if head in LABELLED_HEADS:
        wanted = c.labels  # the checkpoint's own, unless others are asked for
        if labels is not None or (num_labels is not None and num_labels != len(c.labels or ())):
            wanted = default_labels(labels, num_labels)
        if wanted is None:
            raise UserError(f"{directory} has no classification head", fix="give the number of labels")
        c = c.replace(labels=wanted)
    wmap = weight_map(c, head, base)
    if any(len(copies) > 1 and not _same(_gather(state, copies)) for copies in wmap.values()):
        report.notes.append(f"the stored layers differ although config.json says {c.sharing} sharing "
                            "(trained apart outside bertcli?): loaded without sharing")
        c = c.replace(sharing="none", num_hidden_groups=1)
        wmap = weight_map(c, head, base)

    classes = {"pretraining": PreTrainingModel, "classification": SequenceClassifier, **TASK_MODELS,
               "discriminator": Discriminator}
    built = classes[head](c)  # task_heads.MODELS is typed as building a plain nn.Module
    assert isinstance(built, MODEL_CLASSES)
    model: Model = built
    params = model.state_dict()
    tensors: dict = {}
    used: set[str] = set()
    for ours, copies in wmap.items():
        found = _gather(state, copies)
        if found is None and ours == "mlm.bias" and decoder_keys(c.spec)[1] in state:
            found, copies = [state[decoder_keys(c.spec)[1]]], [(decoder_keys(c.spec)[1],)]
        if found is None:
            report.fresh.extend(copies[0])
            continue
        used.update(p for parts in copies for p in parts)
        if found[0].shape != params[ours].shape:
            if ours.startswith("classifier.") and c.labels is not None:
                report.notes.append(f"the checkpoint's classifier has another number of labels than "
                                    f"{len(c.labels)}: initialized fresh")
                report.fresh.extend(copies[0])
                continue
            shape = tuple(found[0].shape)
            raise UserError(f"{copies[0][0]} has shape {shape} but config.json describes "
                            f"{tuple(params[ours].shape)}", where=where,
                            fix="config.json and model.safetensors do not belong together")
        tensors[ours] = found[0]
    missing = [name for name in params if name not in tensors and is_encoder_param(name)]
    if missing:
        first = wmap[missing[0]][0][0]
        raise UserError(f"{len(missing)} encoder tensors described by config.json are missing from the "
                        f"weights (first: {first})", where=where,
                        fix="config.json and model.safetensors do not belong together")
    _sort_leftovers(state, used, base, c, report, where, pooled=uses_pooler(head))
    # Last of the checks, so that the specific ones above name what is inconsistent: every file
    # against the manifest written with it (or, without one, each safetensors file's length).
    verify_checkpoint(directory)
    with torch.no_grad():
        for name, tensor in tensors.items():
            params[name].copy_(tensor)
    for warning in report.warnings:
        console.log(f"warning: {warning}")
    return model.eval(), report


def _same(tensors: list[Tensor] | None) -> bool:
    return not tensors or all(torch.equal(tensors[0], t) for t in tensors[1:])


def _sort_leftovers(state, used, base, c: EncoderConfig, report: LoadReport, where: str,
                    pooled: bool = True) -> None:
    """Tensors nothing read: buffers and tied decoders are fine, encoder tensors the config does
    not describe are a mismatch, other heads are listed as unused."""
    dec_weight, dec_bias = decoder_keys(c.spec)
    encoder_roots = encoder_prefixes(c.spec, base)
    strays = []
    for key in sorted(set(state) - used):
        if key.endswith(("position_ids", "embeddings.token_type_ids")) or key == dec_bias:
            continue
        if key == dec_weight:
            if base + "embeddings.word_embeddings.weight" in used and not torch.equal(
                    state[key], state[base + "embeddings.word_embeddings.weight"]):
                report.notes.append(f"{key} differs from the word embeddings: bertcli ties them, "
                                    "the untied decoder was ignored")
            continue
        if key.startswith(encoder_roots) and not (key.startswith(base + "pooler") and not (c.has_pooler and pooled)):
            strays.append(key)
        else:
            report.unused.append(key)
    if strays:
        raise UserError(f"the weights hold {len(strays)} encoder tensors that config.json does not describe "
                        f"(first: {strays[0]})", where=where,
                        fix="config.json and model.safetensors do not belong together")
