"""bertcli's fine-tuning loop against a plain transformers loop on a tiny fixed problem, for the
sequence-classification, token-classification and QA heads: the fine-tuning twin of
test_model_equivalence.py.

bertcli side: the real engine (`engine.load_model`, `engine.fit`) with the real tasks' featurize,
forward and loss. Reference: `reference_fit` of scripts/bench_finetune_quality.py (the loop
the benchmark measures as `ref_bertcli`) on transformers' AutoModelFor* loaded from the same
starting weights, with transformers' own loss, torch's AdamW over Trainer's decay groups, a
LambdaLR schedule, clip_grad_norm_, its own padded batches. Same weights, same example order,
dropout 0: every step's loss and the final weights must agree to float tolerance.

Each case then changes one thing in the reference (eps 1e-8, decay on biases and norms too,
transformers' one-step-later schedule, per-sequence loss averaging, QA padding inside the
softmax) and checks that the comparison would catch it, so the agreement is not vacuous."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import transformers as tf
from squad_synth import tiny_checkpoint

from bertcli.finetune.engine import fit, load_model
from bertcli.model import save_checkpoint
from bertcli.tokenization.load import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_finetune_quality", ROOT / "scripts" / "bench_finetune_quality.py")
bench = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))   # dataclasses need it there
_spec.loader.exec_module(bench)

LOSS_TOL = dict(atol=2e-5, rtol=2e-5)
WEIGHT_TOL = 2e-5           # max |difference| of any parameter after the run
SEED = 3
# Per head: examples, and the mutations of the reference the comparison must catch.
CASES = {
    "classify": dict(train=24, dev=8, mutations=("eps", "decay_norms", "schedule")),
    "ner": dict(train=24, dev=8, mutations=("eps", "decay_norms", "schedule", "sequences")),
    "squad": dict(train=8, dev=4, mutations=("eps", "decay_norms", "schedule", "qa_padding")),
}
MUTATIONS = {"eps": dict(eps=1e-8), "decay_norms": dict(decay_norms=True), "schedule": dict(schedule="hf"),
             "sequences": dict(token_mean="sequences"), "qa_padding": dict(qa_mask_padding=False)}
HF_CLASS = {"classification": tf.AutoModelForSequenceClassification, "token": tf.AutoModelForTokenClassification,
            "qa": tf.AutoModelForQuestionAnswering}


def _texts(kind: str, folder: Path) -> list[str]:
    if kind == "classify":
        return (folder / "train.csv").read_text(encoding="utf-8").splitlines()
    if kind == "ner":
        return [" ".join(line.split()[:1]) for line in (folder / "train.txt").read_text(encoding="utf-8").splitlines()]
    import json

    from squad_synth import all_text
    return all_text(json.loads((folder / "train-v1.1.json").read_text(encoding="utf-8")))


_PROBLEMS: dict = {}


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    """kind -> its problem, built once per module (the tests of one kind share bertcli's run)."""
    def get(kind: str):
        if kind not in _PROBLEMS:
            _PROBLEMS[kind] = _problem(kind, tmp_path_factory.mktemp(kind))
        return _PROBLEMS[kind]
    yield get
    _PROBLEMS.clear()


def _problem(kind: str, tmp: Path):
    """(kind, task, train features, cfg, tokenizer, starting HF directory, bertcli's losses and
    final weights as transformers loads them)."""
    case = CASES[kind]
    size = dict(bench.SIZES[kind], train=case["train"], dev=case["dev"], lr=2e-3, batch=4, epochs=2,
                length=48 if kind != "squad" else 64)
    folder = bench.write_task_data(kind, tmp / "data", size["train"], size["dev"])
    ckpt = tiny_checkpoint(tmp / "ckpt", _texts(kind, folder), vocab_size=300)
    cfg = dataclasses.replace(bench.finetune_cfg(kind, size), dropout=0.0, warmup_ratio=0.25, weight_decay=0.1)
    if kind == "squad":
        cfg = dataclasses.replace(cfg, squad=dataclasses.replace(cfg.squad, doc_stride=24, max_query_length=16))
    task = bench.build_task(kind, folder, cfg)
    tok = load_tokenizer(ckpt)
    train = task.featurize(task.data.train, tok, False)
    model, _ = load_model(task, ckpt, cfg, SEED)
    save_checkpoint(model, tmp / "start", tokenizer_dir=ckpt)

    losses = []
    real_loss = task.loss
    task.loss = lambda outputs, batch: _record(losses, real_loss(outputs, batch))
    task.score = lambda dev: float(len(losses))     # the last epoch is the best: fit keeps it
    task.format = lambda dev: ""
    fit(model, task, train, {}, cfg, SEED, torch.device("cpu"), tok.pad_id)
    save_checkpoint(model, tmp / "end", tokenizer_dir=ckpt)
    ours = dict(HF_CLASS[task.head].from_pretrained(tmp / "end").named_parameters())
    return kind, task, train, cfg, tok, tmp / "start", losses, ours


def _record(losses: list, loss: torch.Tensor) -> torch.Tensor:
    losses.append(float(loss.detach()))
    return loss


def _reference(problem, **changes):
    _, task, train, cfg, tok, start, _, _ = problem
    hf = HF_CLASS[task.head].from_pretrained(start)
    assert hf.config.hidden_dropout_prob == 0.0 and hf.config.attention_probs_dropout_prob == 0.0
    same = dict(eps=cfg.eps, weight_decay=task.hyper.weight_decay, grad_clip=cfg.grad_clip, betas=(cfg.beta1, cfg.beta2))
    settings = dataclasses.replace(bench.BERTCLI_DEFAULTS, **{**same, **changes})
    losses = []
    bench.reference_fit(hf, task.head, train, task.hyper, settings, SEED, tok.pad_id, on_loss=losses.append)
    return losses, dict(hf.named_parameters())


# The span head's bias has a zero gradient in exact arithmetic (each softmax over positions sums
# to one, so d loss / d bias = sum(p) - 1 = 0): its float32 rounding noise (~1e-8), divided by
# Adam's sqrt(v) of the same size, moves it by up to lr per step in a direction that depends on
# the order of summation. No default can show in it; it is left out of the weight comparison.
NOISE_ONLY = {"qa_outputs.bias"}


def _max_weight_gap(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).detach().abs().max()) for k in a if k not in NOISE_ONLY)


