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
import importlib.util
import inspect
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import yaml

from bertcli.config import sections
from bertcli.config.bounds import MAX_SEED
from bertcli.config.continued import resolve_init_from
from bertcli.config.families import FAMILIES, family_spec
from bertcli.config.families import position_offset as _offset
from bertcli.config.finetune_sections import FinetuneConfig, TaskOverrides
from bertcli.config.generator import generator_shape
from bertcli.config.model import resolve_model, resolved
from bertcli.config.phases import parse_duration, plan
from bertcli.config.schema import Ctx, build, check_values, coerce, pretty_type, range_words
from bertcli.config.sections import (
    CorpusConfig,
    DataConfig,
    ModelConfig,
    SourceConfig,
    TokenizerConfig,
    TrainConfig,
)
from bertcli.core import console, jsonout
from bertcli.core.errors import UserError, did_you_mean


@dataclass
class Recipe:
    name: str = "bertcli"
    """Name of the run; the default output directory is runs/NAME."""
    output_dir: str | None = field(default=None, metadata={"hash": False})
    """Where the run (metrics, checkpoints) and its cached stages are written. Default: runs/NAME."""
    cache_dir: str | None = field(default=None, metadata={"hash": False})
    """Where cached stages (corpus, tokenizer, data) go, to share them between recipes.
    Default: output_dir."""
    language: list[str] | None = field(default=None, metadata={"hash": False})
    """Languages of the text as ISO 639-1 codes, e.g. [en], for the model card's metadata
    (null: the card names none)."""
    seed: int = field(default=42, metadata={"ge": 0, "le": MAX_SEED})
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
    # How the command that built this recipe names the keys it lets the user set (evaluate:
    # {"data.objective": "--objective"}); None: the recipe's own keys, as pretrain reads them.
    flags: dict[str, str] | None = field(default=None, metadata={"internal": True}, repr=False, compare=False)
    # A seed / learning-rate sweep's thread count, chosen once and recorded in its plan
    # (bertcli/finetune/sweep.py): each of its runs uses it where finetune.threads is auto, as a
    # resumed pretraining run uses its checkpoint's. None outside a sweep (not a recipe key).
    sweep_threads: int | None = field(default=None, metadata={"internal": True}, repr=False, compare=False)

    @property
    def out(self) -> Path:
        return Path(self.output_dir or f"runs/{self.name}")

    @property
    def cache(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else self.out

    def corpus_paths(self) -> list[Path]:
        """The local files and folders the corpus reads (builtin, hub names and globs are no path)."""
        return [Path(s.path) for s in self.corpus.sources if s.format not in ("hub", "builtin")
                and s.path != "builtin" and Path(s.path).exists()]

    def setting(self, key: str, value: object) -> str | None:
        """How the user sets `key` to `value` with this command, for a fix line: "data.objective:
        none" in a recipe, "--objective none" on a command with that flag, None where the command
        has no way to set it."""
        if self.flags is None:
            return f"{key}: {value}"
        return f"{self.flags[key]} {value}" if key in self.flags else None

    def to_dict(self) -> dict:
        internal = {f.name for f in dataclasses.fields(self) if f.metadata.get("internal")}   # source, flags, sweep_threads
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in internal}

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
        blob = jsonout.dumps(payload, sort_keys=True, default=str).encode()
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
    raw: dict
    lines: dict[str, int]
    if spec is None:
        raw, where, lines = {}, "<defaults>", {}
    else:
        text, where = find_recipe(spec)
        raw, lines = parse_yaml(text, where)
    given = frozenset(k for k in raw if k in SECTIONS)      # sections the file itself sets
    for item in overrides:
        apply_override(raw, item, lines)
    general_keys_win(raw, [item.split("=", 1)[0].strip() for item in overrides])
    _old_keys(raw)
    recipe = build(Recipe, raw, "", Ctx(where, lines))
    recipe.source = where
    recipe.given_sections = given               # read by check_purpose; not a recipe field
    # keys the file or --set gave, per section: model.init_from refuses those that contradict
    # the checkpoint (bertcli.model.init_from); not a recipe field
    recipe.given_keys = {s: frozenset(raw[s]) if isinstance(raw.get(s), dict) else frozenset()
                         for s in ("model", "tokenizer")}
    resolve(recipe)
    validate(recipe)
    return recipe


def _old_keys(raw: dict) -> None:
    """Keys renamed in this release, still read (with a note) until the next one."""
    train = raw.get("train")
    if isinstance(train, dict) and "tensorboard" in train:
        old = train.pop("tensorboard")
        if not isinstance(old, bool):
            raise UserError(f"train.tensorboard: expected true or false, got {old!r}",
                            fix="use train.report_to: [tensorboard] (or none)")
        # its meaning, kept for one release: TensorBoard events when tensorboard is installed (a
        # run directory's recipe.yaml written before has `tensorboard: true`, the old default)
        if old is True and "report_to" not in train and importlib.util.find_spec("tensorboard") is not None:
            train["report_to"] = ["tensorboard"]
        console.log("note: train.tensorboard is now train.report_to (a list of tensorboard, wandb, mlflow, "
                    f"or none); read as report_to {train.get('report_to', 'none')}")


