"""The data stage (`bertcli build-data`): tokenized corpus -> pretraining rows on disk.

Steps, each sharded over worker processes (data.num_proc, default every core):
 1. tokenize every document of both splits into a memory-mapped token store (store.py);
 2. NSP / SOP: pairs from each document, `dupe_factor` copies with their own pairs and (static)
    masks; none: a packing plan over the whole split, then the packed rows;
 3. every worker writes its rows straight into the final Arrow files; the parent only writes
    the `datasets` metadata around them, so no process ever holds the corpus or the rows.
Validation gets one copy. Rows are stored in corpus order (document, then copy): the trainer
shuffles them (bertcli.train.sampler).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bertcli.config.recipe import Recipe
from bertcli.config.stages import STAGE_VERSIONS, StageResult, is_complete, stage_dir, stage_guard
from bertcli.core import console, jsonout
from bertcli.core.fs import building
from bertcli.corpus.build import build_corpus, corpus_fingerprint
from bertcli.data import shards
from bertcli.data.checks import check_recipe, check_tokenized, check_tokenizer
from bertcli.data.masking import MaskSpec
from bertcli.data.pairs import pack_plan
from bertcli.data.store import DocStore
from bertcli.tokenization.build import ensure_tokenizer
from bertcli.tokenization.load import load_tokenizer

if TYPE_CHECKING:
    from bertcli.config.sections import DataConfig
    from bertcli.tokenization.load import TokenizerInfo

DATA_VERSION = STAGE_VERSIONS["data"]
INFO_FILE = "build_info.json"
SPLITS = ("train", "validation")


def data_dir(recipe: Recipe) -> Path:
    """Where the recipe's built data lives (keyed by corpus + tokenizer + data sections and the
    corpus files' fingerprint)."""
    return stage_dir(recipe, "data", corpus_fingerprint(recipe.corpus))


def run_build_data(recipe: Recipe, force: bool = False) -> StageResult:
    """`bertcli build-data`: build unless a complete, up-to-date copy exists (or --rebuild)."""
    check_recipe(recipe)
    tok = load_tokenizer(ensure_tokenizer(recipe).path)
    check_tokenizer(recipe, tok)
    path = data_dir(recipe)
    with stage_guard(path, "data"):
        if not force and _up_to_date(path, tok):
            return _reused(path)
        return _build(recipe, tok, path)


def ensure_data(recipe: Recipe) -> StageResult:
    """The built data, built first when missing (what `pretrain` calls)."""
    return run_build_data(recipe, force=False)


def _tokenizer_sha(tok: TokenizerInfo) -> str:
    return hashlib.sha256((Path(tok.path) / "tokenizer.json").read_bytes()).hexdigest()


def _up_to_date(path: Path, tok: TokenizerInfo) -> bool:
    if not is_complete(path) or not (path / INFO_FILE).is_file():
        return False
    info = json.loads((path / INFO_FILE).read_text(encoding="utf-8"))
    # the version is in the stage key; the tokenizer a --force retrain replaced is not
    if info.get("tokenizer", {}).get("sha256") != _tokenizer_sha(tok):
        console.log(f"the data in {path} was built with another tokenizer: rebuilding")
        return False
    return True


def _reused(path: Path) -> StageResult:
    info = json.loads((path / INFO_FILE).read_text(encoding="utf-8"))
    return StageResult("data", path, True, data_summary_rows(info, reused=True))


# ------------------------------------------------------------------------------------ build
def _num_proc(cfg: DataConfig) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cfg.num_proc or cores)


class _Runner:
    """Runs shard tasks in order: in this process (num_proc 1) or in a pool of workers."""

    def __init__(self, ctx: shards.Context, num_proc: int):
        self.pool = None
        if num_proc > 1:
            import datasets  # noqa: F401  (imported once here: forked workers inherit it)

            # fork: workers start at once and inherit the imports; spawn elsewhere
            method = "fork" if sys.platform.startswith("linux") else "spawn"
            # set while the workers start, so tokenizers does not warn about the fork
            saved = os.environ.get("TOKENIZERS_PARALLELISM")
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
            try:
                self.pool = mp.get_context(method).Pool(num_proc, shards.init_worker, (ctx,))
            finally:
                if saved is None:
                    del os.environ["TOKENIZERS_PARALLELISM"]
                else:
                    os.environ["TOKENIZERS_PARALLELISM"] = saved
        else:
            shards.init_worker(ctx)

    def run(self, fn, tasks: list, description: str, sizes: list[int]) -> list[dict]:
        results = []
        with console.progress(description, total=sum(sizes)) as bar:
            it = self.pool.imap(fn, tasks) if self.pool else map(fn, tasks)
            for result, size in zip(it, sizes):
                results.append(result)
                bar.advance(size)
        return results

    def close(self, ok: bool) -> None:
        if self.pool:
            if ok:
                self.pool.close()
            else:  # an error or Ctrl-C: do not wait for the queued shards
                self.pool.terminate()
            self.pool.join()
        shards.init_worker(None)  # drop this process's cached memory maps