@pytest.mark.parametrize("kind", list(CASES))
def test_first_steps_equal_transformers_loop(problems, kind):
    problem = problems(kind)
    _, task, train, *_ = problem
    ours_losses, ours = problem[6], problem[7]
    theirs_losses, theirs = _reference(problem)
    per_epoch = -(-len(train) // task.hyper.batch_size)
    assert len(ours_losses) == len(theirs_losses) == 2 * per_epoch >= 4
    torch.testing.assert_close(torch.tensor(ours_losses), torch.tensor(theirs_losses), **LOSS_TOL)
    assert ours_losses[-1] < ours_losses[0] - 0.05, "the tiny problem should be learned a little"
    assert _max_weight_gap(ours, theirs) < WEIGHT_TOL


@pytest.mark.parametrize("kind,mutation", [(k, m) for k, c in CASES.items() for m in c["mutations"]])
def test_a_different_default_is_caught(problems, kind, mutation):
    """The comparison above fails when the reference differs in one default."""
    problem = problems(kind)
    ours_losses, ours = problem[6], problem[7]
    theirs_losses, theirs = _reference(problem, **MUTATIONS[mutation])
    loss_gap = max(abs(a - b) for a, b in zip(ours_losses, theirs_losses))
    assert loss_gap > 10 * LOSS_TOL["atol"] or _max_weight_gap(ours, theirs) > 10 * WEIGHT_TOL
