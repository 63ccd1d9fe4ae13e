"""ONNX Runtime speed of teacher and student side by side, in one process: each model exported
(`bertcli export`'s code, fp32) and dynamically quantized (int8), then timed on the same
inputs, interleaved (a, b, c, a, b, c ...) so that load from other processes falls on all alike.

    onnx_speed({name: checkpoint dir}, work, length, repeats, batches, threads)
        -> {name: {"fp32": {...}, "int8": {...}}}: latency at batch 1 (p50 / p95 ms) and
           throughput at batch 32 (sequences/s), `length` tokens each, plus the graph sizes
    teacher_student_speed(teacher, student, length) -> results.json's distill.speed: both
        timed, with `vs_teacher_fp32` (`bertcli distill` with finetune.distill.measure_speed)
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bertcli.config.checkpoint import read_config
from bertcli.core import console
from bertcli.export.backend import OrtBackend
from bertcli.export.graph import quantize_int8
from bertcli.export.run import run_export


def _feed(batch: int, length: int, vocab: int, seed: int) -> dict[str, np.ndarray]:
    """Random non-special ids (ids 0..4 are specials in every bertcli tokenizer layout), all real."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, size=(batch, length), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def export_pair(checkpoint: Path, work: Path) -> tuple[Path, Path]:
    """(fp32 model.onnx, int8 model) of a checkpoint, written under `work`."""
    bundle = run_export(Path(checkpoint), work / "fp32", verify=False, force=True)
    int8 = work / "int8.onnx"
    quantize_int8(bundle.out / "model.onnx", int8)
    return bundle.out / "model.onnx", int8


def onnx_speed(models: dict[str, Path], work: Path, length: int = 128, repeats: int = 20, batches: int = 4,
               threads: int | None = None) -> dict:
    sessions, sizes = {}, {}
    vocab = min(read_config(Path(d)).vocab_size for d in models.values())
    for name, directory in models.items():
        fp32, int8 = export_pair(Path(directory), Path(work) / name)
        for kind, path in (("fp32", fp32), ("int8", int8)):
            s = OrtBackend(path, threads=threads)
            sessions[(name, kind)] = (s, [n for n in s.input_names])
            sizes[(name, kind)] = path.stat().st_size
    one = _feed(1, length, vocab, 0)
    many = [_feed(32, length, vocab, i + 1) for i in range(batches)]

    def run(key, feed):
        s, names = sessions[key]
        return s.session.run(None, {n: feed[n] for n in names})

    for key in sessions:                                   # warm-up
        run(key, one)
        run(key, many[0])
    lat: dict = {k: [] for k in sessions}
    for _ in range(repeats):
        for key in sessions:
            t = time.perf_counter()
            run(key, one)
            lat[key].append(1000 * (time.perf_counter() - t))
    per: dict = {k: [] for k in sessions}
    for feed in many:
        for key in sessions:
            t = time.perf_counter()
            run(key, feed)
            per[key].append(time.perf_counter() - t)
    out: dict = {}
    for (name, kind) in sessions:
        out.setdefault(name, {})[kind] = {
            "latency_ms_batch1_p50": round(statistics.median(lat[(name, kind)]), 2),
            "latency_ms_batch1_p95": round(float(np.percentile(lat[(name, kind)], 95)), 2),
            "throughput_seq_per_s_batch32": round(32 / statistics.median(per[(name, kind)]), 1),
            "onnx_mb": round(sizes[(name, kind)] / 1e6, 2)}
    return out


def relative(speeds: dict, reference: str) -> dict:
    """Each model's throughput and batch-1 latency as multiples of `reference`'s fp32."""
    ref = speeds[reference]["fp32"]
    return {name: {kind: {"throughput_x": round(v["throughput_seq_per_s_batch32"] / ref["throughput_seq_per_s_batch32"], 2),
                          "latency_x": round(ref["latency_ms_batch1_p50"] / v["latency_ms_batch1_p50"], 2)}
                   for kind, v in kinds.items()} for name, kinds in speeds.items()}


def teacher_student_speed(teacher: Path, student: Path, length: int) -> dict:
    """ONNX Runtime fp32 / int8 latency and throughput of teacher and student, `length` tokens,
    with each as multiples of the teacher's fp32 (results.json's distill.speed)."""
    console.log("distill: timing teacher and student with ONNX Runtime (fp32, int8)")
    with tempfile.TemporaryDirectory() as work:
        speeds = onnx_speed({"teacher": teacher, "student": student}, Path(work), length=length)
    return {**speeds, "vs_teacher_fp32": relative(speeds, "teacher")}