def _ranges(n: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(n, lo + size)) for lo in range(0, n, size)] or [(0, 0)]


def _build(recipe: Recipe, tok: TokenizerInfo, path: Path) -> StageResult:
    start = time.perf_counter()
    cfg = recipe.data
    corpus_path = build_corpus(recipe).path
    num_proc = _num_proc(cfg)
    ctx = shards.Context(corpus_path=str(corpus_path), tokenizer_path=str(tok.path), kind=tok.kind, cfg=cfg,
                         seed=recipe.seed, cls_id=tok.cls_id, sep_id=tok.sep_id, spec=MaskSpec.from_config(tok, cfg))
    info: dict = {"version": DATA_VERSION, "objective": cfg.objective, "masking": cfg.masking,
                  "max_seq_length": cfg.max_seq_length, "seed": recipe.seed,
                  "tokenizer": {"path": str(tok.path), "sha256": _tokenizer_sha(tok), "kind": tok.kind,
                                "vocab_size": tok.vocab_size},
                  "corpus": str(corpus_path), "num_proc": num_proc}
    with building(path, recipe) as tmp:
        work = tmp / ".work"
        work.mkdir()
        runner, ok = _Runner(ctx, num_proc), False
        try:
            t0 = time.perf_counter()
            stores = {s: _tokenize(runner, s, corpus_path, work, cfg, info) for s in SPLITS}
            check_tokenized(recipe, info)
            t1 = time.perf_counter()
            files = {s: _rows(runner, s, stores, work, cfg, info) for s in SPLITS}
            info["phase_seconds"] = {"tokenize": round(t1 - t0, 3), "rows": round(time.perf_counter() - t1, 3)}
            ok = True
        finally:
            runner.close(ok)
        _write_datasets(tmp, files)
        shutil.rmtree(work)
        for s in SPLITS:
            _finish_counts(info[s], cfg.max_seq_length)
        check_tokenized(recipe, info, built=True)
        if cfg.masking == "dynamic":
            info["train"]["masked_fraction"] = _dynamic_masked_fraction(tmp, tok, cfg, recipe.seed)
        info["seconds"] = round(time.perf_counter() - start, 3)
        (tmp / INFO_FILE).write_text(jsonout.dumps(info, indent=2), encoding="utf-8")
    return StageResult("data", path, False, data_summary_rows(info, reused=False))


def _tokenize(runner: _Runner, split: str, corpus_path: Path, work: Path, cfg: DataConfig, info: dict) -> list[str]:
    import datasets

    n = datasets.load_from_disk(str(corpus_path))[split].num_rows
    ranges = _ranges(n, cfg.documents_per_shard)
    prefixes = [str(work / f"{split}-tok-{k:05d}") for k in range(len(ranges))]
    tasks = [(split, lo, hi, p) for (lo, hi), p in zip(ranges, prefixes)]
    results = runner.run(shards.tokenize_shard, tasks, f"tokenizing {split}", [hi - lo for lo, hi in ranges])
    info[split] = {
        "corpus_documents": sum(r["documents_in"] for r in results),
        "documents": sum(r["documents"] for r in results),
        "multi_sentence_documents": sum(r["multi_sentence"] for r in results),
        "sentences": sum(r["sentences"] for r in results),
        "corpus_tokens": sum(r["tokens"] for r in results),
    }
    return prefixes


