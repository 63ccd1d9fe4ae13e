"""Recipes: YAML files with one section per pipeline stage, loaded strictly into dataclasses.

Loading catches mistakes before any work starts: an unknown key names its path, its line and
the closest valid key; a wrong type names the expected type; malformed YAML names the line.
`--set section.key=value` overrides (values parsed as YAML) go through the same checks.
`resolve` fills family-dependent defaults, so the recipe saved next to every output is concrete.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import math
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

from bertcli import sections
from bertcli.errors import UserError, closest, did_you_mean
from bertcli.model.config import resolve_model
from bertcli.model.families import FAMILIES, family_spec
from bertcli.model.families import position_offset as _offset
from bertcli.sections import (
    CorpusConfig,
    DataConfig,
    FinetuneConfig,
    ModelConfig,
    SourceConfig,
    TokenizerConfig,
    TrainConfig,
)


@dataclass
class Recipe:
    name: str = "bertcli"
    """Name of the run; the default output directory is runs/NAME."""
    output_dir: Optional[str] = field(default=None, metadata={"hash": False})
    """Where the run (metrics, checkpoints) and its cached stages are written. Default: runs/NAME."""
    cache_dir: Optional[str] = field(default=None, metadata={"hash": False})
    """Where cached stages (corpus, tokenizer, data) go, to share them between recipes.
    Default: output_dir."""
    seed: int = field(default=42, metadata={"ge": 0})
    """Seed for every random choice: data building, masking, initialization, dropout, order."""
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    """Text sources and the validation split."""
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    """The tokenizer trained by `bertcli tokenize`."""
    data: DataConfig = field(default_factory=DataConfig)
    """Pairs and masking, built by `bertcli build-data`."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The encoder: BERT, RoBERTa and ALBERT are settings of one model."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Pretraining: optimizer, schedule, batch, precision, checkpoints."""
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    """Fine-tuning defaults for `bertcli finetune glue`."""

    # Where the recipe came from, for messages (not a recipe field).
    source: str = field(default="<defaults>", metadata={"internal": True}, repr=False, compare=False)

    @property
    def out(self) -> Path:
        return Path(self.output_dir or f"runs/{self.name}")

    @property
    def cache(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else self.out

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "source"}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    def save(self, directory: Path) -> None:
        """Write the resolved recipe as `recipe.yaml` into an output directory."""
        (Path(directory) / "recipe.yaml").write_text(self.to_yaml(), encoding="utf-8")

    def section_hash(self, *names: str, extra: Any = None) -> str:
        """Cache key of a stage: the named sections or top-level fields (fields marked hash=False
        left out) plus `extra` (e.g. a fingerprint of the corpus files)."""
        payload = {n: _hashable(getattr(self, n)) for n in names}
        payload["extra"] = extra
        blob = json.dumps(payload, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


SECTIONS = ("corpus", "tokenizer", "data", "model", "train", "finetune")


def _hashable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {
            f.name: _hashable(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.metadata.get("hash", True)
        }
    if isinstance(obj, list):
        return [_hashable(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _hashable(v) for k, v in obj.items()}
    return obj


# ------------------------------------------------------------------------------------ loading
def shipped_recipes() -> list[str]:
    """Names of the recipes shipped as package data."""
    root = resources.files("bertcli.recipes")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml"))


def find_recipe(spec: str) -> tuple[str, str]:
    """(text, display name) of a recipe given as a path or as a shipped recipe's name."""
    path = Path(spec)
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except UnicodeDecodeError as e:
            raise UserError(f"recipe is not UTF-8 text ({e.reason} at byte {e.start})", where=str(path))
    name = path.name[:-5] if path.name.endswith((".yaml", ".yml")) else path.name
    if path.parent == Path(".") and name in shipped_recipes():
        res = resources.files("bertcli.recipes") / f"{name}.yaml"
        return res.read_text(encoding="utf-8"), f"{name}.yaml (shipped)"
    names = shipped_recipes()
    raise UserError(
        f"no recipe file {spec!r} and no shipped recipe of that name" + did_you_mean(name, names),
        fix="give a path to a YAML file, or one of: " + ", ".join(names),
    )


