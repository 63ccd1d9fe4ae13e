"""Benchmark the tokenizer stage against `tokenizers` used directly, on the same text.

    python scripts/bench_tokenize.py [--mb 100] [--kind wordpiece|bpe|unigram] [--vocab 30522] [--repeat 2]

1. Generates a corpus of about --mb megabytes in Google BERT format (one sentence per line,
   blank line between documents) from the built-in corpus's sentences: documents of 4-30
   sentences drawn at random, with words swapped between sentences and numbers varied, so the
   vocabulary keeps growing as it would in real text.
2. bertcli (child process, a fresh output directory each run): reads the corpus into Arrow (`build_corpus`, reported on its own),
   trains the tokenizer (`run_tokenize`), then encodes every sentence of the corpus through
   `load_tokenizer` + `iter_encoded`.
3. raw tokenizers (child process): the same pipeline and trainer settings built by hand,
   trained with `Tokenizer.train` on the text file, then `encode_batch` over its lines.
Each side runs in its own process so its peak RSS is its own. Prints one JSON object; with
--repeat >= 2 it also says how many distinct tokenizer.json files each side trained over its runs
(1 = reproducible; raw `tokenizers` WordPiece and Unigram give one per run, see bertcli/tokenization/reproducible.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCH_LINES = 16384


def generate(path: Path, megabytes: float, seed: int = 0) -> dict:
    from bertcli.config.sections import CorpusConfig
    from bertcli.corpus.build import documents, resolve_sources
    from bertcli.corpus.readers import ReadStats

    cfg = CorpusConfig()
    sentences = [s for d in documents(cfg, resolve_sources(cfg), ReadStats()) for s in d if len(s) > 20]
    words = [s.split() for s in sentences]
    rng = random.Random(seed)
    target = int(megabytes * 1e6)
    written = docs = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            lines = []
            for _ in range(rng.randint(4, 30)):
                w = list(rng.choice(words))
                for _ in range(rng.randint(0, 3)):  # swap in words of other sentences
                    w[rng.randrange(len(w))] = rng.choice(rng.choice(words))
                line = " ".join(w)
                line = re.sub(r"\d+", lambda m: str(rng.randint(0, 10 ** len(m.group()))), line)
                lines.append(line)
            block = "\n".join(lines) + "\n\n"
            f.write(block)
            written += len(block.encode("utf-8"))
            docs += 1
    return {"bytes": written, "documents": docs, "source_sentences": len(sentences)}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def side_bertcli(corpus: Path, work: Path, kind: str, vocab: int, run: int) -> dict:
    from bertcli.config.recipe import load_recipe
    from bertcli.corpus.build import build_corpus
    from bertcli.tokenization.build import run_tokenize
    from bertcli.tokenization.load import load_tokenizer
    from bertcli.tokenization.train import iter_encoded

    os.chdir(work)
    shutil.rmtree(f"bench-{run}", ignore_errors=True)  # always a fresh build
    r = load_recipe("bert-base", [f"corpus.sources=[{corpus}]", "corpus.validation_fraction=0",
                                  f"tokenizer.kind={kind}", f"tokenizer.vocab_size={vocab}", f"output_dir=bench-{run}"])
    t0 = time.perf_counter()
    corpus_result = build_corpus(r)
    ingest = time.perf_counter() - t0
    prof = None
    if os.environ.get("BENCH_TOKENIZE_PROFILE"):   # --profile: where the stage's Python time goes
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    result = run_tokenize(r)
    stage = time.perf_counter() - t0
    if prof is not None:
        prof.disable()
    profile = top_functions(prof) if prof is not None else None
    info = json.loads((result.path / "tokenizer_info.json").read_text())
    import datasets

    ds = datasets.load_from_disk(str(corpus_result.path))["train"]
    tok = load_tokenizer(result.path).tokenizer
    t0, c0 = time.perf_counter(), time.process_time()
    tokens = sentences = 0
    for batch in iter_encoded(tok, ds, batch_documents=1000):
        sentences += len(batch)
        tokens += sum(len(e.ids) for e in batch)
    encode, encode_cpu = time.perf_counter() - t0, time.process_time() - c0
    sha = hashlib.sha256((result.path / "tokenizer.json").read_bytes()).hexdigest()
    return {"tokenizer_sha256": sha, "ingest_s": ingest, "train_s": info["train_seconds"],
            "train_cpu_s": info["train_cpu_seconds"],
            "stage_s": stage, "encode_s": encode, "encode_cpu_s": encode_cpu, "sentences": sentences,
            "tokens": tokens, "vocab_size": info["vocab_size"], "peak_rss_mb": peak_rss_mb(),
            **({"profile": profile} if profile else {})}


def top_functions(prof, n: int = 15) -> list[dict]:
    """The `n` functions of a cProfile run with the most time of their own (Rust calls count as
    their Python entry point, e.g. Tokenizer.train_from_iterator)."""
    import pstats

    st = pstats.Stats(prof)
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:n]   # kv[1] = (cc, nc, tt, ct, callers)
    return [{"function": f"{Path(f).name}:{line}:{name}", "calls": nc, "self_s": round(tt, 3), "cum_s": round(ct, 3)}
            for (f, line, name), (cc, nc, tt, ct, _) in rows]


def side_raw(corpus: Path, kind: str, vocab: int) -> dict:
    """The same tokenizer with `tokenizers` alone (bert-base settings: lowercase, accents stripped)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    specials = {"wordpiece": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                "bpe": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                "unigram": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]}[kind]
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, handle_chinese_chars=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab, min_frequency=2, special_tokens=specials,
                                            limit_alphabet=1000, show_progress=False)
    elif kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()])
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=specials, limit_alphabet=1000,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    else:
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Sequence([normalizers.Replace("``", '"'), normalizers.Replace("''", '"'),
                                               normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase()])
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
        trainer = trainers.UnigramTrainer(vocab_size=vocab, special_tokens=specials, unk_token="[UNK]",
                                          max_piece_length=16, show_progress=False)
    t0, c0 = time.perf_counter(), time.process_time()
    tok.train([str(corpus)], trainer)
    train, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    tokens = sentences = 0
    with open(corpus, encoding="utf-8") as f:
        batch = []
        for line in f:
            line = line.strip()
            if line:
                batch.append(line)
            if len(batch) == BATCH_LINES:
                tokens += sum(len(e.ids) for e in tok.encode_batch(batch, add_special_tokens=False))
                sentences += len(batch)
                batch = []
        tokens += sum(len(e.ids) for e in tok.encode_batch(batch, add_special_tokens=False))
        sentences += len(batch)
    encode, encode_cpu = time.perf_counter() - t0, time.process_time() - c0
    sha = hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()
    return {"tokenizer_sha256": sha, "train_s": train, "train_cpu_s": train_cpu, "encode_s": encode, "encode_cpu_s": encode_cpu,
            "sentences": sentences, "tokens": tokens,
            "vocab_size": tok.get_vocab_size(), "peak_rss_mb": peak_rss_mb()}


