"""sentence-transformers directories: an encoder checkpoint plus the modules that pool it.

Written around a saved encoder directory (its config.json, model.safetensors and tokenizer stay
at the root, so transformers loads it as an encoder too):
    modules.json                 [Transformer at "", Pooling at 1_Pooling, (Normalize at 2_Normalize)]
    sentence_bert_config.json    {"max_seq_length": N, "do_lower_case": false}
    1_Pooling/config.json        the Pooling (bertcli.model.pooling), legacy keys
    2_Normalize/                 only when the embeddings are L2-normalized (an empty folder)
    config_sentence_transformers.json   cosine similarity

Read from any directory with modules.json: what bertcli writes, and what sentence-transformers
writes (MiniLM-style models: the BertModel at the root, or in a subfolder such as 0_Transformer
in older versions; 6.x's module paths and pooling keys as well as the legacy ones). Modules other
than Transformer, Pooling and Normalize (Dense, LayerNorm, ...) are refused: bertcli would
compute other vectors than sentence-transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertcli.config.checkpoint import json_object, read_config
from bertcli.core import jsonout
from bertcli.core.errors import UserError
from bertcli.core.fs import write_text_atomic
from bertcli.io.records import json_type
from bertcli.model.pooling import Pooling, parse_mode

MODULES = "modules.json"
ST_CONFIG = "sentence_bert_config.json"
ST_SETTINGS = "config_sentence_transformers.json"
POOLING_DIR, NORMALIZE_DIR = "1_Pooling", "2_Normalize"
DEFAULT_MAX_LENGTH = 512    # capped by the model's positions; a sentence-transformers directory names its own
# the class part of modules.json's "type": legacy (sentence_transformers.models.X) and 6.x paths
KINDS = {"Transformer": "transformer", "Pooling": "pooling", "Normalize": "normalize"}
_TYPES = {"transformer": "sentence_transformers.models.Transformer",
          "pooling": "sentence_transformers.models.Pooling",
          "normalize": "sentence_transformers.models.Normalize"}


@dataclass(frozen=True)
class SentenceModel:
    """What a sentence-transformers directory says: where its encoder is and how it pools."""

    directory: Path            # the sentence-transformers directory
    encoder: Path              # the encoder checkpoint (config.json, weights, tokenizer) inside it
    pooling: Pooling
    max_seq_length: int | None  # sentence_bert_config.json's; None when it names none


def is_sentence_dir(directory: str | Path) -> bool:
    return (Path(directory) / MODULES).is_file()


# ------------------------------------------------------------------------------------ write
def write_sentence_dir(directory: str | Path, pooling: Pooling, max_seq_length: int) -> list[str]:
    """Add the sentence-transformers files to the saved encoder checkpoint `directory` (each
    written under a temporary name and renamed). Returns the files written, relative to it."""
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise ValueError(f"{directory} holds no saved encoder (config.json) to wrap")
    if pooling.dim < 1:
        raise ValueError("the Pooling's dim (the encoder's hidden size) is not set")
    modules = [{"idx": 0, "name": "0", "path": "", "type": _TYPES["transformer"]},
               {"idx": 1, "name": "1", "path": POOLING_DIR, "type": _TYPES["pooling"]}]
    if pooling.normalize:
        modules.append({"idx": 2, "name": "2", "path": NORMALIZE_DIR, "type": _TYPES["normalize"]})
    files = {
        ST_CONFIG: {"max_seq_length": int(max_seq_length), "do_lower_case": False},
        f"{POOLING_DIR}/config.json": pooling.to_st_config(),
        ST_SETTINGS: {"similarity_fn_name": "cosine", "prompts": {},
                                              "default_prompt_name": None},
        MODULES: modules,                                          # last: its presence marks the directory
    }
    if pooling.normalize:
        (directory / NORMALIZE_DIR).mkdir(exist_ok=True)
    for name, data in files.items():
        write_text_atomic(directory / name, jsonout.dumps(data, indent=2) + "\n")
    return list(files) + ([NORMALIZE_DIR] if pooling.normalize else [])


# ------------------------------------------------------------------------------------- read
def _json(path: Path, what: str, want: type = dict) -> Any:
    """The JSON value of a sentence-transformers file, refused unless it is `want` (dict: an
    object, list: an array): a file holding null, a number or a string is one message, not a
    TypeError further on."""
    if not path.is_file():
        raise UserError(f"no {path.name} ({what})", where=str(path.parent),
                        fix="a sentence-transformers directory as SentenceTransformer.save() writes it")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path.name} is not valid JSON ({e})", where=str(path)) from None
    if not isinstance(data, want):
        shape = "an object ({...})" if want is dict else "an array ([...])"
        raise UserError(f"{path.name} ({what}) holds {json_type(data)} ({data!r:.40}), not {shape}", where=str(path),
                        fix=f"a sentence-transformers {path.name} holds a JSON {shape}, as "
                            "SentenceTransformer.save() writes it")
    return data


def _optional(d: dict, key: str, kinds: tuple[type, ...], want: str, path: Path) -> Any:
    """d[key] when present and of one of `kinds` (bool is never an int here); None when absent."""
    if key not in d:
        return None
    value = d[key]
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise UserError(f"{key} is {json_type(value)} ({value!r:.40}), not {want}", where=str(path),
                        fix=f"write {key} as {want}, or leave the key out")
    return value


def _inside(directory: Path, sub: object, where: str) -> Path:
    """directory / sub, refused unless `sub` is a relative path that stays inside `directory`."""
    if not isinstance(sub, str):
        raise UserError(f"module path {sub!r} is not a string", where=where)
    path = Path(sub)
    if path.is_absolute() or ".." in path.parts:
        raise UserError(f"module path {sub!r} points outside the directory", where=where,
                        fix="module paths are folders inside the sentence-transformers directory")
    return directory / path


def _kind(entry: object, where: str) -> tuple[str, object]:
    if not isinstance(entry, dict):
        raise UserError(f"a module entry must be a JSON object, not {entry!r}", where=where)
    for key in ("type", "path"):
        if key not in entry:
            raise UserError(f"a module entry has no {key!r} key: {entry}", where=where,
                            fix="each entry of modules.json has idx, name, path and type")
    if not isinstance(entry["type"], str):
        raise UserError(f"a module's type is {json_type(entry['type'])}, not a string: {entry}", where=where,
                        fix='"type" names the module class, e.g. "sentence_transformers.models.Pooling"')
    kind = KINDS.get(entry["type"].rsplit(".", 1)[-1])
    if kind is None:
        raise UserError(f"module {entry['type']!r} is not supported", where=where,
                        fix="bertcli reads Transformer, Pooling and (optionally) Normalize modules; "
                            "a Dense or other module would change the vectors")
    return kind, entry["path"]


def read_sentence_dir(directory: str | Path) -> SentenceModel:
    """The encoder directory and Pooling of a sentence-transformers directory (modules.json:
    Transformer, then Pooling, then optionally Normalize)."""
    directory = Path(directory)
    where = str(directory / MODULES)
    entries = _json(directory / MODULES, "the list of modules", list)
    kinds = [_kind(e, where) for e in entries]
    order = [k for k, _ in kinds]
    if order not in (["transformer", "pooling"], ["transformer", "pooling", "normalize"]):
        raise UserError(f"modules {' -> '.join(order) or '(none)'}: bertcli reads Transformer -> Pooling "
                        "[-> Normalize]", where=where,
                        fix="a sentence-transformers model of one transformer, its pooling and optional normalization")
    encoder = _inside(directory, kinds[0][1], where)
    if not (encoder / "config.json").is_file():
        raise UserError(f"the Transformer module's folder {encoder} has no config.json", where=where,
                        fix="the encoder's config.json, weights and tokenizer belong in the Transformer module's path")
    pool_dir = _inside(directory, kinds[1][1], where)
    pool_where = str(pool_dir / "config.json")
    pooling = Pooling.from_st_config(_json(pool_dir / "config.json", "the Pooling module's config"), pool_where,
                                     normalize=len(kinds) == 3)
    max_len = _max_seq_length(encoder)
    _check_st_config(directory)
    return SentenceModel(directory, encoder, pooling, max_len)


def _max_seq_length(encoder: Path) -> int | None:
    """sentence_bert_config.json's max_seq_length (null: it names none); else (sentence-transformers
    6.x writes it there) tokenizer_config.json's model_max_length when it is a real bound; else None."""
    path = encoder / ST_CONFIG
    d = _json(path, "the Transformer module's config") if path.is_file() else {}
    if _optional(d, "do_lower_case", (bool,), "true or false", path):
        raise UserError("do_lower_case true (sentence-transformers lowercases texts before its tokenizer) "
                        "is not supported", where=str(path),
                        fix="set it to false when the tokenizer lowercases by itself (tokenizer.json's normalizer)")
    if "max_seq_length" in d:
        n = d["max_seq_length"]
        if n is None:
            return None
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise UserError(f"max_seq_length {n!r} is not a positive integer", where=str(path),
                            fix="write max_seq_length as a positive integer (the longest text in tokens)")
        return n
    tok = encoder / "tokenizer_config.json"
    n = json_object(tok).get("model_max_length") if tok.is_file() else None
    if isinstance(n, int) and not isinstance(n, bool) and 1 <= n < 1_000_000:   # transformers' "unset" is 1e30
        return n
    return None


