"""Fine-tuning training-step speed of bertcli against transformers, same weights, same batches,
in one process: token classification (NER) against BertForTokenClassification, sequence
classification against BertForSequenceClassification.

A training step is forward + loss + backward + AdamW (the same optimizer construction for both
models). bertcli runs the way `bertcli finetune ner|classify` runs it (engine collate and the
task's forward/loss: unpadded dense layers, the tagger's last layer only at the labelled first
sub-tokens, the classifier's only at [CLS]); transformers as its examples run it (batches
padded to the longest row, -100 labels at padding and at non-first sub-tokens).

Real lengths: row lengths are drawn from a log-normal fitted to the data sets (CoNLL-2003
sentences: median 20 sub-tokens, long tail; GLUE SST-2/MNLI-like pairs: median 40), clipped to
max_seq_length; 80% of the non-special tokens of a tagging row start a word (labelled). Speed
is real (non-padding) tokens per second; repeats are interleaved and the median is reported.

    python scripts/bench_finetune.py                           # a small BERT, CPU, fp32
    python scripts/bench_finetune.py --size base --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

SIZES = {"tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512),
         "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
         "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)}
MEDIAN = {"token": 20, "sequence": 40}


def make_features(kind: str, n: int, max_len: int, vocab: int, num_labels: int, rng: np.random.Generator):
    """bertcli Features of `n` rows with realistic lengths (and their label arrays)."""
    from bertcli.finetune.task import pack

    lengths = np.clip(np.round(rng.lognormal(np.log(MEDIAN[kind]), 0.6, n)), 4, max_len).astype(int)
    ids = [np.r_[2, rng.integers(5, vocab, m - 2), 3] for m in lengths]
    if kind == "token":
        labels = []
        for m in lengths:
            lab = np.where(rng.random(m) < 0.8, rng.integers(0, num_labels, m), -100)
            lab[0] = lab[-1] = -100
            lab[1] = max(lab[1], 0)                       # every row labels its first word
            labels.append(lab)
        feats = pack(ids, [np.zeros(m, np.int8) for m in lengths], np.arange(n), labels=labels)
    else:
        feats = pack(ids, [np.zeros(m, np.int8) for m in lengths], np.arange(n))
        feats.per_feature["labels"] = rng.integers(0, num_labels, n)
    return feats


class _Task:
    """The pieces of NerTask / SequenceTask a training step uses, without their readers."""

    def __init__(self, kind):
        self.kind = kind

    def step(self, model, batch):
        if self.kind == "token":
            from bertcli.finetune.tagging.task import NerTask

            out = NerTask.forward(self, model, batch, train=True)
            return NerTask.loss(self, out, batch)
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        return torch.nn.functional.cross_entropy(logits.float(), batch["labels"])


def theirs_step(model, batch):
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                token_type_ids=batch["token_type_ids"], labels=batch["labels"])
    return out.loss


def timed(step, model, opt, batches, device, dtype) -> float:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for b in batches:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = step(model, b)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync()
    return time.perf_counter() - start


def bench(kind: str, args, device) -> dict:
    import transformers as tf

    from bertcli.finetune.engine import collate
    from bertcli.model import load_checkpoint
    from bertcli.train.optim import build_optimizer

    labels = 9 if kind == "token" else 3                     # CoNLL-2003 IOB2 tags; MNLI classes
    cfg = tf.BertConfig(vocab_size=30522, max_position_embeddings=512, num_labels=labels,
                        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, **SIZES[args.size])
    cls = tf.BertForTokenClassification if kind == "token" else tf.BertForSequenceClassification
    torch.manual_seed(0)
    theirs = cls(cfg)
    with tempfile.TemporaryDirectory() as d:
        theirs.save_pretrained(d)
        ours, _ = load_checkpoint(Path(d), head="token" if kind == "token" else "classification")
    theirs.to(device).train()
    ours.to(device).train()
    rng = np.random.default_rng(0)
    feats = make_features(kind, args.batch * args.steps, args.max_len, cfg.vocab_size, labels, rng)
    order = np.arange(len(feats))
    batches = []
    for i in range(args.steps):
        b = collate(feats, order[i * args.batch:(i + 1) * args.batch], pad_id=0, multiple=1)
        batches.append({k: v.to(device) for k, v in b.items()})
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["attention_mask"].numel() for b in batches)
    opts = {m: build_optimizer(m, "adamw", 5e-5, (0.9, 0.999), 1e-6, 0.01, device) for m in (ours, theirs)}
    task = _Task(kind)
    ours_fn, theirs_fn = task.step, theirs_step
    timed(ours_fn, ours, opts[ours], batches[:1], device, args.dtype)      # warm-up
    timed(theirs_fn, theirs, opts[theirs], batches[:1], device, args.dtype)
    t_ours, t_theirs = [], []
    for _ in range(args.repeats):
        t_ours.append(timed(ours_fn, ours, opts[ours], batches, device, args.dtype))
        t_theirs.append(timed(theirs_fn, theirs, opts[theirs], batches, device, args.dtype))
    o, t = statistics.median(t_ours), statistics.median(t_theirs)
    return {"task": kind, "reference": cls.__name__, "real_tokens": real, "padded_positions": padded,
            "real_fraction": round(real / padded, 3),
            "bertcli_tokens_per_s": round(real / o, 1), "transformers_tokens_per_s": round(real / t, 1),
            "speedup": round(t / o, 2), "goal": 1.5}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=list(SIZES), default="small")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=4, help="batches per timed pass")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--tasks", default="token,sequence")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    out = {"size": args.size, **SIZES[args.size], "batch": args.batch, "max_seq_length": args.max_len,
           "device": str(device), "dtype": args.dtype, "threads": torch.get_num_threads(),
           "results": [bench(k, args, device) for k in args.tasks.split(",")]}
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