PRETRAIN_SECTIONS = ("corpus", "tokenizer", "data", "model", "train")


def check_purpose(recipe: Recipe, command: str) -> None:
    """Refuse a recipe made for the other kind of command: `pretrain -r glue` would otherwise
    train a 30k tokenizer from defaults, and `finetune -r bert-tiny` would fine-tune with
    defaults nobody chose. A recipe file that sets both kinds of section (e.g. a run's saved
    recipe.yaml) suits both; so does no recipe at all."""
    given: frozenset[str] = getattr(recipe, "given_sections", frozenset())
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

    def walk(n: yaml.Node | None, prefix: str) -> None:
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


def general_keys_win(raw: dict, set_keys: list[str]) -> None:
    """A general fine-tuning key given on the command line (`--set finetune.learning_rate=...`,
    `--lr`) applies to every task: a task block of the recipe file that sets the same key
    (finetune.ner.learning_rate, finetune.tasks.rte.epochs) would otherwise win silently. The
    block's value is dropped, and the log says so; a block key the command line sets itself
    still wins over the general one."""
    ft = raw.get("finetune")
    if not isinstance(ft, dict):
        return
    given = set(set_keys)
    training = {f.name for f in dataclasses.fields(TaskOverrides)}
    blocks = [(name, block) for name, block in ft.items() if isinstance(block, dict) and name != "tasks"]
    if isinstance(ft.get("tasks"), dict):
        blocks += [(f"tasks.{name}", block) for name, block in ft["tasks"].items() if isinstance(block, dict)]
    for key in sorted(training & {k.removeprefix("finetune.") for k in given if k.count(".") == 1}):
        for name, block in blocks:
            path = f"finetune.{name}.{key}"
            if block.get(key) is not None and path not in given:
                console.log(f"finetune.{key}={ft[key]} from the command line applies over {path}={block[key]} of the recipe")
                del block[key]


# ------------------------------------------------------------------------------ resolution
def resolve(r: Recipe) -> None:
    """Fill the fields left at None with the model family's (and tokenizer's) values."""
    resolve_init_from(r)                     # model.init_from: the checkpoint's keys first
    m = resolve_model(r.model)
    t = r.tokenizer
    if t.special_tokens is None:
        t.special_tokens = m.family          # each family's own set (FamilySpec.special_tokens)
    if t.strip_accents is None:
        t.strip_accents = t.lowercase
    tr = r.train
    if tr.warmup_ratio is not None:
        tr.warmup_steps = round(tr.warmup_ratio * tr.max_steps)


def _check_rtd(r: Recipe, fail) -> None:
    """train.objective: rtd (ELECTRA): no pair task, dynamic masks, a generator shape that divides into heads."""
    m, d = r.model, r.data
    if d.objective != "none":
        fail(f"train.objective rtd with data.objective {d.objective}: replaced-token detection (ELECTRA) has no "
             "sentence-pair task", "set data.objective: none")
    if d.masking != "dynamic":
        fail("train.objective rtd needs data.masking: dynamic (each serving of a row gets fresh masks and "
             "fresh generator samples, keyed by (seed, epoch, row))", "set data.masking: dynamic")
    h, _, heads, _ = generator_shape(m.generator, m.hidden_size, m.num_hidden_layers, m.num_attention_heads)
    if h % heads:
        fail(f"model.generator.hidden_size {h} is not divisible by model.generator.num_attention_heads {heads}",
             "pick a generator head count that divides its width")


def position_offset(m: ModelConfig, special_tokens: str | None = None) -> int:
    """Index of the first position embedding used (RoBERTa: padding_idx + 1 = 2), with the pad
    id of the special-token set (default: the family's own)."""
    pad = family_spec(special_tokens or m.family).pad_id
    return _offset(family_spec(m.family), pad)


def validate(r: Recipe) -> None:
    """Rules that involve more than one field."""
    m, d, t, tr = r.model, r.data, r.tokenizer, r.train
    where = r.source

    def fail(what: str, fix: str | None = None) -> NoReturn:
        raise UserError(what, where=where, fix=fix)

    check_values(r, "", where)
    if tr.warmup_steps >= tr.max_steps > 0 and "train" in getattr(r, "given_sections", ()):
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
    usable = resolved(m.max_position_embeddings, "max_position_embeddings") - offset
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
    if tr.objective == "rtd":
        _check_rtd(r, fail)
    if d.objective != "none" and resolved(m.type_vocab_size, "type_vocab_size") < 2:
        fail("sentence pairs need model.type_vocab_size >= 2 (segment A and B)")
    if d.ngram > 1 and not d.whole_word:
        fail("data.ngram > 1 selects spans of whole words and needs data.whole_word: true")
    if isinstance(tr.micro_batch_size, int) and tr.batch_size % tr.micro_batch_size:
        fail(f"train.batch_size {tr.batch_size} is not a multiple of train.micro_batch_size "
             f"{tr.micro_batch_size}", "gradient accumulation needs a whole number of micro-batches")
    if tr.precision == "fp16" and tr.device == "cpu":
        fail("train.precision fp16 needs CUDA (loss scaling); on CPU use bf16 or fp32")
    if tr.phases or tr.max_time is not None:
        check_plan(r)


