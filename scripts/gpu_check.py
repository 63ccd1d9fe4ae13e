#!/usr/bin/env python
"""The GPU check (run it through scripts/gpu_check.sh): one JSON line per check, on one GPU in
under 8 minutes, with no network, from the repository alone (the built-in corpus).

    pretrain_bf16_{128,512}          bert-base, 200 steps per side, bertcli and transformers' step
                                     side by side (scripts/bench_train.py): tokens/s, MFU
    pretrain_bf16_{128,512}_compile  the same with train.compile: true (compile time separately)
    fp16_loss_scaling                50 steps fp16 with dynamic loss scaling: no overflow skips
                                     after the first 10 (the scale's warm-up)
    micro_batch_auto                 micro_batch_size: auto from CUDA free memory, then one step
                                     at the chosen size (its peak memory against the free memory)
    modernbert_base                  100 steps bf16 at 1024 tokens, and transformers' step
    finetune_export_cuda             finetune classify (CLI) -> export (CLI, CPU verification) ->
                                     the graph on ONNX Runtime's CUDA execution provider against
                                     PyTorch at export's tolerance
    finetune_ddp_nccl                torchrun over every visible GPU (nccl; --cpu: 2 processes, gloo)
                                     fine-tunes the same classifier as one process: the epoch losses
                                     and dev score agree (skipped with fewer than 2 GPUs)

MFU = model FLOPs/s over the GPU's dense bf16 peak: PEAKS below, matched on
torch.cuda.get_device_properties(0).name (GPU_PEAK_TFLOPS=... overrides). Model FLOPs per real
token: 6 x the encoder layers' weights (multiply-adds of forward and backward) + 12 x layers x H
x the keys each query sees (scores and their backward); the sparse MLM head and the embeddings
are left out, so MFU is conservative for bertcli (it computes less than that) and the same rule
for transformers.

`--cpu`: the dry mode that tests/test_gpu_check.py runs: tiny shapes (bert-tiny, modernbert-tiny
with a smaller vocabulary), a few steps, fp32/bf16 on the CPU, ONNX Runtime's CPU provider; the
fp16 check (CUDA only) is reported skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
for _k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_k, "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import Bench  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# Dense bf16 tensor-core peaks (no sparsity), TFLOP/s, from NVIDIA's data sheets; the first
# entry whose every word is in the device name wins, so the specific names come first.
PEAKS = [("H200", 989.0), ("GH200", 989.0), ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0),
         ("H800", 989.0), ("B200", 2250.0), ("A100", 312.0), ("A800", 312.0), ("L40S", 362.0), ("L40", 181.0),
         ("L4", 121.0), ("A10", 125.0)]


def peak_tflops(name: str) -> tuple[float | None, str]:
    if os.environ.get("GPU_PEAK_TFLOPS"):
        return float(os.environ["GPU_PEAK_TFLOPS"]), "GPU_PEAK_TFLOPS"
    for key, tf in PEAKS:
        if all(word in name for word in key.split()):
            return tf, f"table: {key} dense bf16"
    return None, f"unknown device {name!r}: set GPU_PEAK_TFLOPS"


def flops_per_token(model, length: int) -> float:
    """Model FLOPs per real token of one training step (see the module docstring)."""
    enc, c = model.encoder, model.encoder.config
    total = 0.0
    for i, (a, f) in enumerate(enc.layer_plan):
        weights = sum(p.numel() for m in (enc.attention[a], enc.ffn[f]) for p in m.parameters() if p.ndim == 2)
        keys = length if c.is_global(i) else min(length, 2 * c.window + 1)
        total += 6 * weights + 12 * c.hidden_size * keys
    return total


class Checks:
    def __init__(self, args):
        self.args, self.cpu = args, args.cpu
        self.device = "cpu" if self.cpu else "cuda"
        self.deadline = time.monotonic() + args.budget_s
        self.cache = args.cache or tempfile.mkdtemp(prefix="bertcli-gpu-check-")
        self.name = "cpu" if self.cpu else torch.cuda.get_device_properties(0).name
        self.peak, self.peak_source = (None, "--cpu: no GPU peak") if self.cpu else peak_tflops(self.name)
        self.results: dict[str, dict] = {}
        self.failed = 0

    # ------------------------------------------------------------------ running
    def run(self, name: str, fn, need_s: float) -> None:
        left = self.deadline - time.monotonic()
        line: dict = {"check": name}
        if left < need_s:
            line.update(ok=False, skipped=f"time budget: {left:.0f} s left, the check needs ~{need_s:.0f} s")
        else:
            t0 = time.monotonic()
            try:
                line.update(fn())
            except Exception as e:  # one broken check must not hide the others' lines
                line.update(ok=False, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=4))
            line["wall_s"] = round(time.monotonic() - t0, 1)
        self.failed += not line.get("ok", False) and "skipped_reason" not in line
        self.results[name] = line
        print(json.dumps(line), flush=True)

    def sets(self, length: int, batch: int, precision: str, *extra: str) -> list[str]:
        base = [f"data.max_seq_length={length}", f"train.batch_size={batch}", f"train.micro_batch_size={batch}",
                f"train.precision={precision}", f"train.device={self.device}", "train.num_workers=2",
                "data.dupe_factor=2"]
        if self.cpu:
            base += ["tokenizer.vocab_size=2000", "train.num_workers=0"]
        return base + list(extra)

    def bench(self, recipe: str, sets: list[str], **kw) -> Bench:
        return Bench(recipe, sets, self.args.documents, self.cache, **kw)

    def mfu(self, model, length: int, tps: float) -> float | None:
        if self.peak is None:
            return None
        return round(flops_per_token(model, length) * tps / (self.peak * 1e12), 4)

    # ------------------------------------------------------------------- checks
    def pretrain(self, length: int, batch: int, steps: int, compile_: bool = False) -> dict:
        b = self.bench(self.args.bert, self.sets(length, batch, "bf16", f"train.compile={str(compile_).lower()}"),
                       reference=not compile_)
        rounds = 4 if steps >= 8 else 1
        m = b.measure(rounds, max(1, steps // rounds), warmup=3 if compile_ else 2)
        tps = m.pop("_tps")
        out = {**b.describe(), "steps_per_side": rounds * max(1, steps // rounds), **m,
               "flops_per_token": flops_per_token(b.model, length), "device_name": self.name,
               "peak_bf16_tflops": self.peak, "peak_source": self.peak_source,
               "mfu": {k: self.mfu(b.model, length, v) for k, v in tps.items()}}
        if compile_:
            plain = self.results.get(f"pretrain_bf16_{length}", {}).get("bertcli_tokens_per_s")
            out["compile_s"] = round(max(0.0, m["first_step_s"]["bertcli"] - m["s_per_step"]["bertcli"]), 1)
            out["speedup_vs_eager"] = round(tps["bertcli"] / plain, 3) if plain else None
        out["ok"] = all(v > 0 for v in tps.values())
        return out

    def fp16(self, steps: int, warm: int) -> dict:
        if self.cpu:
            return {"ok": True, "skipped_reason": "fp16 with loss scaling runs on CUDA only (--cpu)"}
        b = self.bench(self.args.bert, self.sets(128, 64, "fp16"), reference=False, window_compare=False)
        step = b.sides["bertcli"]
        for _ in range(warm):
            step()
        early = b.trainer.overflows
        t0 = time.perf_counter()
        for _ in range(steps - warm):
            step()
        torch.cuda.synchronize()
        late = b.trainer.overflows - early
        return {"steps": steps, "warmup_steps": warm, "overflow_skips_in_warmup": early,
                "overflow_skips_after_warmup": late, "loss_scale": float(b.trainer.scaler.get_scale()),
                "s_per_step": round((time.perf_counter() - t0) / (steps - warm), 4), "ok": late == 0}

    def micro_auto(self, length: int, batch: int) -> dict:
        from bertcli.train import memory

        dev = torch.device(self.device)
        free, source = memory.available_bytes(dev)
        b = self.bench(self.args.bert, self.sets(length, batch, "bf16") + ["train.micro_batch_size=auto"],
                       reference=False, window_compare=False)
        tr = b.trainer
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        b.sides["bertcli"]()                     # one optimizer step: accumulation x the chosen micro-batch
        peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else None
        return {"max_seq_length": length, "batch_size": batch, "chosen_micro_batch_size": tr.micro,
                "accumulation": tr.accum, "free_bytes_before": free, "free_source": source,
                "peak_allocated_bytes": peak, "ok": tr.micro >= 1 and (peak is None or peak <= free)}

    def modernbert(self, length: int, batch: int, steps: int) -> dict:
        b = self.bench(self.args.modernbert, self.sets(length, batch, "bf16"))
        rounds = 2 if steps >= 4 else 1
        m = b.measure(rounds, max(1, steps // rounds), warmup=2)
        tps = m.pop("_tps")
        return {**b.describe(), "steps_per_side": rounds * max(1, steps // rounds), **m,
                "flops_per_token": flops_per_token(b.model, length),
                "mfu": {k: self.mfu(b.model, length, v) for k, v in tps.items()},
                "ok": all(v > 0 for v in tps.values())}

    def finetune_ddp(self) -> dict:
        """finetune_export's checkpoint and data, fine-tuned by one process and by torchrun over
        all visible GPUs (bertcli/finetune/ddp.py), dropout 0: the same losses within rel 1e-3
        (TF32 and nccl's reduction order) and the same dev score within 0.02."""
        root = Path(self.cache) / "finetune"
        if not (root / "ckpt" / "config.json").exists():
            return {"ok": False, "error": "needs finetune_export_cuda's checkpoint (it runs first)"}
        n = 2 if self.cpu else torch.cuda.device_count()
        if n < 2:
            return {"ok": True, "skipped_reason": f"{n} GPU visible: DDP needs 2 or more", "gpus": n}
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        args = ["finetune", "classify", "-c", str(root / "ckpt"), "--train", str(root / "train.jsonl"),
                "--dev", str(root / "dev.jsonl"), "--force", "--set", "finetune.dropout=0",
                "--set", f"finetune.classify.batch_size={8 * n}", "--set", "finetune.classify.epochs=2",
                "--set", "finetune.classify.max_seq_length=32"]
        runs = {}
        for name, launch in (("one", [sys.executable, "-m", "bertcli"]),
                             ("ddp", [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(n),
                                      "--master_port", "29517", "-m", "bertcli"])):
            t0 = time.monotonic()
            r = subprocess.run(launch + args + ["-o", str(root / f"ddp-{name}")], capture_output=True, text=True,
                               env=env)
            if r.returncode != 0:
                return {"ok": False, "stage": name, "rc": r.returncode, "output": (r.stdout + r.stderr)[-2000:]}
            runs[name] = json.loads((root / f"ddp-{name}" / "results.json").read_text())
            runs[name]["wall"] = round(time.monotonic() - t0, 1)
        losses = {k: [h["train_loss"] for h in v["history"]] for k, v in runs.items()}
        close = all(abs(a - b) <= 1e-3 * abs(a) for a, b in zip(losses["one"], losses["ddp"]))
        return {"processes": n, "backend": "gloo" if self.cpu else "nccl", "train_losses": losses,
                "dev_score": {k: v["score"] for k, v in runs.items()},
                "train_seconds": {k: v["train_seconds"] for k, v in runs.items()},
                "ok": close and abs(runs["one"]["score"] - runs["ddp"]["score"]) <= 0.02}

    def finetune_export(self) -> dict:
        from bertcli.export.backend import OrtBackend, TorchBackend
        from bertcli.export.heads import detect_kind, exportable
        from bertcli.export.verify import compare, verification_batches
        from bertcli.model import build_model, save_checkpoint
        from bertcli.tokenization.load import load_tokenizer

        root = Path(self.cache) / "finetune"
        root.mkdir(parents=True, exist_ok=True)
        # a small pretrained-shaped checkpoint with the bench's tokenizer (the check is the pipeline
        # on the GPU, not the accuracy of an untrained model)
        b = self.bench("bert-tiny", self.sets(64, 8, "fp32"), reference=False, window_compare=False)
        ckpt = root / "ckpt"
        tok = load_tokenizer(b.tokenizer_dir)
        torch.manual_seed(0)
        save_checkpoint(build_model(b.recipe.model, tok.vocab_size, tok.pad_id), ckpt, tokenizer_dir=b.tokenizer_dir)
        words = ["good", "bad"]
        for split, n in (("train", 64 if self.cpu else 512), ("dev", 32)):
            with open(root / f"{split}.jsonl", "w", encoding="utf-8") as f:
                for i in range(n):
                    f.write(json.dumps({"text": f"the film was {words[i % 2]} and long {i}", "label": i % 2}) + "\n")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        cmd = [sys.executable, "-m", "bertcli"]
        ft = root / "classifier"
        r = subprocess.run(cmd + ["finetune", "classify", "-c", str(ckpt), "--train", str(root / "train.jsonl"),
                                  "--dev", str(root / "dev.jsonl"), "-o", str(ft), "--force",
                                  "--set", "finetune.classify.epochs=1", "--set", f"finetune.device={self.device}",
                                  "--set", "finetune.classify.max_seq_length=32"],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return {"ok": False, "stage": "finetune", "rc": r.returncode, "output": (r.stdout + r.stderr)[-2000:]}
        model_dir = ft / "model" if (ft / "model" / "config.json").exists() else ft
        bundle = root / "bundle"
        r = subprocess.run(cmd + ["export", "-c", str(model_dir), "-o", str(bundle), "--force"],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return {"ok": False, "stage": "export", "rc": r.returncode, "output": (r.stdout + r.stderr)[-2000:]}
        import onnxruntime as ort

        provider = "CPUExecutionProvider" if self.cpu else "CUDAExecutionProvider"
        if provider not in ort.get_available_providers():
            return {"ok": False, "stage": "ort", "error": f"{provider} not in onnxruntime's providers "
                    f"{ort.get_available_providers()} (install onnxruntime-gpu)"}
        kind = detect_kind(model_dir, None)
        module = exportable(kind, kind.load(model_dir))
        reference = TorchBackend(module)
        candidate = OrtBackend(bundle / "model.onnx", providers=[provider])
        used = candidate.session.get_providers()
        tok = load_tokenizer(model_dir)
        batches = verification_batches(tok.tokenizer, tok.pad_id, list(module.input_names), 64)
        check = compare(reference, candidate, batches, "fp32")
        export_info = json.loads((bundle / "export_info.json").read_text())
        return {"task": kind.task, "provider": provider, "session_providers": used,
                "export_cpu_verification_passed": all(c["passed"] for c in export_info["verification"].values()),
                "max_abs_diff": check.max_abs_diff, "tolerance": check.tolerance,
                "ok": check.passed and used[0] == provider}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="dry mode: tiny shapes, a few steps, on the CPU")
    p.add_argument("--budget-s", type=float, default=450.0, help="checks that would not fit are reported skipped")
    p.add_argument("--documents", type=int, default=None, help="built-in corpus documents (default: all; --cpu 40)")
    p.add_argument("--cache", default=None, help="tokenizers and data (default: a new temporary directory)")
    args = p.parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        print(json.dumps({"check": "device", "ok": False, "error": "no CUDA device (use --cpu for the dry mode)"}))
        return 1
    args.documents = args.documents or (40 if args.cpu else 100000)
    args.bert, args.modernbert = ("bert-tiny", "modernbert-tiny") if args.cpu else ("bert-base", "modernbert-base")
    c = Checks(args)
    print(json.dumps({"check": "device", "ok": True, "device": c.device, "name": c.name,
                      "peak_bf16_tflops": c.peak, "peak_source": c.peak_source, "torch": torch.__version__,
                      "cuda": torch.version.cuda, "mode": "cpu dry run" if args.cpu else "gpu"}), flush=True)
    if args.cpu:   # tiny: every code path, a few steps
        plan = [("pretrain_bf16_128", lambda: c.pretrain(32, 4, 2), 0),
                ("pretrain_bf16_512", lambda: c.pretrain(64, 2, 2), 0),
                ("pretrain_bf16_128_compile", None, 0),
                ("pretrain_bf16_512_compile", None, 0),
                ("fp16_loss_scaling", lambda: c.fp16(4, 2), 0),
                ("micro_batch_auto", lambda: c.micro_auto(64, 8), 0),
                ("modernbert_base", lambda: c.modernbert(288, 2, 2), 0),   # > 8 x its window: chunked
                ("finetune_export_cuda", c.finetune_export, 0),
                ("finetune_ddp_nccl", c.finetune_ddp, 0)]
    else:          # need_s: about what each takes on an H100-class GPU, with margin
        plan = [("pretrain_bf16_128", lambda: c.pretrain(128, 128, 200), 60),
                ("pretrain_bf16_512", lambda: c.pretrain(512, 32, 200), 90),
                ("pretrain_bf16_128_compile", lambda: c.pretrain(128, 128, 200, compile_=True), 90),
                ("pretrain_bf16_512_compile", lambda: c.pretrain(512, 32, 200, compile_=True), 90),
                ("fp16_loss_scaling", lambda: c.fp16(50, 10), 30),
                ("micro_batch_auto", lambda: c.micro_auto(512, 4096), 30),
                ("modernbert_base", lambda: c.modernbert(1024, 16, 100), 60),
                ("finetune_export_cuda", c.finetune_export, 60),
                ("finetune_ddp_nccl", c.finetune_ddp, 60)]
    for name, fn, need in plan:
        if fn is None:   # --cpu: compiling on a loaded CPU takes minutes; the flag's path is the same
            line = {"check": name, "ok": True, "skipped_reason": "train.compile is not timed in the --cpu dry mode"}
            c.results[name] = line
            print(json.dumps(line), flush=True)
            continue
        c.run(name, fn, need)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
