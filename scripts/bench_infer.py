"""Inference speed of the exported graph against PyTorch eager, in one process, on the bert-tiny
and bert-base shapes; and what int8 costs on a fine-tuned task's dev metric.

Backends, side by side on the same batches:
    pytorch_bertcli        bertcli's model as `predict` runs it from a checkpoint... eagerly
                           (its default path: dense layers on real tokens only)
    pytorch_transformers   transformers' BertForSequenceClassification, same weights (the
                           reference "PyTorch eager" most users run)
    ort_fp32 / ort_int8    ONNX Runtime on the `bertcli export` bundle / its dynamic int8 graph

Shapes: latency (p50 / p95) at batch 1 x 128 tokens; throughput at batch 32 x up to 128 tokens
with real length variation (consecutive sentence pairs of the built-in corpus, truncated to
128, padded to the longest of each batch): sequences/s and real tokens/s.

Quality: a bert-tiny-shaped classifier fine-tuned (from scratch: no pretrained weights are
downloaded) on a word-order task built from the built-in corpus (is this sentence in its
original order, or are its words shuffled?), exported with `--quantize int8 --dev`: the dev
accuracy of PyTorch, ONNX fp32 and ONNX int8, from export_info.json.

    python scripts/bench_infer.py                  # both shapes, prints JSON
    python scripts/bench_infer.py --shapes tiny    # quick look
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertcli.config.sections import ModelConfig  # noqa: E402
from bertcli.export.backend import OrtBackend, pad_batch  # noqa: E402

SHAPES = {"tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512),
          "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)}


def sentences(limit: int = 20000) -> list[str]:
    from bertcli.corpus.build import split_sentences
    from bertcli.corpus.builtin import iter_documents

    out = []
    for _, text in iter_documents():
        out += [s for s in split_sentences(text) if 5 <= len(s.split()) <= 60]
        if len(out) >= limit:
            break
    return out[:limit]


def train_tokenizer(texts: list[str], directory: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    sp = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=8000, special_tokens=sp, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"pad_token": "[PAD]", "mask_token": "[MASK]"}))


def word_order_task(texts: list[str], rng: random.Random) -> list[tuple[str, int]]:
    """(sentence, 1) in order, or (its words shuffled, 0)."""
    out = []
    for s in texts:
        words = s.split()
        if rng.random() < 0.5:
            shuffled = words[:]
            while shuffled == words:
                rng.shuffle(shuffled)
            out.append((" ".join(shuffled), 0))
        else:
            out.append((s, 1))
    return out


def fine_tune(ckpt: Path, tok_dir: Path, train, steps: int, seed: int = 0) -> float:
    from tokenizers import Tokenizer

    from bertcli.model import build_model, save_checkpoint

    torch.manual_seed(seed)
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    tok.enable_truncation(64)
    model = build_model(ModelConfig(family="bert", **SHAPES["tiny"], max_position_embeddings=512), 8000, 0,
                        head="classification", labels=["shuffled", "original"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50) * max(0.0, 1 - s / steps))
    rng = np.random.default_rng(seed)
    model.train()
    start = time.perf_counter()
    for _ in range(steps):
        idx = rng.choice(len(train), 32, replace=False)
        feed = pad_batch(tok.encode_batch([train[i][0] for i in idx]), 0, ["input_ids", "attention_mask", "token_type_ids"])
        loss = torch.nn.functional.cross_entropy(
            model(*(torch.from_numpy(feed[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))),
            torch.tensor([train[i][1] for i in idx]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    save_checkpoint(model.eval(), ckpt, tokenizer_dir=tok_dir)
    return time.perf_counter() - start


def random_classifier(ckpt: Path, tok_dir: Path, shape: str) -> None:
    from bertcli.model import build_model, save_checkpoint

    torch.manual_seed(0)
    model = build_model(ModelConfig(family="bert", **SHAPES[shape], max_position_embeddings=512), 30522, 0,
                        head="classification", labels=["a", "b"])
    save_checkpoint(model.eval(), ckpt, tokenizer_dir=tok_dir)


# ----------------------------------------------------------------------------------- timing
class Eager:
    """A PyTorch model called eagerly on the numpy feeds."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def run(self, feed):
        with torch.inference_mode():
            return self.fn(**{k: torch.from_numpy(v) for k, v in feed.items()})


