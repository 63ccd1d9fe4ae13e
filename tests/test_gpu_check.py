"""scripts/gpu_check.sh keeps working while no GPU is lent: its --cpu dry mode runs every check's
code path at tiny shapes (the compile timing and fp16, which is CUDA only, are reported skipped)
and each line is checked for the figures the GPU run reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_GUARD_S, REPO

sys.path.insert(0, str(REPO / "scripts"))
from gpu_check import PEAKS, flops_per_token, peak_tflops  # noqa: E402

CHECKS = ["device", "pretrain_bf16_128", "pretrain_bf16_512", "pretrain_bf16_128_compile", "pretrain_bf16_512_compile",
          "fp16_loss_scaling", "micro_batch_auto", "modernbert_base", "finetune_export_cuda", "finetune_ddp_nccl"]


@pytest.mark.slow   # builds four small data sets, pretrains, fine-tunes and exports: minutes on two loaded cores
def test_the_dry_mode_prints_one_passing_json_line_per_check(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
    r = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--cpu", "--cache", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=HANG_GUARD_S)  # a hang guard, not a speed limit
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert [x["check"] for x in lines] == CHECKS, r.stdout + r.stderr[-3000:]
    by = {x["check"]: x for x in lines}
    assert r.returncode == 0 and all(x["ok"] for x in lines), r.stdout + r.stderr[-3000:]
    for name in ("pretrain_bf16_128", "pretrain_bf16_512"):
        row = by[name]
        assert row["precision"] == "bf16" and row["bertcli_tokens_per_s"] > 0 and row["transformers_tokens_per_s"] > 0
        assert row["ratio"] == round(row["bertcli_tokens_per_s"] / row["transformers_tokens_per_s"], 2) or \
            abs(row["ratio"] - row["bertcli_tokens_per_s"] / row["transformers_tokens_per_s"]) < 0.02
        assert row["flops_per_token"] > 0 and set(row["mfu"]) == {"bertcli", "transformers"}
    assert by["pretrain_bf16_512"]["max_seq_length"] == 64
    assert "CUDA only" in by["fp16_loss_scaling"]["skipped_reason"]
    auto = by["micro_batch_auto"]
    assert 1 <= auto["chosen_micro_batch_size"] <= auto["batch_size"] and auto["free_bytes_before"] > 0
    mb = by["modernbert_base"]
    assert mb["family"] == "modernbert" and mb["window_blocks_speedup"] > 0   # the chunked local layers ran
    ft = by["finetune_export_cuda"]
    assert ft["provider"] == "CPUExecutionProvider" and ft["session_providers"][0] == ft["provider"]
    ddp = by["finetune_ddp_nccl"]
    assert ddp["processes"] == 2 and ddp["backend"] == "gloo" and len(ddp["train_losses"]["ddp"]) == 2
    assert ft["export_cpu_verification_passed"] and all(ft["max_abs_diff"][k] <= ft["tolerance"][k] for k in ft["tolerance"])


def test_peaks_and_model_flops():
    assert peak_tflops("NVIDIA H100 PCIe") == (756.0, "table: H100 PCIe dense bf16")
    assert peak_tflops("NVIDIA H100 80GB HBM3")[0] == 989.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB")[0] == 312.0
    assert peak_tflops("NVIDIA GeForce GTX 1080")[0] is None
    assert len({k for k, _ in PEAKS}) == len(PEAKS)

    from bertcli.config.recipe import load_recipe
    from bertcli.model import build_model

    model = build_model(load_recipe("bert-base").model, 30522, 0)
    # bert-base: 12 layers x (4 H^2 + 2 H I) weights = 84.9M; 6 per weight + 12 L H T attention
    weights = 12 * (4 * 768 ** 2 + 2 * 768 * 3072)
    assert flops_per_token(model, 128) == 6 * weights + 12 * 12 * 768 * 128
    assert Path(REPO / "scripts" / "gpu_check.sh").stat().st_mode & 0o111   # executable