def load_recipe(spec: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Load a recipe (path or shipped name; None = all defaults), apply `--set` overrides,
    check every key and type, fill family defaults and validate cross-field rules."""
    if spec is None:
        raw: dict = {}
        lines: dict = {}
        where = "<defaults>"
    else:
        text, where = find_recipe(spec)
        raw, lines = parse_yaml(text, where)
    given = frozenset(k for k in raw if k in SECTIONS)      # sections the file itself sets
    for item in overrides:
        apply_override(raw, item, lines)
    recipe = build(Recipe, raw, "", _Ctx(where, lines))
    recipe.source = where
    recipe.given_sections = given               # read by check_purpose; not a recipe field
    resolve(recipe)
    validate(recipe)
    return recipe


PRETRAIN_SECTIONS = ("corpus", "tokenizer", "data", "model", "train")


def check_purpose(recipe: Recipe, command: str) -> None:
    """Refuse a recipe made for the other kind of command: `pretrain -r glue` would otherwise
    train a 30k tokenizer from defaults, and `finetune -r bert-tiny` would fine-tune with
    defaults nobody chose. A recipe file that sets both kinds of section (e.g. a run's saved
    recipe.yaml) suits both; so does no recipe at all."""
    given: frozenset = getattr(recipe, "given_sections", frozenset())
    if not given:
        return
    pretraining = any(s in given for s in PRETRAIN_SECTIONS)
    finetuning = "finetune" in given
    if command == "finetune" and pretraining and not finetuning:
        raise UserError(f"{recipe.source} is a pretraining recipe: it has no finetune section for "
                        "`bertcli finetune` to read",
                        fix="use a fine-tuning recipe (-r glue, the default) or add a finetune: section to it; "
                            "`bertcli recipes` lists them")
    if command != "finetune" and finetuning and not pretraining:
        raise UserError(f"{recipe.source} is a fine-tuning recipe (it sets only finetune), and `bertcli "
                        f"{command}` needs a pretraining recipe",
                        fix=f"fine-tune with `bertcli finetune ... -r {recipe.name}`, or {command} with a pretraining "
                            "recipe such as bert-tiny (`bertcli recipes` lists them)")


def parse_yaml(text: str, where: str) -> tuple[dict, dict[str, int]]:
    """Parse YAML into a dict plus the line (1-based) of every key path, for messages."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise UserError(f"malformed YAML: {problem}", where=f"{where}{line}",
                        fix="check the indentation and quoting on that line")
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise UserError("a recipe must be a mapping of sections (corpus:, tokenizer:, ...)", where=where)
    lines: dict[str, int] = {}

    def walk(n, prefix):
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                path = f"{prefix}{k.value}"
                lines[path] = k.start_mark.line + 1
                walk(v, path + ".")

    walk(node, "")
    return data, lines


def apply_override(raw: dict, item: str, lines: dict[str, int]) -> None:
    """Apply one `section.key=value` override (value parsed as YAML) to the raw recipe dict."""
    if "=" not in item:
        raise UserError(f"--set {item!r}: expected section.key=value", fix="e.g. --set train.max_steps=100")
    key, value_text = item.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(value_text) if value_text.strip() else None
    except yaml.YAMLError as e:
        raise UserError(f"--set {key}: value {value_text!r} is not valid YAML ({e})")
    parts = key.split(".")
    if not all(parts):
        raise UserError(f"--set {item!r}: empty key part", fix="e.g. --set train.max_steps=100")
    node = raw
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise UserError(f"--set {key}: {'.'.join(parts[: i + 1])} is not a section")
        node = nxt
    node[parts[-1]] = value
    lines[key] = 0  # 0 marks "from --set" in messages


@dataclass
class _Ctx:
    where: str
    lines: dict[str, int]

    def at(self, path: str) -> str:
        line = self.lines.get(path)
        if line == 0:
            return f"--set {path}"
        return f"{self.where}:{line}" if line else self.where