def child(side: str, *args) -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true"}
    proc = subprocess.run([sys.executable, __file__, "--side", side, *map(str, args)], capture_output=True,
                          text=True, env=env)
    if proc.returncode:
        sys.exit(f"{side} side failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--kind", choices=["wordpiece", "bpe", "unigram"], default="wordpiece")
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each side (fresh processes), alternated; best "
                    "time kept; with 2 or more, whether each side trained byte-identical tokenizers")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the corpus and outputs here")
    ap.add_argument("--profile", action="store_true", help="cProfile bertcli's tokenizer stage (top functions)")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.profile:
        os.environ["BENCH_TOKENIZE_PROFILE"] = "1"   # read by the bertcli child
    if a.side == "bertcli":
        print(json.dumps(side_bertcli(Path(a.args[0]), Path(a.args[1]), a.args[2], int(a.args[3]), int(a.args[4]))))
        return
    if a.side == "raw":
        print(json.dumps(side_raw(Path(a.args[0]), a.args[1], int(a.args[2]))))
        return
    with tempfile.TemporaryDirectory(prefix="bench-tokenize-") as tmp:
        work = a.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        corpus = work / "corpus.txt"
        t0 = time.perf_counter()
        made = generate(corpus, a.mb) if not corpus.is_file() else {"bytes": corpus.stat().st_size, "documents": None}
        gen_s = time.perf_counter() - t0
        # the machine may be shared: alternate the sides and keep each one's best time
        runs = [(child("bertcli", corpus, work, a.kind, a.vocab, i), child("raw", corpus, a.kind, a.vocab))
                for i in range(a.repeat)]
        ours = {k: (min(r[0][k] for r in runs) if k.endswith("_s") else runs[0][0][k])
                for k in runs[0][0] if k != "tokenizer_sha256"}
        raw = {k: (min(r[1][k] for r in runs) if k.endswith("_s") else runs[0][1][k])
               for k in runs[0][1] if k != "tokenizer_sha256"}
    same_text = ours["sentences"] == raw["sentences"]
    # reproducibility: each run is a fresh process (fresh hash seeds inside `tokenizers`)
    distinct = {side: len({r[i]["tokenizer_sha256"] for r in runs}) for i, side in enumerate(("bertcli", "tokenizers"))}
    print(json.dumps({
        "corpus_mb": round(made["bytes"] / 1e6, 1), "documents": made["documents"], "kind": a.kind,
        "vocab_size": a.vocab, "cpus": os.cpu_count(), "repeat": a.repeat, "generate_s": round(gen_s, 1),
        "same_sentences": same_text, "distinct_tokenizer_json_over_runs": distinct,
        "same_token_count": ours["tokens"] == raw["tokens"],
        "bertcli": {k: round(v, 2) if isinstance(v, float) else v for k, v in ours.items() if k != "profile"},
        "tokenizers": {k: round(v, 2) if isinstance(v, float) else v for k, v in raw.items()},
        "train_ratio": round(ours["train_s"] / raw["train_s"], 3),
        "encode_ratio": round(ours["encode_s"] / raw["encode_s"], 3),
        # CPU seconds (all threads) are less disturbed than wall time on a shared machine
        "train_cpu_ratio": round(ours["train_cpu_s"] / raw["train_cpu_s"], 3),
        "encode_cpu_ratio": round(ours["encode_cpu_s"] / raw["encode_cpu_s"], 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "goal": "ratios <= 1.15; ingest_s (corpus to Arrow) is reported apart",
        **({"bertcli_stage_profile": runs[0][0]["profile"]} if "profile" in runs[0][0] else {}),
    }, indent=2))


if __name__ == "__main__":
    main()