def time_backends(backends, latency_feed, batches, repeats: int) -> dict:
    """Latency and throughput of every backend, interleaved (a, b, c, d, a, b, ...) so that load
    from other processes on a shared machine falls on all of them alike; medians reported."""
    for b in backends:                  # warm-up: the runtimes' first-call allocations
        b.run(latency_feed)
        b.run(batches[0])
    lat = {b.name: [] for b in backends}
    for _ in range(repeats):
        for b in backends:
            t = time.perf_counter()
            b.run(latency_feed)
            lat[b.name].append(1000 * (time.perf_counter() - t))
    per_batch = {b.name: [] for b in backends}
    for feed in batches:
        for b in backends:
            t = time.perf_counter()
            b.run(feed)
            per_batch[b.name].append(time.perf_counter() - t)
    seqs = sum(f["input_ids"].shape[0] for f in batches)
    real = sum(int(f["attention_mask"].sum()) for f in batches)
    out = {}
    for b in backends:
        total = sum(per_batch[b.name])
        out[b.name] = {"latency_ms_p50": round(statistics.median(lat[b.name]), 2),
                       "latency_ms_p95": round(float(np.percentile(lat[b.name], 95)), 2),
                       "throughput_seq_per_s": round(seqs / total, 1), "throughput_tokens_per_s": round(real / total)}
    return out


def sorted_batches(encs, batch: int, window: int):
    """predict's batching: shortest first inside each window of `window` sequences, `batch` at a time."""
    out = []
    for w in range(0, len(encs), window):
        part = sorted(encs[w:w + window], key=lambda e: len(e.ids))
        out += [part[i:i + batch] for i in range(0, len(part), batch)]
    return out


