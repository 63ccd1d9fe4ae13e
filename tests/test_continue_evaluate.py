"""`bertcli evaluate`: its MLM loss, NSP accuracy and pseudo-perplexity for a transformers-saved
model equal transformers' own computation over the same masked rows; the masks depend on the
seed and the tokenizer only, so two checkpoints sharing a tokenizer are scored on the same
positions."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from conftest import ONE_THREAD, assert_user_error, run_cli
from continue_fixtures import domain_documents, general_documents, hf_checkpoint, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)


def evaluate(tmp_path: Path, checkpoint: Path, *more: str, threads: int | None = None) -> dict:
    """`bertcli evaluate --json`; `threads` given: as --threads (else auto, which the suite's
    OMP_NUM_THREADS=1 settles)."""
    flag = ["--threads", str(threads)] if threads else []
    r = run_cli("evaluate", "-c", checkpoint, "--corpus", tmp_path / "domain.txt", "--cache", tmp_path / "cache",
                "--pppl-rows", "3", "--json", *more, *flag, cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert (f"threads: {threads} (--threads: {threads})" if threads else "threads: 1 (OMP_NUM_THREADS=1)") in r.stderr
    return json.loads(r.stdout)


def masked_rows(res: dict):
    from bertcli.config.recipe import load_recipe
    from bertcli.data.collator import PretrainCollator
    from bertcli.data.dataset import PretrainDataset, load_data
    from bertcli.tokenization.load import load_tokenizer

    data = Path(res["data"])
    recipe = load_recipe(str(data / "recipe.yaml"))
    rows = PretrainDataset(load_data(data)["train"])
    tok = load_tokenizer(res["tokenizer"])
    return rows, tok, PretrainCollator(tok, recipe.data, recipe.seed)([rows[(0, i)] for i in range(len(rows))])


def test_evaluate_equals_transformers_on_the_same_masked_rows(tmp_path):
    import transformers as tf

    general = [s for d in general_documents(100) for s in d]
    write_corpus(tmp_path / "domain.txt", domain_documents(40))
    a = hf_checkpoint(tmp_path / "a", "bert", general, "pretraining", seed=0)
    b = hf_checkpoint(tmp_path / "b", "bert", general, "pretraining", seed=1)    # other weights...
    for name in ("tokenizer.json", "tokenizer_config.json"):                       # ...and a's tokenizer
        shutil.copyfile(a / name, b / name)   # (WordPiece training in `tokenizers` orders ties differently)
    ra, rb = evaluate(tmp_path, a)["corpora"][0], evaluate(tmp_path, b, threads=2)["corpora"][0]
    rows, tok, batch = masked_rows(ra)
    hf = tf.BertForPreTraining.from_pretrained(a).eval()
    with torch.no_grad():
        out = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 token_type_ids=batch["token_type_ids"])
    logits = out.prediction_logits.reshape(-1, out.prediction_logits.shape[-1])[batch["mlm_positions"]]
    assert ra["masked"] == batch["mlm_labels"].numel() > 100
    assert ra["mlm_loss"] == pytest.approx(torch.nn.functional.cross_entropy(logits.double(), batch["mlm_labels"]).item(),
                                           rel=1e-5)
    assert ra["mlm_acc"] == (logits.argmax(-1) == batch["mlm_labels"]).double().mean().item()
    assert ra["pair_acc"] == (out.seq_relationship_logits.argmax(-1) == batch["pair_labels"]).double().mean().item()
    # pseudo-perplexity: each real token of the first 3 rows masked alone, scored by transformers
    total, n = 0.0, 0
    for i in range(3):
        row = rows[(0, i)]
        ids = torch.tensor(row["input_ids"], dtype=torch.long)
        ids[torch.tensor(row["masked_positions"], dtype=torch.long)] = torch.tensor(row["masked_ids"], dtype=torch.long)
        for j in [j for j, t in enumerate(ids.tolist()) if t not in tok.special_ids]:
            x = ids.clone()
            x[j] = tok.mask_id
            with torch.no_grad():
                types = torch.tensor(row["token_type_ids"], dtype=torch.long)[None]
                lp = hf(input_ids=x[None], token_type_ids=types).prediction_logits
            total += torch.log_softmax(lp[0, j].double(), -1)[ids[j]].item()
            n += 1
    assert (ra["pppl_tokens"], ra["pseudo_perplexity"]) == (n, pytest.approx(math.exp(-total / n), rel=1e-5))
    # the same masks for the other checkpoint of this tokenizer: the same cached rows, other figures
    assert rb["data"] == ra["data"] and rb["masked"] == ra["masked"]
    assert rb["mlm_loss"] != ra["mlm_loss"]
    # another seed masks other positions
    rc = evaluate(tmp_path, a, "--seed", "7")["corpora"][0]
    assert rc["data"] != ra["data"]
    assert not torch.equal(masked_rows(rc)[2]["mlm_positions"], batch["mlm_positions"])


def test_evaluate_bad_input_is_one_message(tmp_path):
    r = run_cli("evaluate", "-c", tmp_path, "--corpus", tmp_path / "none.txt", cwd=tmp_path)
    assert_user_error(r, "no config.json")
