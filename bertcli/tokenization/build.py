"""Tokenizer stage (stage 1): train the recipe's tokenizer on the corpus stage's output, unless a
complete copy is cached, and report its quality.

CONTRACT (used by the data builder, the trainer and `bertcli tokenize`):

    run_tokenize(recipe, force=False) -> StageResult      # `bertcli tokenize`
    ensure_tokenizer(recipe) -> StageResult              # reuse when complete, else build
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from bertcli.config.recipe import Recipe
from bertcli.config.stages import STAGE_VERSIONS, StageResult, is_complete, stage_dir, stage_guard
from bertcli.core import console
from bertcli.core.fs import building
from bertcli.corpus.build import build_corpus, corpus_fingerprint, corpus_info, corpus_summary_rows
from bertcli.tokenization.adopt import run_adopt
from bertcli.tokenization.alphabet import UnkCauses, unk_warning
from bertcli.tokenization.load import SPECIAL_TOKENS
from bertcli.tokenization.train import hf_class, measure_unk_rate, special_set, train_tokenizer, write_hf_files, write_json

TOKENIZER_VERSION = STAGE_VERSIONS["tokenizer"]
INFO_FILE = "tokenizer_info.json"


def tokenizer_dir(recipe: Recipe) -> Path:
    return stage_dir(recipe, "tokenizer", corpus_fingerprint(recipe.corpus))


def run_tokenize(recipe: Recipe, force: bool = False) -> StageResult:
    """`bertcli tokenize`: train the tokenizer (and read the corpus) unless cached; --rebuild
    rebuilds both."""
    path = tokenizer_dir(recipe)
    if recipe.model.init_from is not None:   # continued pretraining: the checkpoint's tokenizer
        return run_adopt(recipe, path, force)
    with stage_guard(path, "tokenizer"):
        if is_complete(path) and not force:
            return _reused(path)
        return _build(recipe, path, force)


def ensure_tokenizer(recipe: Recipe) -> StageResult:
    """The cached tokenizer, built first when missing (what later stages call)."""
    return run_tokenize(recipe)


def _reused(path: Path) -> StageResult:
    info = json.loads((path / INFO_FILE).read_text(encoding="utf-8"))
    _warn(info)
    return StageResult("tokenizer", path, True, _summary(info, reused=True))


def _build(recipe: Recipe, path: Path, force: bool) -> StageResult:
    start = time.perf_counter()
    corpus = build_corpus(recipe, force=force)
    import datasets  # after the corpus: its errors need no datasets import (fast error messages)

    cinfo = corpus_info(corpus.path)
    dd = datasets.load_from_disk(str(corpus.path))
    cfg = recipe.tokenizer
    train_start, train_cpu = time.perf_counter(), time.process_time()
    stats: dict = {}
    tok = train_tokenizer(cfg, dd["train"], cinfo["alphabet"], where=recipe.source, stats=stats)
    train_s, train_cpu = time.perf_counter() - train_start, time.process_time() - train_cpu
    size = tok.get_vocab_size(with_added_tokens=True)
    if size > cfg.vocab_size:
        console.log(f"note: the trained vocabulary has {size:,} tokens, more than tokenizer.vocab_size "
                    f"{cfg.vocab_size:,} (every character of the alphabet is kept)")
    elif size < cfg.vocab_size:
        console.log(f"note: the corpus only supports {size:,} tokens of the {cfg.vocab_size:,} asked "
                    "(tokenizer.vocab_size); a larger corpus fills it")
    unk_id = tok.token_to_id(SPECIAL_TOKENS[special_set(cfg)]["unk"])
    assert unk_id is not None, "training adds every special token to the vocabulary"
    split = "validation" if len(dd["validation"]) else "train"
    causes = UnkCauses(tok, unk_id, stats.get("counts"), cfg.min_frequency)
    quality = measure_unk_rate(tok, unk_id, dd[split], causes)
    with building(path, recipe) as tmp:
        write_hf_files(tok, cfg, tmp)
        info = {"version": TOKENIZER_VERSION, "kind": cfg.kind, "vocab_size": size, "hf_class": hf_class(cfg),
                "corpus": str(corpus.path), "corpus_reused": corpus.reused,
                "documents": cinfo["train"]["documents"] + cinfo["validation"]["documents"],
                "sentences": cinfo["train"]["sentences"] + cinfo["validation"]["sentences"],
                "characters": cinfo["train"]["characters"] + cinfo["validation"]["characters"],
                "trained_on_documents": min(len(dd["train"]), cfg.sample_documents or len(dd["train"])),
                "evaluated_on": split, **{f"eval_{k}": v for k, v in quality.items()},
                # what the alphabet kept and why tokens are [UNK]: the warning above 1% (alphabet.py)
                "min_frequency": cfg.min_frequency, "alphabet": stats.get("alphabet"),
                "unk_causes": causes.result(),
                "train_seconds": round(train_s, 3), "train_cpu_seconds": round(train_cpu, 3),
                "seconds": round(time.perf_counter() - start, 3),
                # non-UTF-8 lines replaced or skipped, documents cut: shown with the tokenizer's summary
                "corpus_notes": corpus_summary_rows(cinfo)[3:]}
        write_json(tmp / INFO_FILE, info)
    _warn(info)
    return StageResult("tokenizer", path, False, _summary(info, reused=False))


def _warn(info: dict) -> None:
    """The [UNK] warning, each time the tokenizer is built or reused (so `pretrain` shows it)."""
    message = unk_warning(info)
    if message:
        console.log(f"warning: {message}")


def _summary(info: dict, reused: bool) -> list[tuple[str, object]]:
    rate, tpw = info["eval_unk_rate"], info["eval_tokens_per_word"]
    split = info["evaluated_on"]
    return [
        ("documents", info["documents"]),
        ("sentences", info["sentences"]),
        ("characters", info["characters"]),
        ("vocab size", f"{info['vocab_size']:,} ({info['kind']}, {info['hf_class']})"),
        (f"{split} UNK rate", "n/a" if rate is None else f"{rate:.4%}"),
        ("avg tokens per word", "n/a" if tpw is None else f"{tpw:.3f}"),
        ("seconds", f"{info['seconds']:.1f} (training {info['train_seconds']:.1f})"
                    + (", when it was built" if reused else "")),
        ("reused", reused),
    ] + [tuple(row) for row in info.get("corpus_notes", [])]
