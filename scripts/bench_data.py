"""Benchmark of the data stage. Prints one JSON object:

  build     `bertcli build-data` on a generated corpus of --mb megabytes (bert-base's data
            settings: NSP, static masking, 128 tokens, dupe_factor --dupe), run in a child
            process: seconds, tokens/s (rows written and corpus tokens), and the peak memory of
            the whole process tree sampled from /proc: sum of RSS (counts pages shared between
            processes once per process), sum of PSS (shares them out), and the largest single
            process of the build (sampled like the others).
  collator  dynamic-masking collation of the same batches by bertcli's PretrainCollator and by
            transformers' DataCollatorForLanguageModeling (per-token 15%, 80/10/10, padding to
            a multiple of 8), timed alternately in this process: rows/s each and the ratio.

usage: python scripts/bench_data.py [--mb 5] [--dupe 1] [--batches 200] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def generate_corpus(path: Path, mb: float, seed: int = 0) -> int:
    """Google-format text (one sentence per line, blank line between documents) of Zipf-distributed
    made-up words, written in chunks. Returns the number of documents."""
    rng = np.random.default_rng(seed)
    syll = "ka ri to ne mo su pa lu vi de ga zo bi shu ren tal mor ex qui fan dor lem sta pri ch ol an ve ur is".split()
    lexicon = sorted({"".join(rng.choice(syll, size=int(rng.integers(1, 5)))) for _ in range(60000)})
    p = 1.0 / np.arange(1, len(lexicon) + 1) ** 1.05
    p /= p.sum()
    target, written, docs = int(mb * 1e6), 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            words = rng.choice(len(lexicon), size=200_000, p=p)
            lens = rng.integers(5, 30, size=20_000)
            pos, lines = 0, []
            for n in lens:
                if pos + n > len(words):
                    break
                s = " ".join(lexicon[i] for i in words[pos : pos + n])
                lines.append(s[0].upper() + s[1:] + ".")
                pos += n
                if rng.random() < 1 / 15:  # documents of ~15 sentences
                    lines.append("")
                    docs += 1
            chunk = "\n".join(lines) + "\n\n"
            docs += 1
            f.write(chunk)
            written += len(chunk.encode())
    return docs


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _memory(pids: list[int]) -> tuple[int, int, int, int]:
    """Sums of RSS, PSS and anonymous memory over `pids`, and the largest single RSS (bytes)."""
    rss = pss = anon = largest = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                        largest = max(largest, int(line.split()[1]) * 1024)
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                    elif line.startswith("Anonymous:"):
                        anon += int(line.split()[1]) * 1024
        except OSError:
            pass
    return rss, pss, anon, largest


def run_measured(cmd: list[str], cwd: Path) -> dict:
    """Run `cmd`; sample the memory of its process tree every 0.2 s."""
    peak = {"rss": 0, "pss": 0, "anon": 0, "largest": 0}
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample():
        while not done.is_set():
            for key, value in zip(("rss", "pss", "anon", "largest"), _memory(_tree(proc.pid))):
                peak[key] = max(peak[key], value)
            time.sleep(0.2)

    t = threading.Thread(target=sample, daemon=True)
    start = time.perf_counter()
    t.start()
    out, err = proc.communicate()
    done.set()
    t.join()
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return {"seconds": time.perf_counter() - start, "peak_rss_tree_mb": peak["rss"] / 2**20,
            "peak_pss_tree_mb": peak["pss"] / 2**20, "peak_anon_tree_mb": peak["anon"] / 2**20,
            "peak_rss_largest_process_mb": peak["largest"] / 2**20, "stdout": out}


def bench_build(work: Path, mb: float, dupe: int) -> tuple[dict, list[str]]:
    corpus = work / "corpus.txt"
    t = time.perf_counter()
    docs = generate_corpus(corpus, mb)
    gen_s = time.perf_counter() - t
    sets = ["--set", f"corpus.sources=[{corpus}]", "--set", f"output_dir={work / 'run'}",
            "--set", "tokenizer.vocab_size=30522", "--set", "tokenizer.sample_documents=20000",
            "--set", f"data.dupe_factor={dupe}"]
    base = [sys.executable, "-m", "bertcli"]
    prep = run_measured(base + ["tokenize", "--recipe", "bert-base"] + sets, work)  # corpus + tokenizer
    build = run_measured(base + ["build-data", "--recipe", "bert-base"] + sets, work)
    data = next((work / "run").glob("data-*"))
    info = json.loads((data / "build_info.json").read_text())
    t_, v = info["train"], info["validation"]
    rows_tokens = t_["tokens"] + v["tokens"]
    corpus_tokens = t_["corpus_tokens"] + v["corpus_tokens"]
    return {
        "corpus_mb": round(corpus.stat().st_size / 1e6, 1), "documents": docs, "dupe_factor": dupe,
        "num_proc": info["num_proc"], "corpus_and_tokenizer_seconds": round(prep["seconds"], 1),
        "seconds": round(build["seconds"], 1), "stage_seconds": info["seconds"],
        "instances": t_["instances"] + v["instances"], "row_tokens": rows_tokens, "corpus_tokens": corpus_tokens,
        "row_tokens_per_s": round(rows_tokens / build["seconds"]),
        "corpus_tokens_per_s": round(corpus_tokens / build["seconds"]),
        "peak_rss_tree_mb": round(build["peak_rss_tree_mb"]), "peak_pss_tree_mb": round(build["peak_pss_tree_mb"]),
        "peak_anonymous_tree_mb": round(build["peak_anon_tree_mb"]), "phase_seconds": info["phase_seconds"],
        "peak_rss_largest_process_mb": round(build["peak_rss_largest_process_mb"]),
        "fill_ratio": t_["fill_ratio"], "masked_fraction": t_["masked_fraction"],
        "generate_seconds": round(gen_s, 1),
    }, [str(data), str(next((work / "run").glob("tokenizer-*")))]


def bench_collator(data_dir: str, tok_dir: str, batches: int, batch_size: int) -> dict:
    import torch
    from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

    from bertcli.config.sections import DataConfig
    from bertcli.data import PretrainCollator, PretrainDataset, load_data
    from bertcli.tokenization.load import load_tokenizer

    torch.set_num_threads(1)
    tok = load_tokenizer(tok_dir)
    hf_tok = PreTrainedTokenizerFast(tokenizer_file=str(Path(tok_dir) / "tokenizer.json"),
                                     pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                     sep_token="[SEP]", mask_token="[MASK]")
    train = load_data(data_dir)["train"].select_columns(["input_ids", "token_type_ids"])
    n = min(len(train), batches * batch_size)
    ds = PretrainDataset(train)
    # the same rows for both: ours as PretrainDataset serves them (numpy views), transformers'
    # as `datasets` serves them (Python lists)
    ours_rows = [ds[(0, i)] for i in range(n)]
    hf_rows = [{"input_ids": r["input_ids"].tolist(), "token_type_ids": r["token_type_ids"].tolist()}
               for r in ours_rows]
    results = {}
    cfgs = {"token": DataConfig(masking="dynamic", mask_count="bernoulli", max_predictions_per_seq=None),
            "whole_word_ngram3": DataConfig(masking="dynamic", whole_word=True, ngram=3,
                                            max_predictions_per_seq=None)}
    hf = DataCollatorForLanguageModeling(hf_tok, mlm_probability=0.15, pad_to_multiple_of=8)
    ours = PretrainCollator(tok, cfgs["token"], seed=1)
    t_ours = t_hf = 0.0
    for b in range(0, n - batch_size + 1, batch_size):
        t = time.perf_counter()
        out = ours(ours_rows[b : b + batch_size])
        t_ours += time.perf_counter() - t
        t = time.perf_counter()
        ref = hf(hf_rows[b : b + batch_size])
        t_hf += time.perf_counter() - t
        assert out["input_ids"].shape == ref["input_ids"].shape
    rows = (n // batch_size) * batch_size
    results["rows"] = rows
    results["batch_size"] = batch_size
    results["bertcli_rows_per_s"] = round(rows / t_ours)
    results["transformers_rows_per_s"] = round(rows / t_hf)
    results["ratio"] = round(t_hf / t_ours, 2)
    # whole-word + 3-gram (no transformers equivalent): for information
    words_rows = [{**r, "word_starts": np.ones(len(r["input_ids"]), np.int8)} for r in ours_rows]
    ngram = PretrainCollator(tok, cfgs["whole_word_ngram3"], seed=1)
    t = time.perf_counter()
    for b in range(0, rows, batch_size):
        ngram(words_rows[b : b + batch_size])
    results["bertcli_whole_word_ngram3_rows_per_s"] = round(rows / (time.perf_counter() - t))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=5.0, help="corpus size in megabytes")
    ap.add_argument("--dupe", type=int, default=1, help="data.dupe_factor (bert-base: 10)")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--keep", help="work directory to keep (default: a temporary one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        build, (data_dir, tok_dir) = bench_build(work, args.mb, args.dupe)
        collator = bench_collator(data_dir, tok_dir, args.batches, args.batch_size)
    print(json.dumps({"build": build, "collator": collator}, indent=2))


if __name__ == "__main__":
    main()
