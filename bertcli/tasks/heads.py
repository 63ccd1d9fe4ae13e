"""One `HeadKind` per head: everything fine-tuning, export, predict and `export --dev` need to know
about it, in one record (in place of three registries keyed by the same task string).

    name         the task name of --task, export_info.json and predict ("token-classification")
    aliases      the other names it answers to, old bundles' and results.json's included
                 (`token` -- the model layer's and fine-tuning's head name --, `ner`, ...)
    model_head   the head load_checkpoint builds ("classification", "token", "qa", "pretraining")
    suffixes     the endings of config.json `architectures` it answers to ("ForTokenClassification")
    load(dir)    the bertcli model in eval mode, or a UserError when the checkpoint lacks the head
    run(model, input_ids, attention_mask, token_type_ids) -> {output name: tensor}, in output order
    outputs      every output it may produce, with its axes ("batch", "sequence" are dynamic)
    featurizer   Context -> the featurizer (bertcli.tasks.featurizer) fine-tuning and predict share
    dev_metric   labels -> (gold(rec, where), metric(gold, predictions)) for `export --dev`, or None

Fine-tuning imports this module from below export, so export, predict and the tasks read one
table; a new head is one `register(...)` call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bertcli.config.checkpoint import is_discriminator
from bertcli.core import jsonout
from bertcli.core.errors import UserError, did_you_mean
from bertcli.tasks.classification import SequenceFeaturizer
from bertcli.tasks.classification import dev_metric as classification_metric
from bertcli.tasks.embed import EmbedFeaturizer, load_embed, run_embed_head
from bertcli.tasks.encoder_heads import FeaturesFeaturizer, FillMaskFeaturizer
from bertcli.tasks.qa.decode import SpanFeaturizer
from bertcli.tasks.tagging.windows import TagFeaturizer


@dataclass(frozen=True)
class HeadKind:
    name: str
    model_head: str
    suffixes: tuple[str, ...]
    load: Callable[[Path], object]
    run: Callable[..., dict]
    outputs: dict[str, tuple[str, ...]]
    featurizer: Callable
    dev_metric: Callable | None = None
    description: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)
    optional: tuple[str, ...] = ()      # outputs a graph of this kind may lack (pooler_output)

    @property
    def task(self) -> str:
        """The name export_info.json and predict report (= name)."""
        return self.name

    @property
    def per_token(self) -> frozenset:
        """The outputs with a sequence axis ([B, T, ...]): cut to each window's real tokens."""
        return frozenset(n for n, axes in self.outputs.items() if axes[1:2] == ("sequence",))


HEADS: dict[str, HeadKind] = {}


def register(kind: HeadKind) -> HeadKind:
    """Make a head kind known to fine-tuning, export and predict; the last registration of a name wins."""
    HEADS[kind.name] = kind
    return kind


def head_kind(name: str) -> HeadKind:
    """The head kind of a task name or any alias (`token`, `ner`, `squad`, ...)."""
    key = name.strip().lower().replace("_", "-")
    for kind in HEADS.values():
        if key == kind.name or key in kind.aliases:
            return kind
    raise UserError(f"unknown task {name!r}" + did_you_mean(key, list(HEADS)), fix="tasks: " + ", ".join(HEADS))


# ------------------------------------------------------------------------------ loading, running
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


def saved_head(directory: Path) -> str:
    """The load_checkpoint head whose architecture config.json names ("pretraining" when none
    does), so no other head is reported as fresh."""
    try:
        arch = architecture(directory)
    except UserError:
        return "pretraining"                   # load_checkpoint reports what is wrong
    if is_discriminator(directory, arch):     # an RTD discriminator: the encoder + its RTD head
        return "discriminator"
    for kind in HEADS.values():
        if kind.model_head != "pretraining" and any(arch.endswith(s) for s in kind.suffixes if s != "Model"):
            return kind.model_head
    return "pretraining"


def architecture(directory: Path) -> str:
    """config.json's first `architectures` entry ("" when there is none)."""
    import json

    path = Path(directory) / "config.json"
    try:
        archs = json.loads(path.read_text(encoding="utf-8")).get("architectures") or [""]
    except (OSError, ValueError, UnicodeDecodeError, AttributeError) as e:
        raise UserError(f"cannot read config.json: {e}", where=str(path))
    if not isinstance(archs, list) or not isinstance(archs[0], str):
        raise UserError(f"config.json key 'architectures' is {jsonout.quote(archs)[:100]}, not a list of class names",
                        where=f"{path}: architectures", fix='e.g. "architectures": ["BertForSequenceClassification"]')
    return archs[0]


def _load_encoder(directory: Path):
    """The bare encoder of any checkpoint (its heads are not read); a fresh pooler is left out."""
    from bertcli.model.checkpoint import load_checkpoint

    model, report = load_checkpoint(directory, head=saved_head(directory))
    encoder = model.encoder
    encoder.pooled = encoder.pooler is not None and not any("pooler" in n for n in report.fresh)  # type: ignore[assignment]  # a plain flag: nn.Module.__setattr__ is typed for tensors/modules only
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


def _run_logits(model, input_ids, attention_mask, token_type_ids) -> dict:
    return {"logits": model(input_ids, attention_mask, token_type_ids)}    # [B, C] | [B, T, C]


def _run_qa(model, input_ids, attention_mask, token_type_ids) -> dict:
    start, end = model(input_ids, attention_mask, token_type_ids)          # 2 x [B, T]
    return {"start_logits": start, "end_logits": end}


register(HeadKind("fill-mask", "pretraining", ("ForPreTraining", "ForMaskedLM"), _load_mlm, _run_mlm,
                  {"logits": ("batch", "sequence", "vocab")}, FillMaskFeaturizer,
                  description="masked-LM logits at every position", aliases=("mlm", "pretraining")))
register(HeadKind("classification", "classification", ("ForSequenceClassification",),
                  _load_fine_tuned("classification", "classifier", "classifier"), _run_logits,
                  {"logits": ("batch", "labels")}, SequenceFeaturizer, classification_metric,
                  description="sequence classification / regression logits",
                  aliases=("sequence-classification", "classify", "glue")))
register(HeadKind("features", "pretraining", ("Model",), _load_encoder, _run_encoder,
                  {"last_hidden_state": ("batch", "sequence", "hidden"), "pooler_output": ("batch", "hidden")},
                  FeaturesFeaturizer,
                  description="the bare encoder's hidden states (and pooled [CLS] where the family has a pooler)",
                  aliases=("feature-extraction", "encoder"), optional=("pooler_output",)))
register(HeadKind("token-classification", "token", ("ForTokenClassification",),
                  _load_fine_tuned("token", "classifier", "token"), _run_logits,
                  {"logits": ("batch", "sequence", "labels")}, TagFeaturizer,
                  description="per-token label logits (NER)", aliases=("ner", "token", "tagging")))
register(HeadKind("question-answering", "qa", ("ForQuestionAnswering",), _load_fine_tuned("qa", "qa_outputs", "span"),
                  _run_qa, {"start_logits": ("batch", "sequence"), "end_logits": ("batch", "sequence")},
                  SpanFeaturizer, description="answer-span start and end logits (SQuAD)",
                  aliases=("qa", "squad", "squad-v2")))
register(HeadKind("embed", "pretraining", (), load_embed, run_embed_head, {"sentence_embedding": ("batch", "hidden")},
                  EmbedFeaturizer, description="sentence embeddings: the encoder pooled (and L2-normalized) as its "
                  "sentence-transformers directory says, else mean-pooled",
                  aliases=("embedding", "sentence-embedding", "sentence-transformers")))