def bench_shape(shape: str, ckpt: Path, work: Path, texts: list[str], threads: int, n_batches: int, repeats: int) -> dict:
    import transformers

    from bertcli.config.checkpoint import read_config
    from bertcli.export import graph
    from bertcli.export.backend import TorchBackend
    from bertcli.export.heads import detect_kind, exportable
    from bertcli.export.run import run_export
    from bertcli.export.verify import compare, verification_batches
    from bertcli.model.checkpoint import load_checkpoint
    from bertcli.tokenization.load import load_tokenizer

    t = time.perf_counter()
    bundle = run_export(ckpt, work / f"{shape}-fp32", force=True, optimize=False)     # the plain graph, verified
    export_s = time.perf_counter() - t
    plain = bundle.out / "model.onnx"
    config = read_config(ckpt, head="classification")
    t = time.perf_counter()
    fused_path = work / f"{shape}-fused.onnx"
    fused, note = graph.optimize(plain, fused_path, config.num_attention_heads, config.hidden_size)
    optimize_s = time.perf_counter() - t
    if not fused:
        fused_path = plain
    info = load_tokenizer(ckpt)
    reference = TorchBackend(exportable(detect_kind(ckpt, "classification"), load_checkpoint(ckpt, head="classification")[0]))
    checks = compare(reference, OrtBackend(fused_path, threads=threads),
                     verification_batches(info.tokenizer, info.pad_id, list(reference.input_names), 512), "fp32")
    int8 = work / f"{shape}-int8.onnx"                # quantized after fusion (what export does)
    graph.quantize_int8(fused_path, int8)
    int8_plain = work / f"{shape}-int8-plain.onnx"     # the other order: quantized unfused graph
    graph.quantize_int8(plain, int8_plain)
    tok = info.tokenizer
    tok.enable_truncation(128)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    latency_feed = pad_batch([tok.encode(" ".join(texts[:40]))], 0, names)          # 1 x 128, all real
    assert latency_feed["input_ids"].shape == (1, 128)
    pairs = [(texts[i], texts[i + 1]) for i in range(0, 32 * n_batches * 2, 2)]
    encs = tok.encode_batch(pairs)
    unsorted = [pad_batch(encs[i:i + 32], 0, names) for i in range(0, len(encs), 32)]
    batches = [pad_batch(b, 0, names) for b in sorted_batches(encs, 32, 320)]

    def real(feeds):
        return sum(int(f["attention_mask"].sum()) for f in feeds) / sum(f["input_ids"].size for f in feeds)

    ours, _ = load_checkpoint(ckpt, head="classification")
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(ckpt).eval()
    backends = [Eager("pytorch_bertcli", lambda **f: ours(**f)),
                Eager("pytorch_transformers", lambda **f: hf(**f).logits)]
    for name, path in (("ort_fp32_plain", plain), ("ort_fp32", fused_path), ("ort_int8", int8),
                       ("ort_int8_unfused", int8_plain)):
        b = OrtBackend(path, threads=threads)
        b.name = name
        backends.append(b)
    results = time_backends(backends, latency_feed, batches, repeats)
    # the same two runtimes on the unsorted batches: what sorting by length is worth
    padded = time_backends([backends[0], backends[3]], latency_feed, unsorted, 1)
    for name in ("ort_fp32_plain", "ort_fp32", "ort_int8", "ort_int8_unfused"):
        for ref in ("pytorch_bertcli", "pytorch_transformers"):
            r = results[name]
            r[f"throughput_x_{ref}"] = round(r["throughput_seq_per_s"] / results[ref]["throughput_seq_per_s"], 2)
            r[f"latency_p50_x_{ref}"] = round(results[ref]["latency_ms_p50"] / r["latency_ms_p50"], 2)
    sizes = {"fp32_mb": round(plain.stat().st_size / 1e6, 1), "int8_mb": round(int8.stat().st_size / 1e6, 1)}
    return {"backends": results, "export_seconds": round(export_s, 1), "optimize_seconds": round(optimize_s, 1),
            "optimizer": note, "model_files": sizes,
            "verification_fp32_max_abs_diff": bundle.info["verification"]["fp32"]["max_abs_diff"],
            "verification_fp32_fused_max_abs_diff": checks.max_abs_diff,
            "throughput_batches": f"{n_batches} x 32 sentence pairs, length-sorted in windows of 10 batches as "
                                  f"predict runs them: {100 * real(batches):.0f}% real tokens "
                                  f"({100 * real(unsorted):.0f}% unsorted)",
            "unsorted_throughput_seq_per_s": {k: v["throughput_seq_per_s"] for k, v in padded.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="tiny,base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", type=int, default=6, help="throughput batches of 32 at bert-base (tiny: 20)")
    ap.add_argument("--repeats", type=int, default=15, help="latency repeats at bert-base (tiny: 50)")
    ap.add_argument("--steps", type=int, default=800, help="fine-tuning steps of the quality model (0: no quality)")
    args = ap.parse_args()
    from bertcli.core import console

    console.out = console.err  # the export summaries go to stderr: stdout holds only the JSON
    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    texts = sentences()
    rng.shuffle(texts)
    report: dict = {"machine": f"{torch.get_num_threads()} threads, CPU", "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train_tokenizer(texts, work / "tok")
        task = word_order_task(texts, rng)
        dev, train = task[:1000], task[1000:]
        (work / "dev.jsonl").write_text("".join(json.dumps({"text": s, "label": ["shuffled", "original"][y]}) + "\n"
                                                for s, y in dev), encoding="utf-8")
        tuned = work / "tiny-tuned"
        if args.steps:
            train_s = fine_tune(tuned, work / "tok", train, args.steps)
        else:                                   # --steps 0: speed only, no quality figure
            random_classifier(tuned, work / "tok", "tiny")
        from bertcli.export.run import run_export

        q = run_export(tuned, work / "tiny-int8", quantize="int8", dev=work / "dev.jsonl") if args.steps else None
        m = q.info["dev_metrics"] if q else {}
        report["quality"] = None if not args.steps else {
            "task": "word order (original vs shuffled) from the built-in corpus, 1,000 dev sentences",
            "model": "bert-tiny shape (L2 H128), fine-tuned from scratch", "train_steps": args.steps,
            "train_seconds": round(train_s, 1), "dev_accuracy": {k: v["accuracy"] for k, v in m.items()},
            "int8_loss_points": round(100 * (m["onnx_fp32"]["accuracy"] - m["onnx_int8"]["accuracy"]), 2)}
        for shape in args.shapes.split(","):
            ckpt = tuned if shape == "tiny" else work / f"{shape}-random"
            if shape != "tiny":
                random_classifier(ckpt, work / "tok", shape)
            many = shape == "tiny"
            report[f"bert-{shape}"] = bench_shape(shape, ckpt, work, texts, args.threads,
                                                  n_batches=20 if many else args.batches,
                                                  repeats=50 if many else args.repeats)
    base = report.get("bert-base", {}).get("backends")
    if base:
        report["goals"] = {
            "ort_fp32_throughput_x_pytorch_bertcli (goal 1.5)": base["ort_fp32"]["throughput_x_pytorch_bertcli"],
            "ort_int8_throughput_x_pytorch_transformers (goal 5)": base["ort_int8"]["throughput_x_pytorch_transformers"]}
        if report["quality"]:
            report["goals"]["int8_dev_accuracy_loss_points (goal <= 1)"] = report["quality"]["int8_loss_points"]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
