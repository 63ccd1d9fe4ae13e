"""Short real pretraining runs: an in-process recipe (BASE) and the real CLI's 4-step run
(pretrain_cli, finished_run) whose checkpoints the resume and state tests damage."""

from __future__ import annotations

from pathlib import Path

from conftest import ONE_THREAD, run_cli, write_documents

from bertcli.config.recipe import load_recipe
from bertcli.train.metrics import TIMING_KEYS, read_metrics

BASE = ["train.max_steps=8", "train.warmup_steps=2", "train.batch_size=8", "train.learning_rate=0.01",
        "train.log_every=1", "train.eval_every=4", "train.eval_batches=2", "train.save_every=2",
        "train.num_workers=0", "train.tensorboard=false", "train.keep_last=10", "seed=3"]


def recipe_for(run_dir: Path, *overrides):
    """BASE, writing to `run_dir`, with --set items `overrides`."""
    return load_recipe(None, BASE + [f"output_dir={run_dir}", *overrides])


def model_records(run_dir: Path):
    """metrics.jsonl's records without the timings (what two equal runs share bit for bit)."""
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(run_dir / "metrics.jsonl")]


CLI_TINY = ["tokenizer.vocab_size=200", "data.max_seq_length=32", "data.dupe_factor=1",
            "model.hidden_size=32", "model.num_hidden_layers=1", "model.num_attention_heads=2",
            "model.intermediate_size=64", "train.batch_size=4", "train.max_steps=4", "train.warmup_steps=1",
            "train.save_every=2", "train.eval_every=4", "train.eval_batches=1", "train.log_every=1",
            "train.num_workers=0"]


def pretrain_cli(corpus: Path, out: Path, *extra, steps=4):
    """`bertcli pretrain` of a tiny model on `corpus` into `out`, for `steps` updates."""
    sets = [*CLI_TINY, f"corpus.sources=[{corpus}]", f"output_dir={out}", f"train.max_steps={steps}"]
    return run_cli("pretrain", "-r", "bert-tiny", *[x for s in sets for x in ("--set", s)], *extra,
                   cwd=out.parent, env=ONE_THREAD)


def finished_run(root: Path) -> Path:
    """A real 4-step pretrain under `root` (checkpoints/step-0000002, step-0000004 and final/,
    stages inside the run directory) on root/corpus.txt, a path every copy keeps (the path is
    part of the stage key); returns `root`."""
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    docs = [[" ".join(words[(d + s + k) % len(words)] for k in range(6 + s % 3)) + " ." for s in range(5)]
            for d in range(30)]
    write_documents(root / "corpus.txt", docs)
    r = pretrain_cli(root / "corpus.txt", root / "run")
    assert r.rc == 0, r.output
    return root