def _rows(runner: _Runner, split: str, stores: dict, work: Path, cfg: DataConfig, info: dict) -> list[str]:
    """Build one split's rows; returns the Arrow files in order."""
    import numpy as np

    prefixes = stores[split]
    store = DocStore(prefixes)
    n_docs = len(store)
    copies = _copies(cfg) if split == "train" else [0]
    out = work / "rows" / split
    out.mkdir(parents=True)
    if cfg.objective == "none":
        plan = pack_plan(store.sentence_lengths(), cfg.max_seq_length - 2, cfg.packing == "full_sentences")
        plan_path = str(work / f"{split}-plan.npy")
        np.save(plan_path, plan)
        ranges = _ranges(len(plan), 4 * cfg.documents_per_shard)
        files = [str(out / f"rows-{k:05d}.arrow") for k in range(len(ranges))]
        tasks = [(split, lo, hi, copies, prefixes, plan_path, f) for (lo, hi), f in zip(ranges, files)]
        fn, what = shards.packed_shard, f"packing {split} (rows)"
    else:
        # NSP's random B comes from the same split; a validation split of one document borrows
        # its random segments from the training documents
        pool = prefixes if n_docs >= 2 else stores["train"]
        ranges = _ranges(n_docs, cfg.documents_per_shard)
        files = [str(out / f"rows-{k:05d}.arrow") for k in range(len(ranges))]
        tasks = [(split, lo, hi, copies, prefixes, pool, f) for (lo, hi), f in zip(ranges, files)]
        fn, what = shards.pairs_shard, f"{cfg.objective.upper()} pairs {split} (documents)"
    del store
    results = runner.run(fn, tasks, what, [hi - lo for lo, hi in ranges])
    counts = info[split]
    counts["copies"] = len(copies)
    for key in ("instances", "tokens", "masked", "label_1"):
        counts[key] = sum(r[key] for r in results)
    counts["max_length"] = max((r["max_length"] for r in results), default=0)
    return files


def _copies(cfg: DataConfig) -> list[int]:
    """Copies of the training documents. Packed rows have no randomness besides the mask, so
    with dynamic masking copies would be identical: one is built (epochs give the rest)."""
    if cfg.objective == "none" and cfg.masking == "dynamic":
        return [0]
    return list(range(cfg.dupe_factor))


def _finish_counts(c: dict, max_len: int) -> None:
    c["fill_ratio"] = round(c["tokens"] / (c["instances"] * max_len), 6) if c["instances"] else 0.0
    c["masked_fraction"] = round(c["masked"] / c["tokens"], 6) if c["tokens"] else 0.0
    c["label_1_fraction"] = round(c["label_1"] / c["instances"], 6) if c["instances"] else 0.0


def _write_datasets(tmp: Path, files: dict[str, list[str]]) -> None:
    """Make `tmp` a DatasetDict directory around the workers' Arrow files: `datasets` writes
    its own metadata for an empty copy of each split, then the file list is pointed at ours."""
    import datasets

    empty = {s: datasets.Dataset.from_file(f[0]).select([]) for s, f in files.items()}
    with console.quiet_datasets():
        datasets.DatasetDict(empty).save_to_disk(str(tmp))
    for split, paths in files.items():
        state_file = tmp / split / "state.json"
        state = json.loads(state_file.read_text(encoding="utf-8"))
        for entry in state["_data_files"]:
            os.remove(tmp / split / entry["filename"])
        names = [f"data-{k:05d}-of-{len(paths):05d}.arrow" for k in range(len(paths))]
        for src, name in zip(paths, names):
            os.replace(src, tmp / split / name)
        state["_data_files"] = [{"filename": name} for name in names]
        state_file.write_text(jsonout.dumps(state, indent=2, sort_keys=True), encoding="utf-8")


def _dynamic_masked_fraction(path: Path, tok: TokenizerInfo, cfg: DataConfig, seed: int, sample: int = 2000) -> float:
    """Dynamic masks are drawn in the collator: measure them on up to `sample` training rows."""
    from bertcli.data.collator import PretrainCollator
    from bertcli.data.dataset import PretrainDataset, load_data

    ds = PretrainDataset(load_data(path)["train"])
    if not len(ds):
        return 0.0
    step = max(1, len(ds) // sample)
    rows = [ds[(0, i)] for i in range(0, len(ds), step)][:sample]
    batch = PretrainCollator(tok, cfg, seed)(rows)
    return round(len(batch["mlm_positions"]) / max(1, int(batch["attention_mask"].sum())), 6)


def data_summary_rows(info: dict, reused: bool) -> list[tuple[str, object]]:
    t, v = info["train"], info["validation"]
    pair = {"nsp": "random B", "sop": "swapped"}.get(info["objective"])
    rows: list[tuple[str, object]] = [
        ("documents", f"{t['documents']:,} train / {v['documents']:,} validation"),
        ("instances", f"{t['instances']:,} train ({t['copies']} cop{'y' if t['copies'] == 1 else 'ies'}) / "
                      f"{v['instances']:,} validation"),
        ("tokens", f"{t['tokens']:,} train / {v['tokens']:,} validation"),
        ("fill ratio", f"{t['fill_ratio']:.1%} of {info['max_seq_length']} tokens per row (no padding)"),
        ("masked fraction", f"{t['masked_fraction']:.2%} of tokens ({info['masking']})"),
    ]
    if pair:
        rows.append(("pair labels", f"{t['label_1_fraction']:.1%} {pair}"))
    rows.append(("seconds", f"{info['seconds']:.1f}" + (" (reused from the cache: 0 now)" if reused else "")))
    return rows
