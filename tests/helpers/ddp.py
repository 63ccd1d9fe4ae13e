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


def outputs(folder: Path) -> dict[str, bytes]:
    """A fine-tuned folder's files by name, but those that hash or hold the weights (compared apart)."""
    skip = {"results.json", "model.safetensors", "recipe.yaml", "bertcli-manifest.json"}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in skip and not p.name.startswith(".")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args, cwd: Path) -> subprocess.CompletedProcess:
    """`torchrun --nproc_per_node 2 ARGS` (the launcher's module, this interpreter), one thread each."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    env = {k: v for k, v in env.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
