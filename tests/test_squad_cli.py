"""`bertcli finetune squad` end to end through the real CLI on synthetic SQuAD-format data whose
contexts span several windows (v1.1 and v2.0), the `datasets` layouts, and bad input (exit 2,
one message)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ONE_THREAD, assert_user_error, run_cli
from squad_synth import all_text, tiny_checkpoint, write_squad

from bertcli.core.errors import UserError
from bertcli.tasks.qa.data import load_squad

# Short windows so the ~60-120-word contexts need several (the shipped 384 / 128 / 64 cover
# a paragraph of SQuAD at once); a randomly initialized L2 H64 model, 3 epochs (~10 s each).
SHORT = []
for block in ("squad", "squad_v2"):
    SHORT += ["--set", f"finetune.{block}.max_seq_length=64", "--set", f"finetune.{block}.doc_stride=32",
              "--set", f"finetune.{block}.max_query_length=16", "--set", f"finetune.{block}.batch_size=32",
              "--set", f"finetune.{block}.learning_rate=1e-3", "--set", f"finetune.{block}.epochs=3"]
SHORT += ["--set", "finetune.dropout=0"]


@pytest.fixture(scope="module")
def squad(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad_cli")
    data = {v: write_squad(root / f"v{v}", version=v, n_train=150, n_dev=30, seed=v, code_words=1) for v in (1, 2)}
    texts = [t for v in (1, 2) for p in sorted(data[v].glob("*.json")) for t in all_text(json.loads(p.read_text()))]
    ckpts = {"bert": tiny_checkpoint(root / "bert", texts),
             "roberta": tiny_checkpoint(root / "roberta", texts, family="roberta", kind="bpe", vocab_size=1000),
             "modernbert": tiny_checkpoint(root / "modernbert", texts, family="modernbert", kind="bpe",
                                           vocab_size=1000, local_attention=16)}
    return root, data, ckpts


def _gold(folder: Path, name: str) -> dict:
    doc = json.loads(next(folder.glob(f"{name}-*.json")).read_text())
    return {q["id"]: [a["text"] for a in q["answers"]] for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]}


@pytest.mark.slow
@pytest.mark.parametrize("version,family", [(1, "bert"), (2, "bert"), (2, "roberta"), (1, "modernbert")])
def test_learns_squad_through_the_cli(squad, tmp_path, version, family):
    """WordPiece BERT on v1.1 and v2.0; byte-level BPE RoBERTa (one token type, <s> q </s></s> c </s>)
    on v2.0; ModernBERT (rotary positions, 16-token local windows, no token types) on v1.1."""
    root, data, ckpts = squad
    ckpt = ckpts[family]
    out = tmp_path / "out"
    r = run_cli("finetune", "squad", "-c", ckpt, "-d", data[version], "--squad-version", str(version), "-o", out,
                *SHORT, cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    res = json.loads((out / "results.json").read_text())
    assert res["data"]["train"] == 450 and res["windows"]["train"] > 3 * 450   # several windows per context
    dev = res["dev"]["dev"]
    # chance: a random span scores ~0 F1 (v1.1); always "no answer" scores ~33 (v2.0's NoAns share)
    assert dev["f1"] >= 0.90 and dev["exact"] >= 0.85, dev
    gold = _gold(data[version], "dev")
    preds = json.loads((out / "predictions.json").read_text())
    assert set(preds) == set(gold) and all(isinstance(v, str) for v in preds.values())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    assert all(1 <= len(v) <= 21 for v in nbest.values())
    official = json.loads((out / "eval.json").read_text())
    if version == 1:
        assert official["f1"] == pytest.approx(100 * dev["f1"])
        assert not (out / "null_odds.json").exists()
    else:
        assert dev["HasAns_f1"] >= 0.8 and dev["NoAns_f1"] >= 0.8, dev
        assert {"best_f1", "best_f1_thresh", "best_exact", "best_exact_thresh"} <= set(official)
        odds = json.loads((out / "null_odds.json").read_text())
        assert set(odds) == set(gold)
        # unanswerable questions get higher null odds than answerable ones, on the whole
        none = [odds[q] for q in gold if not gold[q]]
        some = [odds[q] for q in gold if gold[q]]
        assert sum(none) / len(none) > sum(some) / len(some)
        assert all(preds[q] == "" for q in gold if odds[q] > 0.0)     # null_threshold 0

    # the best model is a transformers question-answering checkpoint with the same logits
    import torch
    import transformers as tf

    from bertcli.model import load_checkpoint

    hf = tf.AutoModelForQuestionAnswering.from_pretrained(out).eval()
    assert type(hf).__name__ == {"bert": "BertForQuestionAnswering", "roberta": "RobertaForQuestionAnswering",
                                 "modernbert": "ModernBertForQuestionAnswering"}[family]
    ours, report = load_checkpoint(out, head="qa")
    assert report.fresh == []
    ids = torch.randint(5, hf.config.vocab_size, (2, 24))
    mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)
    with torch.no_grad():
        s, e = ours(ids, mask, types)
        ref = hf(input_ids=ids, attention_mask=mask, **({} if family == "modernbert" else {"token_type_ids": types}))
    torch.testing.assert_close(s, ref.start_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(e, ref.end_logits, atol=1e-4, rtol=1e-4)


def test_datasets_layouts_read_as_the_json(squad, tmp_path):
    import datasets

    _, data, _ = squad
    for version in (1, 2):
        ref = load_squad(data[version], version=version)
        rows = {}
        for name, split in (("train", ref.train), ("validation", ref.dev)):
            rows[name] = datasets.Dataset.from_dict({
                "id": split.ids, "title": ["t"] * len(split), "context": [split.context(i) for i in range(len(split))],
                "question": split.questions,
                "answers": [{"text": a, "answer_start": s} for a, s in zip(split.answers, split.starts)]})
        dd = datasets.DatasetDict(rows)
        dd.save_to_disk(str(tmp_path / f"disk{version}"))
        (tmp_path / f"pq{version}").mkdir()
        for name, ds in dd.items():
            ds.to_parquet(str(tmp_path / f"pq{version}" / f"{name}-00000-of-00001.parquet"))
        for folder, layout in ((tmp_path / f"disk{version}", "save_to_disk"), (tmp_path / f"pq{version}", "parquet")):
            got = load_squad(folder, version=version)
            assert got.layout == layout
            for a, b in ((got.train, ref.train), (got.dev, ref.dev)):
                assert a.ids == b.ids and a.answers == b.answers and a.starts == b.starts
                assert a.questions == b.questions and a.contexts == b.contexts
        # --hub runs datasets.load_dataset itself: offline it reads a local folder of the hub's files
        got = load_squad(hub=str(tmp_path / f"pq{version}"), version=version)
        assert got.layout == "hub" and got.dev.ids == ref.dev.ids and got.train.answers == ref.train.answers
        # the datasets layout of v2.0 data without --squad-version 2 (and the reverse) is refused
        with pytest.raises(UserError, match="--squad-version 2" if version == 2 else "v1.1"):
            load_squad(tmp_path / f"disk{version}", version=3 - version)


def _write(folder: Path, doc: dict, name: str = "train-v1.1.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))
    return folder


def test_bad_input_is_one_clear_message(squad, tmp_path):
    root, data, ckpts = squad
    ckpt = ckpts["bert"]
    run = lambda *a: run_cli("finetune", "squad", "-c", ckpt, *a, cwd=tmp_path)  # noqa: E731
    assert_user_error(run("-d", data[2]), "SQuAD v2.0", "--squad-version 2")
    with pytest.raises(UserError, match="drop --squad-version 2|v1.1"):
        load_squad(data[1], version=2)

    good = json.loads((data[1] / "train-v1.1.json").read_text())
    bad = json.loads(json.dumps(good))
    qa = bad["data"][0]["paragraphs"][0]["qas"][0]
    qa["answers"][0]["answer_start"] += 3
    d = _write(tmp_path / "shift", bad)
    (d / "dev-v1.1.json").write_text(json.dumps(good))
    assert_user_error(run("-d", d), qa["id"], "answer_start", "train-v1.1.json")
    # repair: moved back to the nearest occurrence of its text; skip: the question left out
    fixed = load_squad(d, bad_answers="repair")
    assert fixed.train.repaired == 1 and fixed.train.starts[0] == [qa["answers"][0]["answer_start"] - 3]
    skipped = load_squad(d, bad_answers="skip")
    assert skipped.train.dropped == 1 and qa["id"] not in skipped.train.ids
    assert len(skipped.train) == len(fixed.train) - 1

    bad = json.loads(json.dumps(good))
    del bad["data"][1]["paragraphs"][0]["context"]
    d = _write(tmp_path / "shape", bad)
    (d / "dev-v1.1.json").write_text(json.dumps(good))
    with pytest.raises(UserError, match=r"data\[1\]\.paragraphs\[0\] has no 'context'.*not SQuAD-shaped"):
        load_squad(d)
    bad["data"] = {"x": 1}
    _write(d, bad)
    with pytest.raises(UserError, match="data is a dict, expected a list"):
        load_squad(d)
    with pytest.raises(UserError, match="does not exist"):
        load_squad(tmp_path / "nothing")
    assert_user_error(run("-d", data[1], "--set", "finetune.squad.max_seq_length=8",
                          "--set", "finetune.squad.max_query_length=64"), "leave no room", "question")
    # --hub with real datasets.load_dataset code: offline (as in every test) it fails at once
    assert_user_error(run("--hub", "rajpurkar/squad"), "rajpurkar/squad", "--hub rajpurkar/squad", "offline")
