"""Two-process DDP on CPU (gloo) for the tests: a free local port, and `torchrun --nproc_per_node 2`
of this interpreter (test_finetune_ddp for fine-tuning, test_rtd_pretrain for RTD pretraining)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

# The fine-tuning DDP tests' shared settings (test_finetune_ddp, test_finetune_ddp_embed): dropout 0,
# so that two processes can equal one, and the worker script that plays one torchrun rank.
COMMON = ["--set", "finetune.dropout=0", "--set", "finetune.eval_batch_size=8", "--set", "finetune.threads=1"]
WORKER = Path(__file__).parent / "ddp_finetune_worker.py"


def assert_same_model_folder(one: Path, two: Path, label: str) -> None:
    """The one-process and two-process fine-tuned folders hold the same files: JSON within float
    tolerance (SQuAD's n-best lists carry logits; metrics.jsonl line by line: the per-step losses
    summed over ranks in another order), the rest byte for byte; the weights within 1e-4 (Adam
    amplifies rounding of near-zero gradients); and only rank 0 wrote (no other folder or
    temporary next to the output)."""
    import json

    import torch
    from safetensors.torch import load_file

    from helpers.sweeps import assert_close_json

    files1, files2 = outputs(one), outputs(two)
    assert files1.keys() == files2.keys(), (label, sorted(files1), sorted(files2))
    for k in files1:
        if k.endswith(".json"):
            assert_close_json(json.loads(files1[k]), json.loads(files2[k]), f"{label} {k}")
        elif k.endswith(".jsonl"):
            lines1, lines2 = files1[k].splitlines(), files2[k].splitlines()
            assert len(lines1) == len(lines2), (label, k)
            for a, b in zip(lines1, lines2):
                assert_close_json(json.loads(a), json.loads(b), f"{label} {k}")
        else:
            assert files1[k] == files2[k], (label, k)
    w1, w2 = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    assert w1.keys() == w2.keys()
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-4, atol=1e-4, msg=lambda m, k=k: f"{label} {k}: {m}")
    assert sorted(p.name for p in two.parent.glob(f"{two.name}*")) == [two.name]


def outputs(folder: Path) -> dict[str, bytes]:
    """A fine-tuned folder's files by name, but those that hash or hold the weights (compared apart)."""
    skip = {"results.json", "model.safetensors", "recipe.yaml", "bertcli-manifest.json"}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in skip and not p.name.startswith(".")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`torchrun --nproc_per_node 2 ARGS` (the launcher's module, this interpreter), one thread
    each; `env`: variables added for the workers."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
    env = {k: v for k, v in env.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
