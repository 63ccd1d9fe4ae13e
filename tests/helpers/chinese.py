"""Chinese sentiment files in ChnSentiCorp's layout and a `bertcli finetune classify` run on them."""

from __future__ import annotations

import json
import random

from conftest import ONE_THREAD, run_cli

FILL = list("我们今天昨天说了在去看和的是有这个人很多一些也都会到")
GOOD, BAD = list("好棒赞喜爱美"), list("差坏烂糟恨丑")


def sentiment_file(path, rng: random.Random, n: int):
    """ChnSentiCorp layout: a `label<TAB>text_a` header, then `0|1<TAB>text` rows; the label
    follows the sentiment character in the text."""
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        text = "".join(rng.choice(FILL) for _ in range(rng.randint(3, 8))) + rng.choice(GOOD if label else BAD) + "。"
        rows.append(f"{label}\t{text}")
    path.write_text("label\ttext_a\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def finetune_sentiment(ckpt, tmp_path, n_train=400, n_dev=100) -> dict:
    """`bertcli finetune classify` on sentiment files; the dev metrics."""
    rng = random.Random(1)
    out = tmp_path / "classify"
    r = run_cli("finetune", "classify", "-c", ckpt, "--train", sentiment_file(tmp_path / "train.tsv", rng, n_train),
                "--dev", sentiment_file(tmp_path / "dev.tsv", rng, n_dev), "--text-column", "text_a", "-o", out,
                "--set", "finetune.classify.learning_rate=2e-3", "--set", "finetune.classify.epochs=4",
                "--set", "finetune.classify.batch_size=16", cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return res["dev"] if "accuracy" in res["dev"] else next(iter(res["dev"].values()))
