"""`bertcli distill --task ner` and `--task squad` end to end through the real CLI: a teacher
fine-tuned from the shared pretrained tiny model (2 layers), a 1-layer student of its top layer
distilled on the same data (soft targets: NER's per-word label distributions, SQuAD's start and
end distributions). The student keeps most of the teacher's score (seen: NER 95.6 vs 95.8
entity F1 on 120 sentences; SQuAD F1 above the teacher's on 30 questions) and is an ordinary
model directory that transformers loads with the same outputs. The margin over hard labels
alone is tested on classification (test_distill_cli.py), where --unlabelled data give the
teacher's labels room to matter.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from conftest import run_cli
from finetune_fixtures import tagged_sentence, write_conll
from squad_synth import write_squad

FAST = ("--set", "finetune.learning_rate=1e-3")


def test_ner_student_keeps_the_teachers_f1_and_loads_in_transformers(pretrained_tiny, tmp_path):
    import transformers

    rng = random.Random(0)
    sents = lambda n: [tagged_sentence(rng, adjacent=0.0) for _ in range(n)]  # noqa: E731
    data = tmp_path / "ner"
    write_conll(data / "train.txt", sents(400))
    write_conll(data / "valid.txt", sents(120))
    t = run_cli("finetune", "ner", "-c", str(pretrained_tiny), "--data-dir", str(data), "--out", str(tmp_path / "t"),
                *FAST, "--set", "finetune.epochs=4", cwd=tmp_path)
    assert t.rc == 0, t.output
    s = run_cli("distill", "-c", str(tmp_path / "t"), "--task", "ner", "--data-dir", str(data), "--layers", "1",
                "--out", str(tmp_path / "s"), *FAST, "--set", "finetune.epochs=3", cwd=tmp_path)
    assert s.rc == 0, s.output
    teacher = json.loads((tmp_path / "t" / "results.json").read_text())
    res = json.loads((tmp_path / "s" / "results.json").read_text())
    d = res["distill"]
    assert teacher["dev"]["dev"]["f1"] >= 0.85
    assert d["teacher"]["dev"]["dev"]["f1"] == pytest.approx(teacher["dev"]["dev"]["f1"], abs=1e-9)
    assert res["dev"]["dev"]["f1"] >= teacher["dev"]["dev"]["f1"] - 0.05, (res["dev"], teacher["dev"])
    assert d["student"]["layers"] == 1 and d["teacher_logits"] == "computed"
    assert (tmp_path / "s" / "dev_predictions.txt").read_text().count("\n\n") >= 119   # one block per sentence
    # transformers reads the student: the same per-token logits as bertcli's model
    from bertcli.model.checkpoint import load_checkpoint

    hf = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path / "s").eval()
    ours, _ = load_checkpoint(tmp_path / "s", head="token")
    assert hf.config.num_hidden_layers == 1 and hf.config.id2label == dict(enumerate(res["labels"]))
    ids = torch.tensor([[2, 100, 200, 300, 400, 3]])
    with torch.no_grad():
        a = hf(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        b = ours(ids, torch.ones_like(ids), torch.zeros_like(ids))
    assert torch.allclose(a, b, atol=1e-4)


def test_squad_student_learns_from_start_and_end_distributions(pretrained_tiny, tmp_path):
    import transformers

    data = write_squad(tmp_path / "squad", version=1, n_train=60, n_dev=20, seed=1, code_words=1)
    size = ("--set", "finetune.squad.max_seq_length=128", "--set", "finetune.squad.doc_stride=64",
            "--set", "finetune.batch_size=16")
    t = run_cli("finetune", "squad", "-c", str(pretrained_tiny), "--data-dir", str(data), "--out", str(tmp_path / "t"),
                *FAST, *size, "--set", "finetune.epochs=3", cwd=tmp_path)
    assert t.rc == 0, t.output
    s = run_cli("distill", "-c", str(tmp_path / "t"), "--task", "squad", "--data-dir", str(data), "--layers", "1",
                "--out", str(tmp_path / "s"), *FAST, *size, "--set", "finetune.epochs=2", cwd=tmp_path)
    assert s.rc == 0, s.output
    teacher = json.loads((tmp_path / "t" / "results.json").read_text())
    res = json.loads((tmp_path / "s" / "results.json").read_text())
    assert teacher["dev"]["dev"]["f1"] >= 0.5, teacher["dev"]
    # a 1-layer student keeps most of it (chance, a random span, is near 0 F1)
    assert res["dev"]["dev"]["f1"] >= 0.8 * teacher["dev"]["dev"]["f1"], (res["dev"], teacher["dev"])
    assert res["distill"]["score_kept_percent"] == pytest.approx(100 * res["score"] / teacher["score"], abs=0.01)
    preds = json.loads((tmp_path / "s" / "predictions.json").read_text())
    gold = json.loads((data / "dev-v1.1.json").read_text())
    ids = {q["id"] for a in gold["data"] for p in a["paragraphs"] for q in p["qas"]}
    assert set(preds) == ids
    hf = transformers.AutoModelForQuestionAnswering.from_pretrained(tmp_path / "s").eval()
    assert hf.config.num_hidden_layers == 1
    x = torch.tensor([[2, 50, 60, 3, 70, 80, 90, 3]])
    from bertcli.model.checkpoint import load_checkpoint

    ours, _ = load_checkpoint(tmp_path / "s", head="qa")
    with torch.no_grad():
        out = hf(input_ids=x, attention_mask=torch.ones_like(x))
        start, end = ours(x, torch.ones_like(x), torch.zeros_like(x))
    assert np.allclose(out.start_logits.numpy(), start.numpy(), atol=1e-4)
    assert np.allclose(out.end_logits.numpy(), end.numpy(), atol=1e-4)
