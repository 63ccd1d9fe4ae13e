"""SQuAD speed, bertcli against transformers, in one process on the same data:

1. training step (forward, span loss, backward, AdamW step) of bertcli's QA model against
   transformers' BertForQuestionAnswering with the same config and weights, on the same padded
   batches of real windows; real (non-padding) tokens per second; goal >= 1.5x;
2. feature building (windows, offsets, start/end labels) and post-processing (n-best over all
   windows of a question, answer text from offsets) against the logic of transformers' examples
   (`prepare_train_features`, `prepare_validation_features`, `postprocess_qa_predictions` of
   run_qa.py / utils_qa.py), re-implemented below as the reference: the fast tokenizer called
   on (question, context) pairs with `truncation="only_second"`, `return_overflowing_tokens`,
   `return_offsets_mapping`, then Python loops; goal >= 1x.

Data: SQuAD-shaped questions over paragraphs of the built-in corpus (the Python documentation:
real English prose), 5 questions per paragraph like SQuAD, each answer a span of 1-4 words of
its paragraph and each question 6-12 of its words. The tokenizer is a WordPiece trained on those
paragraphs (or `--tokenizer DIR`). Medians of interleaved repeats.

    python scripts/bench_squad.py                              # small model, CPU
    python scripts/bench_squad.py --size base --batch 32 --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

SIZES = {"small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
         "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)}


# ------------------------------------------------------------------------------------ data
def make_split(n_contexts: int, seed: int):
    from bertcli.corpus.builtin import iter_documents
    from bertcli.tasks.qa.data import _Builder

    rng = random.Random(seed)
    paragraphs = [p for _, text in iter_documents() for p in text.split("\n") if 60 <= len(p.split()) <= 250]
    rng.shuffle(paragraphs)
    b = _Builder("dev", "builtin corpus")
    for c, context in enumerate(paragraphs[:n_contexts]):
        ctx = b.context(context)
        words = [(m.start(), m.end()) for m in __import__("re").finditer(r"\S+", context)]
        for k in range(5):
            i = rng.randrange(len(words) - 4)
            j = i + rng.randint(0, 3)
            start, end = words[i][0], words[j][1]
            q = " ".join(context[s:e] for s, e in rng.sample(words, rng.randint(6, 12))) + "?"
            b.add(f"{c}-{k}", q, ctx, [context[start:end]], [start], "bench")
    return b.split


def train_tokenizer(texts: list[str]):
    from bertcli.config.sections import TokenizerConfig
    from bertcli.tokenization.train import add_post_processor, new_tokenizer, new_trainer

    cfg = TokenizerConfig(kind="wordpiece", vocab_size=8192, special_tokens="bert", lowercase=True, strip_accents=True)
    tok = new_tokenizer(cfg)
    tok.train_from_iterator(texts, trainer=new_trainer(cfg, show_progress=False))
    add_post_processor(tok, "bert")
    return tok


# ------------------------------------------------------------------------ the reference
def ref_train_features(hf_tok, questions, contexts, answers, starts, max_len, stride, chunk=1000):
    """transformers' run_qa.py prepare_train_features, re-implemented (batches of 1000 as
    datasets.map(batched=True) gives them)."""
    out = {"input_ids": [], "start_positions": [], "end_positions": []}
    cls = hf_tok.cls_token_id
    for a in range(0, len(questions), chunk):
        enc = hf_tok([q.lstrip() for q in questions[a:a + chunk]], contexts[a:a + chunk], truncation="only_second",
                     max_length=max_len, stride=stride, return_overflowing_tokens=True,
                     return_offsets_mapping=True, padding="max_length")
        for i, offsets in enumerate(enc["offset_mapping"]):
            ids = enc["input_ids"][i]
            cls_index = ids.index(cls)
            seq = enc.sequence_ids(i)
            ex = a + enc["overflow_to_sample_mapping"][i]
            s_char = starts[ex][0]
            e_char = s_char + len(answers[ex][0])
            t0 = 0
            while seq[t0] != 1:
                t0 += 1
            t1 = len(ids) - 1
            while seq[t1] != 1:
                t1 -= 1
            if not (offsets[t0][0] <= s_char and offsets[t1][1] >= e_char):
                out["start_positions"].append(cls_index)
                out["end_positions"].append(cls_index)
            else:
                while t0 < len(offsets) and offsets[t0][0] <= s_char:
                    t0 += 1
                out["start_positions"].append(t0 - 1)
                while offsets[t1][1] >= e_char:
                    t1 -= 1
                out["end_positions"].append(t1 + 1)
            out["input_ids"].append(ids)
    return out


def ref_validation_features(hf_tok, questions, contexts, ids, max_len, stride, chunk=1000):
    """prepare_validation_features: offsets outside the context set to None, example ids kept."""
    feats = {"input_ids": [], "offset_mapping": [], "example_id": []}
    for a in range(0, len(questions), chunk):
        enc = hf_tok([q.lstrip() for q in questions[a:a + chunk]], contexts[a:a + chunk], truncation="only_second",
                     max_length=max_len, stride=stride, return_overflowing_tokens=True,
                     return_offsets_mapping=True, padding="max_length")
        for i in range(len(enc["input_ids"])):
            seq = enc.sequence_ids(i)
            feats["example_id"].append(ids[a + enc["overflow_to_sample_mapping"][i]])
            feats["offset_mapping"].append([o if seq[k] == 1 else None for k, o in enumerate(enc["offset_mapping"][i])])
            feats["input_ids"].append(enc["input_ids"][i])
    return feats


def ref_postprocess(ids, contexts_of, feats, start_logits, end_logits, n_best=20, max_answer=30):
    """utils_qa.py postprocess_qa_predictions (v1.1: no null answer), re-implemented."""
    by_example = collections.defaultdict(list)
    for i, ex in enumerate(feats["example_id"]):
        by_example[ex].append(i)
    predictions = {}
    for qid in ids:
        context = contexts_of[qid]
        cands = []
        for fi in by_example[qid]:
            s_log, e_log, offsets = start_logits[fi], end_logits[fi], feats["offset_mapping"][fi]
            s_idx = np.argsort(s_log)[-1:-n_best - 1:-1].tolist()
            e_idx = np.argsort(e_log)[-1:-n_best - 1:-1].tolist()
            for s in s_idx:
                for e in e_idx:
                    if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or len(offsets[s]) < 2 \
                            or offsets[e] is None or len(offsets[e]) < 2:
                        continue
                    if e < s or e - s + 1 > max_answer:
                        continue
                    cands.append({"offsets": (offsets[s][0], offsets[e][1]), "score": s_log[s] + e_log[e]})
        best = sorted(cands, key=lambda x: x["score"], reverse=True)[:n_best]
        for c in best:
            c["text"] = context[c["offsets"][0]:c["offsets"][1]]
        if best:
            scores = np.array([c["score"] for c in best])
            p = np.exp(scores - scores.max())
            p /= p.sum()
            for c, prob in zip(best, p):
                c["probability"] = prob
        predictions[qid] = best[0]["text"] if best else ""
    return predictions


# --------------------------------------------------------------------------- comparisons
def bench_features(split, tok, args) -> dict:
    from transformers import PreTrainedTokenizerFast

    from bertcli.tasks.qa.decode import context_logits, decode
    from bertcli.tasks.qa.features import build_features

    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                                     unk_token="[UNK]", mask_token="[MASK]")
    contexts = [split.context(i) for i in range(len(split))]
    rng = np.random.default_rng(0)
    T = args.seq

    def ours():
        t0 = time.perf_counter()
        tr = build_features(tok, split, T, args.stride, 64)
        t1 = time.perf_counter()
        dev = build_features(tok, split, T, args.stride, 64, labels=False)
        width = int(dev.lengths.max())
        s, e = rng.normal(size=(len(dev), width)).astype(np.float32), rng.normal(size=(len(dev), width)).astype(np.float32)
        t2 = time.perf_counter()
        cs, ce = context_logits(s, e, dev)
        d = decode(split, dev, cs, ce, np.stack([s[:, 0], e[:, 0]], 1), 20, 30, 1)
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2, len(tr), len(d.predictions)

    def theirs():
        t0 = time.perf_counter()
        tr = ref_train_features(hf_tok, split.questions, contexts, split.answers, split.starts, T, args.hf_stride)
        t1 = time.perf_counter()
        dev = ref_validation_features(hf_tok, split.questions, contexts, split.ids, T, args.hf_stride)
        s = rng.normal(size=(len(dev["input_ids"]), T)).astype(np.float32)
        e = rng.normal(size=(len(dev["input_ids"]), T)).astype(np.float32)
        t2 = time.perf_counter()
        preds = ref_postprocess(split.ids, dict(zip(split.ids, contexts)), dev, s, e)
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2, len(tr["input_ids"]), len(preds)

    runs = {"bertcli": [], "reference": []}
    for _ in range(args.repeats):
        runs["bertcli"].append(ours())
        runs["reference"].append(theirs())
    med = {k: [statistics.median(r[i] for r in v) for i in range(3)] for k, v in runs.items()}
    out = {"questions": len(split), "contexts": len(split.contexts),
           "windows_bertcli": runs["bertcli"][0][3], "windows_reference": runs["reference"][0][3],
           "doc_stride": f"bertcli {args.stride} between window starts (Google's meaning); reference "
                         f"stride={args.hf_stride} overlap (transformers' meaning)"}
    for k, (train_s, dev_s, post_s) in med.items():
        out[f"{k}_train_features_s"] = round(train_s, 3)
        out[f"{k}_dev_features_s"] = round(dev_s, 3)
        out[f"{k}_postprocess_s"] = round(post_s, 3)
        out[f"{k}_total_s"] = round(train_s + dev_s + post_s, 3)
    out["features_speedup"] = round((med["reference"][0] + med["reference"][1]) / (med["bertcli"][0] + med["bertcli"][1]), 2)
    out["postprocess_speedup"] = round(med["reference"][2] / med["bertcli"][2], 2)
    out["total_speedup"] = round(out["reference_total_s"] / out["bertcli_total_s"], 2)
    return out


def bench_train(split, tok, args, device) -> dict:
    import transformers as tf

    from bertcli.finetune.engine import collate
    from bertcli.model import load_checkpoint
    from bertcli.tasks.qa.features import build_features
    from bertcli.train.optim import _fast_adamw_kwargs, build_optimizer

    f = build_features(tok, split, args.seq, args.stride, 64)
    from bertcli.finetune.task import Features

    feats = Features(f.ids, f.types, f.offsets, f.example.astype(np.int64),
                     per_feature={"start_positions": f.labels[:, 0], "end_positions": f.labels[:, 1]})
    cfg = tf.BertConfig(vocab_size=tok.get_vocab_size(), max_position_embeddings=512, **SIZES[args.size])
    torch.manual_seed(0)
    theirs = tf.BertForQuestionAnswering(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        theirs.save_pretrained(tmp)
        ours, _ = load_checkpoint(tmp, head="qa")
    ours, theirs = ours.to(device).train(), theirs.to(device).train()
    gen = np.random.default_rng(1)
    batches = []
    for _ in range(args.steps):
        b = collate(feats, gen.choice(len(feats), args.batch, replace=False), 0)
        batches.append({k: v.to(device) for k, v in b.items()})
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    from bertcli.finetune.qa.task import SquadTask

    task = SquadTask.__new__(SquadTask)           # only forward / loss are used
    opt_ours = build_optimizer(ours, "adamw", 3e-5, (0.9, 0.999), 1e-6, 0.01, device)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=3e-5, eps=1e-6, weight_decay=0.01, **_fast_adamw_kwargs(device))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step_ours(b):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            out = task.forward(ours, b, train=True)
        task.loss(out, b).backward()
        opt_ours.step()
        opt_ours.zero_grad(set_to_none=True)

    def step_theirs(b):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            out = theirs(input_ids=b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"],
                         start_positions=b["start_positions"], end_positions=b["end_positions"])
        out.loss.backward()
        opt_theirs.step()
        opt_theirs.zero_grad(set_to_none=True)

    def timed(step):
        sync()
        t = time.perf_counter()
        for b in batches:
            step(b)
        sync()
        return time.perf_counter() - t

    timed(step_ours), timed(step_theirs)        # warm-up
    times = {"bertcli": [], "transformers": []}
    for _ in range(args.repeats):
        times["bertcli"].append(timed(step_ours))
        times["transformers"].append(timed(step_theirs))
    widths = [b["input_ids"].shape[1] for b in batches]
    out = {"size": args.size, **SIZES[args.size], "batch": args.batch, "max_seq_length": args.seq,
           "steps_per_repeat": args.steps, "repeats": args.repeats, "dtype": args.dtype,
           "real_token_fraction": round(tokens / sum(w * args.batch for w in widths), 3)}
    for k, t in times.items():
        out[f"{k}_tokens_per_s"] = round(tokens / statistics.median(t), 1)
    out["bertcli_vs_transformers"] = round(out["bertcli_tokens_per_s"] / out["transformers_tokens_per_s"], 3)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--contexts", type=int, default=600, help="paragraphs (5 questions each)")
    p.add_argument("--seq", type=int, default=384)
    p.add_argument("--stride", type=int, default=128, help="bertcli doc_stride (between window starts)")
    p.add_argument("--hf-stride", type=int, default=128, help="reference stride (overlap, as run_qa.py)")
    p.add_argument("--size", choices=list(SIZES), default="small")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=3, help="training batches per timed repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tokenizer", default=None, help="a tokenizer directory (default: WordPiece trained here)")
    p.add_argument("--skip", choices=["train", "features"], default=None)
    args = p.parse_args(argv)
    split = make_split(args.contexts, seed=0)
    if args.tokenizer:
        from bertcli.tokenization.load import load_tokenizer

        tok = load_tokenizer(args.tokenizer).tokenizer
    else:
        tok = train_tokenizer(split.contexts)
    device = torch.device(args.device)
    result = {"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads()}
    if args.skip != "features":
        result["features_and_postprocess"] = bench_features(split, tok, args)
        print(json.dumps(result["features_and_postprocess"]), file=sys.stderr)
    if args.skip != "train":
        result["training_step"] = bench_train(split, tok, args, device)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
