"""The tokenizer stage of a continued-pretraining run (`model.init_from`): adopt, do not train.

    run_adopt(recipe, path, force) -> StageResult

It copies the checkpoint's tokenizer into the stage directory (`tokenizer-<hash>`, whose key
holds a fingerprint of those files: bertcli.config.stages), so that the data stage, the trainer and
the checkpoints read it exactly as they read a trained one:
    tokenizer.json            the checkpoint's, or built from a WordPiece vocab.txt with the
                              casing of its tokenizer_config.json (`do_lower_case`)
    tokenizer_config.json, special_tokens_map.json, vocab.txt / vocab.json / merges.txt   copied
                              when present (the vocabulary files only when not extended)
    tokenizer_info.json       where it came from, its size, UNK rate and pieces per word on the corpus
    extension.json            with tokenizer.extend: the tokens added (bertcli.tokenization.extend)
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from bertcli.config.checkpoint import read_config, tokenizer_fingerprint, tokenizer_source
from bertcli.config.recipe import Recipe
from bertcli.config.stages import StageResult, is_complete, stage_guard
from bertcli.core import jsonout
from bertcli.core.fs import building
from bertcli.corpus.build import build_corpus
from bertcli.tokenization.extend import extend_tokenizer
from bertcli.tokenization.load import check_tokenizer, load_tokenizer
from bertcli.tokenization.train import measure_unk_rate

INFO_FILE = "tokenizer_info.json"
COPIED = ("tokenizer_config.json", "special_tokens_map.json")
# the slow tokenizers' files: copied as they are unless tokenizer.extend changed the vocabulary
# (then tokenizer.json, and vocab.txt for WordPiece, are what transformers reads)
VOCABULARY = ("vocab.txt", "vocab.json", "merges.txt")


def run_adopt(recipe: Recipe, path: Path, force: bool = False) -> StageResult:
    with stage_guard(path, "tokenizer"):
        if is_complete(path) and not force:
            info = json.loads((path / INFO_FILE).read_text(encoding="utf-8"))
            return StageResult("tokenizer", path, True, summary_rows(info, reused=True))
        return _build(recipe, path, force)


def _build(recipe: Recipe, path: Path, force: bool) -> StageResult:
    start = time.perf_counter()
    assert recipe.model.init_from is not None, "run_adopt is only called with model.init_from set"
    src = Path(recipe.model.init_from)
    kind, lowercase = tokenizer_source(src)          # a sentencepiece-only checkpoint: the message to convert it
    tok = load_tokenizer(src)
    check_tokenizer(tok, read_config(src), str(src))
    corpus = build_corpus(recipe, force=force)
    import datasets

    dd = datasets.load_from_disk(str(corpus.path))
    split = "validation" if len(dd["validation"]) else "train"
    before = measure_unk_rate(tok.tokenizer, tok.unk_id, dd[split])
    info = {"adopted_from": str(src), "fingerprint": tokenizer_fingerprint(src), "kind": kind,
            "vocab_size": tok.vocab_size, "evaluated_on": split,
            "eval_unk_rate": before["unk_rate"], "eval_tokens_per_word": before["tokens_per_word"]}
    tokenizer, extension = tok.tokenizer, None
    if recipe.tokenizer.extend:
        tokenizer, extension = extend_tokenizer(tok, dd["train"], recipe.tokenizer.extend, read_config(src))
        after = measure_unk_rate(tokenizer, tok.unk_id, dd[split])
        info.update(extended_by=len(extension.tokens), vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
                    model_vocab_size=extension.vocab_size, eval_tokens_per_word_after=after["tokens_per_word"],
                    added_examples=[t for t, _, _ in extension.tokens[:10]])
    with building(path, recipe) as tmp:
        if extension is None and (src / "tokenizer.json").is_file():
            shutil.copyfile(src / "tokenizer.json", tmp / "tokenizer.json")   # the same bytes: the same fingerprint
        else:
            tokenizer.save(str(tmp / "tokenizer.json"))
        for name in COPIED + (VOCABULARY if extension is None else ()):
            if (src / name).is_file():
                shutil.copyfile(src / name, tmp / name)
        if not (src / "tokenizer_config.json").is_file():
            _write_json(tmp / "tokenizer_config.json", _minimal_config(tok, kind, lowercase))
        if extension is not None:
            extension.save(tmp, tokenizer, kind)
        info["seconds"] = round(time.perf_counter() - start, 3)
        _write_json(tmp / INFO_FILE, info)
    return StageResult("tokenizer", path, False, summary_rows(info, reused=False))


def _minimal_config(tok, kind: str, lowercase) -> dict:
    """tokenizer_config.json for a checkpoint that had none (a bare vocab.txt: lowercased, as
    load_tokenizer reads it without a config)."""
    roles = {f"{r}_token": t for r, t in tok.tokens.items()}
    lowercase = True if lowercase is None else lowercase
    return {"tokenizer_class": "BertTokenizer" if kind == "wordpiece" else "PreTrainedTokenizerFast", **roles,
            "do_lower_case": lowercase}


def _write_json(path: Path, obj) -> None:
    path.write_text(jsonout.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def summary_rows(info: dict, reused: bool) -> list[tuple[str, object]]:
    tpw, rate = info.get("eval_tokens_per_word"), info.get("eval_unk_rate")
    rows = [("adopted from", info["adopted_from"]),
            ("vocab size", f"{info['vocab_size']:,} ({info['kind']})"),
            (f"{info['evaluated_on']} UNK rate", "n/a" if rate is None else f"{rate:.4%}"),
            ("avg tokens per word", "n/a" if tpw is None else f"{tpw:.3f}")]
    if "extended_by" in info:
        after = info.get("eval_tokens_per_word_after")
        rows += [("tokens added", f"{info['extended_by']:,} (tokenizer.extend; e.g. "
                                  f"{', '.join(info['added_examples'][:5])})"),
                 ("model vocab size", f"{info['model_vocab_size']:,} (rounded up to the family's multiple)"),
                 ("tokens per word", f"{tpw:.3f} -> {after:.3f}" if tpw and after else "n/a")]
    rows += [("seconds", f"{info['seconds']:.1f}" + (", when it was built" if reused else "")), ("reused", reused)]
    return rows