def check_plan(r: Recipe) -> None:
    """Recipe-load checks of train.max_time and train.phases: every phase's recipe must be a
    valid recipe on its own (the cross-field rules of recipe.validate, e.g. max_seq_length
    against the model's positions)."""
    tr = r.train
    if tr.max_time is not None:
        try:
            parse_duration(tr.max_time)
        except ValueError:
            raise UserError(f"train.max_time: {tr.max_time!r} is not a duration", where=r.source,
                            fix="a number with a unit: 90s, 30m, 24h, 1h30m, 2d")
    if not tr.phases:
        return
    if tr.max_time is not None:
        raise UserError("train.phases with train.max_time: a budgeted run has no step count to cut into phases",
                        where=r.source, fix="drop train.max_time, or train.phases")
    hint = typing.get_type_hints(TrainConfig)["schedule"]   # the phases' kinds are train.schedule's
    names = set()
    for ph in plan(r):
        pc = tr.phases[ph.index]
        if pc.schedule is not None:
            coerce(pc.schedule, hint, f"train.phases[{ph.index}].schedule", Ctx(r.source, {}))
        if ph.name in names:
            raise UserError(f"train.phases[{ph.index}]: the name {ph.name!r} is taken by an earlier phase",
                            where=r.source, fix="give each phase its own name")
        names.add(ph.name)
        t = ph.recipe.train
        if ph.own_schedule and t.warmup_steps > ph.steps:
            raise UserError(f"train.phases[{ph.index}] ({ph.name}): warmup of {t.warmup_steps:,} steps in a phase "
                            f"of {ph.steps:,}", where=r.source,
                            fix=f"set train.phases[{ph.index}].warmup_steps to at most its steps")
        try:
            validate(ph.recipe)
        except UserError as e:
            raise UserError(f"train.phases[{ph.index}] ({ph.name}): {e.what}", where=e.where, fix=e.fix)


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
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef), "the source of a class is its class statement"
    body = node.body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def explain(section: str | None) -> list[tuple[str, str, str, str]]:
    """(key, type, default, help) rows for a section (None or 'recipe': the top level), or the
    one row of a key (`train.max_steps`, `output_dir`). A section's row has type "section" and
    the command that lists its keys as its default."""
    cls: type = Recipe
    prefix = ""
    if section and section != "recipe":
        parts = section.split(".")
        for part in parts:
            hints = typing.get_type_hints(cls)
            if part not in hints:
                raise UserError(f"{section}: unknown section" + did_you_mean(part, hints, prefix=prefix),
                                fix="sections: " + ", ".join(SECTIONS))
            tp = hints[part]
            # hints are classes, never dataclass instances: isinstance(, type) only narrows the type
            args = [a for a in typing.get_args(tp) if isinstance(a, type) and dataclasses.is_dataclass(a)]
            found: type | None = tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else (args[0] if args else None)
            if typing.get_origin(tp) is list:
                found = typing.get_args(tp)[0]
            if typing.get_origin(tp) is dict:
                found = typing.get_args(tp)[1]
            if found is None:
                if part != parts[-1]:
                    raise UserError(f"{section}: {prefix + part} is a key, not a section",
                                    fix=f"bertcli explain {prefix + part} shows it; sections: " + ", ".join(SECTIONS))
                return [row for row in explain(prefix.rstrip(".") or None) if row[0] == prefix + part]  # one key
            cls = found
            prefix += part + "."
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    rows = []
    if section == "finetune":          # the top-level seed is a fine-tuning setting too (--seed)
        rows += [row for row in explain(None) if row[0] == "seed"]
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            rows.append((prefix + f.name, "section", f"bertcli explain {prefix + f.name}", docs.get(f.name, "")))
            if section:   # a block inside the section (finetune.ner ...): its keys too
                rows += explain(prefix + f.name)
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
            default = _hashable(default)
        else:
            default = "(required)"
        text, accepted = docs.get(f.name, ""), range_words(f.metadata)
        rows.append((prefix + f.name, pretty_type(hints[f.name]), jsonout.dumps(default, default=str)
                     if not isinstance(default, str) else default, f"{text} Range: {accepted}." if accepted else text))
    return rows


__all__ = [
    "Recipe", "load_recipe", "shipped_recipes", "explain", "field_docs", "position_offset",
    "CorpusConfig", "SourceConfig", "TokenizerConfig", "DataConfig", "ModelConfig", "TrainConfig",
    "FinetuneConfig", "sections",
]
