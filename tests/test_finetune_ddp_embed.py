"""`finetune embed` and `distill` under torchrun (two gloo workers on CPU) equal one process, at
dropout 0: the same per-step losses (metrics.jsonl), the same dev scores every epoch, the same dev
predictions and teacher-logit cache, and the same weights after the last step.

One launch of two workers (RANK 0 and 1 of WORLD_SIZE 2, as torchrun starts them) runs every case
in one process group (tests/helpers/ddp_finetune_worker.py); the one-process runs are in-process.
Tiny L1-2 H32 models, a few steps each:
    pairs      in-batch negatives with a hard-negative column, symmetric, Matryoshka dims; 13
               examples in batches of 4: the last batch of 1 leaves rank 1 an EMPTY shard (it
               still joins the gather; nothing is padded or repeated); dev: scored pairs (Spearman)
    cached     GradCache (--mini-batch-size 3 < each shard's 9 texts), a hard-negative column; 15
               examples in batches of 6: the last batch of 3 splits 2 / 1; dev: a BEIR folder
    cosent     scored pairs (CoSENT over the gathered global batch); 11 in batches of 4 (3 -> 2 / 1);
               no dev set (the last epoch is kept; the finiteness check embeds the training texts)
    distill    classify, soft + hard loss, --unlabelled rows (the hard loss's own count), the
               teacher's logits computed once, sharded and gathered: the kept cache is byte-identical
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ONE_THREAD, run_cli
from finetune_fixtures import tiny_checkpoint
from helpers.ddp import COMMON, WORKER, assert_same_model_folder
from helpers.ddp import free_port as _free_port
from helpers.ddp import outputs as _outputs
from helpers.sweeps import assert_close_json as _assert_close_json

SYLLABLES = ["ka", "lo", "mi", "ru", "te", "sa", "no", "vi", "de", "po", "zu", "fe"]


def _words(rng: random.Random, n: int) -> list[str]:
    return sorted({rng.choice(SYLLABLES) + rng.choice(SYLLABLES) + rng.choice(SYLLABLES) for _ in range(4 * n)})[:n]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _embed_data(root: Path, rng: random.Random) -> tuple[dict, list[str]]:
    """Pair files (anchor, positive, negative), scored pairs, a BEIR folder; all their texts."""
    words = _words(rng, 40)
    q, d, fill = words[:10], words[10:20], words[20:]

    def pair(i: int) -> dict:
        j = (i + 1 + rng.randrange(9)) % 10
        return {"anchor": f"{q[i]} {rng.choice(fill)}", "positive": f"{d[i]} {rng.choice(fill)} {rng.choice(fill)}",
                "negative": f"{d[j]} {rng.choice(fill)} {rng.choice(fill)}"}

    def scored(n: int) -> list[dict]:
        rows = []
        for _ in range(n):
            a = rng.choices(fill, k=5)
            b, k = list(a), rng.randint(1, 5)          # never the same text twice: its cosine 1 would tie by rounding
            for i in rng.sample(range(5), k):
                b[i] = rng.choice([w for w in fill if w != a[i]])
            rows.append({"text": " ".join(a), "text_pair": " ".join(b), "score": float(5 - k)})
        return rows

    files = {"pairs13": _jsonl(root / "pairs13.jsonl", [pair(rng.randrange(10)) for _ in range(13)]),
             "pairs15": _jsonl(root / "pairs15.jsonl", [pair(rng.randrange(10)) for _ in range(15)]),
             "scored": _jsonl(root / "scored.jsonl", scored(11)), "sts": _jsonl(root / "sts.jsonl", scored(12))}
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    corpus = [{"_id": f"d{i}-{j}", "title": "", "text": f"{d[i]} {rng.choice(fill)}"} for i in range(10) for j in (0, 1)]
    _jsonl(beir / "corpus.jsonl", corpus)
    _jsonl(beir / "queries.jsonl", [{"_id": f"q{i}", "text": f"{q[i]} {rng.choice(fill)}"} for i in range(10)])
    (beir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                            + "".join(f"q{i}\td{i}-{j}\t1\n" for i in range(10) for j in (0, 1)))
    files["beir"] = beir
    texts = [r[k] for f in ("pairs13", "pairs15") for r in map(json.loads, files[f].read_text().splitlines())
             for k in ("anchor", "positive", "negative")]
    texts += [r[k] for f in ("scored", "sts") for r in map(json.loads, files[f].read_text().splitlines())
              for k in ("text", "text_pair")] + [c["text"] for c in corpus]
    return files, texts


def _distill_data(root: Path, rng: random.Random) -> tuple[dict, list[str]]:
    """A keyword classification task (a text's class is its keyword's), csv files."""
    words = _words(rng, 30)
    keys, fill = (words[:5], words[5:10]), words[10:]

    def rows(n: int) -> list[tuple[str, str]]:
        out = []
        for _ in range(n):
            c = rng.randrange(2)
            out.append((" ".join(rng.sample(fill, 4) + [rng.choice(keys[c])]), f"c{c}"))
        return out

    files, texts = {}, []
    for name, n, labelled in (("teacher", 24, True), ("train", 21, True), ("unlabelled", 8, False), ("dev", 10, True)):
        data = rows(n)
        texts += [t for t, _ in data]
        lines = ["text,label" if labelled else "text"] + [f"{t},{y}" if labelled else t for t, y in data]
        files[name] = root / f"{name}.csv"
        files[name].write_text("\n".join(lines) + "\n")
    return files, texts


EMBED = ["--set", "finetune.embed.learning_rate=1e-3", "--set", "finetune.embed.epochs=2",
         "--set", "finetune.embed.max_seq_length=16"]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """{case: (folder of one process, folder of two)}: the one-process runs in-process, then one
    launch of two workers running every case."""
    root = tmp_path_factory.mktemp("ddp_embed")
    rng = random.Random(11)
    files, texts = _embed_data(root, rng)
    dfiles, dtexts = _distill_data(root, rng)
    ckpt = tiny_checkpoint(root / "ckpt", texts + dtexts, hidden=32, layers=1)
    teacher_base = tiny_checkpoint(root / "teacher_base", texts + dtexts, hidden=32, layers=2)
    r = run_cli("finetune", "classify", "-c", teacher_base, "--train", dfiles["teacher"], "--dev", dfiles["dev"],
                "-o", root / "teacher", "--set", "finetune.learning_rate=2e-3", "--set", "finetune.batch_size=8",
                "--set", "finetune.epochs=1", "--set", "finetune.max_seq_length=16", *COMMON, cwd=root, env=ONE_THREAD)
    assert r.rc == 0, r.output
    cases = {
        "pairs": ["finetune", "embed", "-c", ckpt, "--train", files["pairs13"], "--dev", files["sts"],
                  "--negative-column", "negative", "--symmetric", "--dims", "32,16",
                  "--set", "finetune.embed.batch_size=4", *EMBED],
        "cached": ["finetune", "embed", "-c", ckpt, "--train", files["pairs15"], "--dev", files["beir"],
                   "--negative-column", "negative", "--mini-batch-size", "3",
                   "--set", "finetune.embed.batch_size=6", *EMBED],
        "cosent": ["finetune", "embed", "-c", ckpt, "--train", files["scored"],
                   "--score-column", "score", "--set", "finetune.embed.batch_size=4", *EMBED],
        "distill": ["distill", "-c", root / "teacher", "--teacher-task", "classify", "--train", dfiles["train"],
                    "--dev", dfiles["dev"], "--unlabelled", dfiles["unlabelled"], "--student-layers", "1",
                    "--set", "finetune.learning_rate=2e-3", "--set", "finetune.batch_size=8",
                    "--set", "finetune.epochs=2", "--set", "finetune.max_seq_length=16"],
    }
    out = {}
    for name, argv in cases.items():
        one, two = root / f"{name}_one", root / f"{name}_two"
        r = run_cli(*argv, "-o", one, *COMMON, cwd=root, env=ONE_THREAD)
        assert r.rc == 0, (name, r.output)
        out[name] = (one, two)
    spec = root / "jobs.json"
    spec.write_text(json.dumps([[*map(str, argv), "-o", str(out[n][1]), *COMMON] for n, argv in cases.items()]))
    port, procs = str(_free_port()), []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", COLUMNS="200")
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(spec)], cwd=root, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for rank, p in enumerate(procs):
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, (rank, stdout[-3000:], stderr[-5000:])
    return out


@pytest.mark.parametrize("case", ["pairs", "cached", "cosent", "distill"])
def test_two_processes_equal_one(jobs, case):
    """Per step: the loss (rel 1e-5: float32 sums in another order, the shards' encoder passes
    padded to their own longest); per epoch: every dev metric; the dev prediction files and the
    teacher's cached logits (distill) identical or within float tolerance; the weights after the
    last step within 1e-4 (Adam amplifies rounding of near-zero gradients); only rank 0's folder."""
    one, two = jobs[case]
    r1, r2 = (json.loads((d / "results.json").read_text()) for d in (one, two))
    assert r1["steps"] == r2["steps"] >= 6 and len(r1["history"]) == len(r2["history"]) == 2
    for h1, h2 in zip(r1["history"], r2["history"]):
        assert h2["train_loss"] == pytest.approx(h1["train_loss"], rel=1e-5), (case, h1["epoch"])
        _assert_close_json(h1["dev"], h2["dev"], f"{case} epoch {h1['epoch']} dev")
    assert r1["best_epoch"] == r2["best_epoch"]
    steps1, steps2 = ([json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (one, two))
    losses1 = [s["loss"] for s in steps1 if "loss" in s]
    assert len(losses1) == r1["steps"] and len({round(v, 6) for v in losses1}) > 1
    assert [s["loss"] for s in steps2 if "loss" in s] == pytest.approx(losses1, rel=1e-5), case
    files1 = _outputs(one)
    if case == "distill":     # the kept cache: gathered from both ranks' halves, bit for bit the one-process one
        assert r1["distill"]["teacher_logits"] == r2["distill"]["teacher_logits"] == "computed"
        assert any(k.startswith(".teacher-logits/") for k in files1) and any("dev" in k for k in files1), sorted(files1)
    assert_same_model_folder(one, two, case)


def test_distill_intermediate_losses_are_refused_under_torchrun(tmp_path):
    """The hidden-state and attention losses (means over each layer's own rows) are refused before
    the process group is joined, naming the keys to set; alone, or with soft + hard only, nothing."""
    import dataclasses

    from bertcli.config.finetune_sections import DistillConfig
    from bertcli.core.errors import UserError
    from bertcli.finetune.distill.teacher import Teacher

    Teacher(tmp_path, DistillConfig()).check_distributed(2)
    deep = Teacher(tmp_path, dataclasses.replace(DistillConfig(), hidden_weight=1.0))
    deep.check_distributed(1)
    with pytest.raises(UserError, match="hidden_weight and attention_weight do not run under torchrun") as e:
        deep.check_distributed(2)
    assert "set both to 0" in e.value.fix