def _check_st_config(directory: Path) -> None:
    """config_sentence_transformers.json, when present, by type: bertcli always compares vectors by
    cosine and adds no prompt, so only its shape is checked (a null or a list there is refused)."""
    path = directory / ST_SETTINGS
    if not path.is_file():
        return
    d = _json(path, "the model's similarity and prompts")
    _optional(d, "similarity_fn_name", (str, type(None)), "a similarity name or null", path)
    prompts = _optional(d, "prompts", (dict,), "an object of prompt texts", path) or {}
    _optional(d, "default_prompt_name", (str, type(None)), "a prompt name or null", path)
    for name, text in prompts.items():
        if not isinstance(text, str):
            raise UserError(f"prompt {name!r} is {json_type(text)}, not a text", where=str(path),
                            fix='each prompt is a JSON string, e.g. "query": "query: "')


# ------------------------------------------------------------------------- any checkpoint
@dataclass
class Source:
    """Where an Embedder's encoder and pooling came from."""

    checkpoint: Path
    encoder_dir: Path
    pooling: Pooling
    max_seq_length: int
    sentence_dir: bool


def resolve(checkpoint: str | Path, pooling: str | None = None, normalize: bool | None = None,
            max_seq_length: int | None = None) -> Source:
    """The encoder directory, pooling and length of `checkpoint`: a sentence-transformers
    directory's own unless flags say otherwise; else the flags, default mean, no normalization."""
    checkpoint = Path(checkpoint)
    if is_sentence_dir(checkpoint):
        st = read_sentence_dir(checkpoint)
        enc, pool, length = st.encoder, st.pooling, st.max_seq_length
    else:
        enc, pool, length = checkpoint, Pooling("mean"), None
    c = read_config(enc)
    usable = c.max_position_embeddings - c.position_offset
    length = max_seq_length or length or DEFAULT_MAX_LENGTH
    if length < 2:
        raise UserError(f"--max-seq-length {length} leaves no room for a text", fix="give 8 or more")
    pool = Pooling(parse_mode(pooling) if pooling else pool.mode,
                   pool.normalize if normalize is None else normalize, c.hidden_size)
    return Source(checkpoint, enc, pool, min(length, usable), is_sentence_dir(checkpoint))