def build(cls: type, raw: Any, path: str, ctx: _Ctx):
    """Build dataclass `cls` from `raw`, checking every key and value; `path` names it in messages."""
    shorthand = _shorthand(cls)
    if shorthand and not isinstance(raw, dict):
        raw = {shorthand: raw}
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        name = path.rstrip(".") or "recipe"
        raise UserError(f"{name}: expected a mapping, got {_describe(raw)}", where=ctx.at(name))
    flds = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    hints = typing.get_type_hints(cls)
    for key in raw:
        if key not in flds:
            full = f"{path}{key}"
            raise UserError(
                f"{full}: unknown key" + did_you_mean(str(key), flds, prefix=path),
                where=ctx.at(full),
                fix=f"see `bertcli explain {path.rstrip('.') or 'recipe'}` for the valid keys",
            )
    kwargs = {}
    for name, f in flds.items():
        full = f"{path}{name}"
        if name in raw:
            kwargs[name] = coerce(raw[name], hints[name], full, ctx)
            check_value(kwargs[name], f, full, ctx.at(full))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise UserError(f"{full}: required key is missing", where=ctx.at(path.rstrip(".")))
    return cls(**kwargs)


def _shorthand(cls: type) -> str | None:
    return "path" if cls is SourceConfig else None


def coerce(value: Any, tp: Any, path: str, ctx: _Ctx) -> Any:
    """Check (and gently convert) one value against a type hint."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is object:  # free-form values checked by their own validator (train.phases[i].data)
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if value is None:
            raise UserError(f"{path}: must not be null; expected {_type_name(inner[0])}", where=ctx.at(path))
        for alternative in inner[:-1]:        # e.g. int | "auto": the first kind that takes the value
            try:
                return coerce(value, alternative, path, ctx)
            except UserError:
                pass
        try:
            return coerce(value, inner[-1], path, ctx)
        except UserError as e:
            if len(inner) == 1:
                raise
            raise UserError(f"{path}: expected {' or '.join(_pretty_type(a) for a in inner)}, got {_describe(value)}",
                            where=ctx.at(path)) from e
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, path + ".", ctx)
    if origin is Literal:
        if value in args:
            return value
        choices = [str(a) for a in args]
        raise UserError(
            f"{path}: {value!r} is not one of: {', '.join(choices)}"
            + (f"; did you mean {best}?" if (best := closest(str(value), choices)) else ""),
            where=ctx.at(path),
        )
    if origin is list:
        if not isinstance(value, list):
            raise UserError(f"{path}: expected a list, got {_describe(value)}", where=ctx.at(path))
        return [coerce(v, args[0], f"{path}[{i}]", ctx) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{path}: expected a mapping, got {_describe(value)}", where=ctx.at(path))
        return {str(k): coerce(v, args[1], f"{path}.{k}", ctx) for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{path}: expected true or false, got {_describe(value)}", where=ctx.at(path))
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        number = _as_number(value)
        if number is not None and float(number).is_integer():
            return int(number)
        raise UserError(f"{path}: expected an integer, got {_describe(value)}", where=ctx.at(path))
    if tp is float:
        number = _as_number(value)
        if number is not None:
            return float(number)
        raise UserError(f"{path}: expected a number, got {_describe(value)}", where=ctx.at(path))
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise UserError(f"{path}: expected a string, got {_describe(value)}", where=ctx.at(path))
    raise TypeError(f"recipe field {path} has an unsupported type {tp!r}")  # a bug, not user input


def _as_number(value: Any) -> float | int | None:
    # PyYAML reads `1e-4` (no dot) as a string; accept it as the number everyone means.
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value.replace("_", ""))
        except ValueError:
            return None
    return None


_BOUNDS = (("ge", lambda v, b: v >= b, ">="), ("gt", lambda v, b: v > b, ">"), ("le", lambda v, b: v <= b, "<="))


def check_value(value: Any, f: dataclasses.Field, path: str, where: str) -> None:
    """The one check every number of every section goes through (at load time with the line of
    the key, and again on the resolved recipe): finite, and within the field's declared bounds
    (`ge` / `gt` / `le` metadata). A nan compares false with every bound, so finiteness comes
    first: an unbounded float must not let nan or inf through either."""
    if isinstance(value, dict):
        numbers = [(f"{path}.{k}", v) for k, v in value.items()]
    else:
        numbers = [(path, v) for v in (value if isinstance(value, list) else [value])]
    for path, v in numbers:
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            raise UserError(f"{path}: must be a finite number, got {v}", where=where,
                            fix="nan and inf are not settings; give a number")
        for key, ok, word in _BOUNDS:
            bound = f.metadata.get(key)
            if bound is not None and not ok(v, bound):
                raise UserError(f"{path}: must be {word} {bound}, got {v}", where=where)


def check_values(obj: Any, prefix: str, where: str) -> None:
    """check_value on every field of a section tree (lists and mappings of sections included):
    values filled in by `resolve` or set from Python get the checks that loading gave the rest."""
    if not dataclasses.is_dataclass(obj):
        return
    for f in dataclasses.fields(obj):
        if f.metadata.get("internal"):
            continue
        value, path = getattr(obj, f.name), f"{prefix}{f.name}"
        check_value(value, f, path, where)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for k, v in items:
            check_values(v, f"{path}.{k}." if isinstance(value, dict) else f"{path}[{k}].", where)
        check_values(value, path + ".", where)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    return f"{type(value).__name__} {value!r}"


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, str(tp))


# ------------------------------------------------------------------------------ resolution
def resolve(r: Recipe) -> None:
    """Fill the fields left at None with the model family's (and tokenizer's) values."""
    m = resolve_model(r.model)
    t = r.tokenizer
    if t.special_tokens is None:
        t.special_tokens = m.family          # each family's own set (FamilySpec.special_tokens)
    if t.strip_accents is None:
        t.strip_accents = t.lowercase
    tr = r.train
    if tr.warmup_ratio is not None:
        tr.warmup_steps = round(tr.warmup_ratio * tr.max_steps)


def position_offset(m: ModelConfig, special_tokens: Optional[str] = None) -> int:
    """Index of the first position embedding used (RoBERTa: padding_idx + 1 = 2), with the pad
    id of the special-token set (default: the family's own)."""
    pad = family_spec(special_tokens or m.family).pad_id
    return _offset(family_spec(m.family), pad)


def validate(r: Recipe) -> None:
    """Rules that involve more than one field."""
    m, d, t, tr = r.model, r.data, r.tokenizer, r.train
    where = r.source

    def fail(what, fix=None):
        raise UserError(what, where=where, fix=fix)

    check_values(r, "", where)
    if tr.warmup_steps >= tr.max_steps > 0 and "train" in getattr(r, "given_sections", ()):
        from bertcli import console

        console.log(f"warning: train.warmup_steps {tr.warmup_steps:,} >= train.max_steps {tr.max_steps:,}: the run "
                    "never leaves warmup and never reaches its peak learning rate; set train.warmup_ratio "
                    "(e.g. --set train.warmup_ratio=0.1) or a smaller train.warmup_steps")
    if m.hidden_size % m.num_attention_heads:
        fail(f"model.hidden_size {m.hidden_size} is not divisible by model.num_attention_heads "
             f"{m.num_attention_heads}", "pick a head count that divides the width (e.g. H/64 heads)")
    if m.sharing == "none" and m.num_hidden_groups != 1:
        fail("model.num_hidden_groups needs model.sharing (all, attention or ffn)")
    if m.num_hidden_layers % m.num_hidden_groups:
        fail(f"model.num_hidden_layers {m.num_hidden_layers} is not divisible by model.num_hidden_groups "
             f"{m.num_hidden_groups}")
    if m.vocab_size is not None and m.vocab_size != t.vocab_size:
        fail(f"model.vocab_size {m.vocab_size} differs from tokenizer.vocab_size {t.vocab_size}",
             "leave model.vocab_size unset (it follows the tokenizer) or make them equal")
    offset = position_offset(m, t.special_tokens)
    usable = m.max_position_embeddings - offset
    if d.max_seq_length > usable:
        extra = (f" ({family_spec(m.family).display} positions start at {offset} = padding_idx + 1, so it "
                 f"needs max_seq_length + {offset})" if offset else "")
        fail(f"data.max_seq_length {d.max_seq_length} exceeds the model's {usable} positions "
             f"(model.max_position_embeddings {m.max_position_embeddings}){extra}",
             "lower data.max_seq_length or raise model.max_position_embeddings")
    if d.mask_replace_prob + d.random_replace_prob > 1.0 + 1e-9:
        fail("data.mask_replace_prob + data.random_replace_prob exceed 1")
    spec = family_spec(m.family)
    if spec.attention == "global" and m.local_attention:
        fail(f"model.local_attention {m.local_attention}: the {m.family} family attends globally in every layer",
             "leave model.local_attention unset, or use a family with local attention: "
             + ", ".join(s.name for s in FAMILIES.values() if s.attention == "alternating"))
    if d.objective not in ("none", spec.pair_head):  # MLM only is fine with any head
        arch = spec.architectures["pretraining"]
        if spec.pair_head == "none":
            fail(f"data.objective {d.objective} needs a sentence-pair head, and the {m.family} family "
                 f"({arch}) has none",
                 "use data.objective: none, or model.family: " + _family_choices())
        with_head = [s.name for s in FAMILIES.values() if s.pair_head == d.objective]
        fail(f"data.objective {d.objective} with the {m.family} family: {arch}'s head is "
             f"{spec.pair_head.upper()}",
             f"use data.objective: {spec.pair_head} ({m.family.upper()}) or model.family: " + " / ".join(with_head))
    if d.objective != "none" and m.type_vocab_size < 2:
        fail("sentence pairs need model.type_vocab_size >= 2 (segment A and B)")
    if d.ngram > 1 and not d.whole_word:
        fail("data.ngram > 1 selects spans of whole words and needs data.whole_word: true")
    if isinstance(tr.micro_batch_size, int) and tr.batch_size % tr.micro_batch_size:
        fail(f"train.batch_size {tr.batch_size} is not a multiple of train.micro_batch_size "
             f"{tr.micro_batch_size}", "gradient accumulation needs a whole number of micro-batches")
    if tr.precision == "fp16" and tr.device == "cpu":
        fail("train.precision fp16 needs CUDA (loss scaling); on CPU use bf16 or fp32")
    if tr.phases or tr.max_time is not None:
        from bertcli.train.phases import check_plan  # torch-free; checks each phase like a recipe

        check_plan(r)


def _family_choices() -> str:
    """`bert (NSP head) / albert (SOP head)`: the families with a pair head."""
    return " / ".join(f"{s.name} ({s.pair_head.upper()} head)" for s in FAMILIES.values() if s.pair_head != "none")


# ----------------------------------------------------------------------------- help text
def field_docs(cls: type) -> dict[str, str]:
    """Field docstrings (the string literal under each field) of a dataclass and of the
    dataclasses it inherits fields from, by field name."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    try:
        tree = ast.parse(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = typing.cast(ast.ClassDef, tree.body[0]).body   # the source of a class is one class statement
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def explain(section: str | None) -> list[tuple[str, str, str, str]]:
    """(key, type, default, help) rows for a section (None or 'recipe': the top level)."""
    cls = Recipe
    prefix = ""
    if section and section != "recipe":
        parts = section.split(".")
        for part in parts:
            hints = typing.get_type_hints(cls)
            if part not in hints:
                raise UserError(f"{section}: unknown section" + did_you_mean(part, hints, prefix=prefix),
                                fix="sections: " + ", ".join(SECTIONS))
            tp = hints[part]
            args = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
            cls = tp if dataclasses.is_dataclass(tp) else (args[0] if args else None)
            if typing.get_origin(tp) is list:
                cls = typing.get_args(tp)[0]
            if typing.get_origin(tp) is dict:
                cls = typing.get_args(tp)[1]
            if cls is None:
                raise UserError(f"{section}: not a section")
            prefix += part + "."
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
            default = _hashable(default)
        else:
            default = "(required)"
        rows.append((prefix + f.name, _pretty_type(hints[f.name]), json.dumps(default, default=str)
                     if not isinstance(default, str) else default, docs.get(f.name, "")))
        if section and dataclasses.is_dataclass(hints[f.name]):   # a block inside the section
            rows += explain(prefix + f.name)                       # (finetune.ner ...): its keys too
    return rows


def _pretty_type(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " | ".join(_pretty_type(a) for a in inner) + (" | null" if type(None) in args else "")
    if origin is Literal:
        return " | ".join(map(str, args))
    if origin is list:
        return f"list of {_pretty_type(args[0])}"
    if origin is dict:
        return f"mapping to {_pretty_type(args[1])}"
    if dataclasses.is_dataclass(tp):
        return "section"
    return getattr(tp, "__name__", str(tp))


__all__ = [
    "Recipe", "load_recipe", "shipped_recipes", "explain", "field_docs", "position_offset",
    "CorpusConfig", "SourceConfig", "TokenizerConfig", "DataConfig", "ModelConfig", "TrainConfig",
    "FinetuneConfig", "sections",
]
