"""Forward+backward speed of bertcli's encoder with pretraining heads against transformers'
BertForPreTraining of the same config, on the same batches, in one process.

Batches look like BERT's pretraining data at max_seq_length 128. Row lengths: with `--lengths
DIR`, drawn from the rows of a data set built by `bertcli build-data` (the real distribution:
the built-in corpus's short documents leave 78% of the positions real); by default Google's
rule on a corpus of long documents (90% of the rows full, 10% with a short target length drawn
in [2, 125]). Rows are padded to 128; 15% of the real tokens are predicted (at most 20 per row,
Google's rule). Both models compute the MLM + NSP loss the way each is used: bertcli
at the masked positions only, transformers from its full [B, T, V] logits with -100 labels.
Speed is real (non-padding) tokens per second; repeats are interleaved (ours, theirs, ours, ...)
and the median is reported. `--compile` also times bertcli with train.compile's compiled blocks
(the warm-up holds the compilation), `--ablations`
bertcli with unpadding or the sparse last layer turned off.

    python scripts/bench_model.py                       # bert-tiny and bert-base, CPU, fp32
    python scripts/bench_model.py --lengths runs/bert-tiny/data-<hash>   # the quickstart's lengths
    python scripts/bench_model.py --dtype bf16 --compile --batch-base 64   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def make_batch(batch: int, seq: int, vocab: int, gen: torch.Generator, short_prob: float = 0.1,
               pool: list[int] | None = None) -> dict:
    """Random ids with BERT's layout; row lengths drawn from `pool` (a built data set's) or from
    Google's target-length rule."""
    lengths = []
    for _ in range(batch):
        if pool:
            lengths.append(max(4, min(seq, pool[int(torch.randint(len(pool), (), generator=gen))])))
            continue
        short = torch.rand((), generator=gen).item() < short_prob
        lengths.append(int(torch.randint(2, seq - 2, (), generator=gen)) + 3 if short else seq)
    ids = torch.zeros(batch, seq, dtype=torch.long)
    mask = torch.zeros(batch, seq, dtype=torch.long)
    types = torch.zeros(batch, seq, dtype=torch.long)
    labels = torch.full((batch, seq), -100, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(5, vocab, (n,), generator=gen)
        mask[b, :n] = 1
        types[b, n // 2:n] = 1
        k = min(20, max(1, round((n - 3) * 0.15)))
        picked = 1 + torch.randperm(n - 2, generator=gen)[:k]
        labels[b, picked] = ids[b, picked]
        ids[b, picked] = 4
    positions = (labels.view(-1) != -100).nonzero().squeeze(1)
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels,
                positions=positions, pair=torch.randint(0, 2, (batch,), generator=gen),
                real_tokens=int(mask.sum()))


def ours_step(model, b):
    out = model(b["input_ids"], b["attention_mask"], b["token_type_ids"], b["positions"])
    loss = F.cross_entropy(out.mlm_logits.float(), b["labels"].view(-1)[b["positions"]])
    loss = loss + F.cross_entropy(out.pair_logits.float(), b["pair"])
    loss.backward()


def theirs_step(model, b):
    out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"],
                labels=b["labels"], next_sentence_label=b["pair"])
    out.loss.backward()


def timed(step, model, batches, device, dtype) -> float:
    """Seconds for one pass over `batches` (forward + backward, gradients dropped)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for b in batches:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            step(model, b)
        model.zero_grad(set_to_none=True)
    sync()
    return time.perf_counter() - start


def profile_ops(step, model, batches, device, dtype, top: int) -> dict:
    """torch.profiler over one pass of forward + backward: the `top` ops by self CPU time, with
    their share of the pass (self times add up to the whole, so the shares do too)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        wall = timed(step, model, batches, device, dtype)
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    return {"wall_s": round(wall, 3), "self_cpu_total_s": round(total / 1e6, 3),
            "top_ops": [{"op": e.key, "calls": e.count, "self_s": round(e.self_cpu_time_total / 1e6, 3),
                         "share": round(e.self_cpu_time_total / total, 3)} for e in events[:top]]}


def bench_shape(name: str, batch: int, args, device) -> dict:
    import transformers as tf

    from bertcli.config.recipe import load_recipe
    from bertcli.model import build_model, save_checkpoint

    recipe = load_recipe(name)
    if recipe.model.family != "bert":
        sys.exit(f"--shapes {name}: this benchmark compares with BertForPreTraining (MLM + NSP); "
                 "use bert recipes (scripts/bench_train.py covers roberta and albert)")
    vocab = recipe.tokenizer.vocab_size
    torch.manual_seed(0)
    ours = build_model(recipe.model, vocab, 0).to(device).train()
    # transformers' model from bertcli's checkpoint: same config, same weights.
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(ours, tmp)
        theirs = tf.BertForPreTraining.from_pretrained(tmp).to(device).train()
    gen = torch.Generator().manual_seed(1)
    pool = None
    if args.lengths:   # the row lengths of a data set built by `bertcli build-data`
        from datasets import load_from_disk

        pool = [len(r) for r in load_from_disk(args.lengths)["train"]["input_ids"]]
    batches = []
    for _ in range(args.steps):
        b = make_batch(batch, args.seq, vocab, gen, args.short_prob, pool)
        batches.append({k: (v.to(device) if torch.is_tensor(v) else v) for k, v in b.items()})
    tokens = sum(b["real_tokens"] for b in batches)
    contenders = {"bertcli": (ours_step, ours), "transformers": (theirs_step, theirs)}
    if args.ablations:  # what each fast path is worth: bertcli with one of them turned off
        for label, attr in (("no_unpadding", "unpad"), ("no_sparse_last_layer", "sparse_last_layer")):
            variant = build_model(recipe.model, vocab, 0).to(device).train()
            setattr(variant.encoder if attr == "unpad" else variant, attr, False)
            contenders[f"bertcli_{label}"] = (ours_step, variant)
    if args.compile:   # as train.compile does it: each attention / feed-forward block, unpadding kept
        from bertcli.train.compile import compile_blocks

        compiled = build_model(recipe.model, vocab, 0).to(device).train()
        compiled.load_state_dict(ours.state_dict())
        compile_blocks(compiled)
        contenders["bertcli_compiled"] = (ours_step, compiled)
    times = {k: [] for k in contenders}
    warmup_s = {}
    for k, (step, model) in contenders.items():  # warm-up (and compilation)
        warmup_s[k] = round(timed(step, model, batches[:2], device, args.dtype), 2)
    if args.profile:
        return {"shape": name, "batch": batch, "seq_len": args.seq,
                "profile": {k: profile_ops(step, model, batches, device, args.dtype, args.profile)
                            for k, (step, model) in contenders.items()}}
    for _ in range(args.repeats):
        for k, (step, model) in contenders.items():
            times[k].append(timed(step, model, batches, device, args.dtype))
    result = {"shape": name, "batch": batch, "seq_len": args.seq,
              "lengths": f"rows of {args.lengths}" if pool else f"Google's rule, short_seq_prob {args.short_prob}",
              "steps_per_repeat": args.steps,
              "repeats": args.repeats, "warmup_2_batches_s": warmup_s,
              "real_token_fraction": round(tokens / (batch * args.seq * args.steps), 3)}
    for k, t in times.items():
        result[f"{k}_tokens_per_s"] = round(tokens / statistics.median(t), 1)
    base = result["transformers_tokens_per_s"]
    for k in contenders:
        if k != "transformers":
            result[f"{k}_vs_transformers"] = round(result[f"{k}_tokens_per_s"] / base, 3)
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="bert-tiny,bert-base", help="shipped recipes whose model section is used")
    p.add_argument("--batch-tiny", type=int, default=64)
    p.add_argument("--batch-base", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=3, help="batches per timed repeat")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--compile", action="store_true", help="also time bertcli with its encoder blocks compiled (train.compile)")
    p.add_argument("--ablations", action="store_true",
                   help="also time bertcli without unpadding, and without the sparse last layer")
    p.add_argument("--lengths", default=None,
                   help="a data directory built by `bertcli build-data`: draw row lengths from its train split")
    p.add_argument("--short-prob", type=float, default=0.1,
                   help="fraction of rows with a random shorter length (BERT data: 0.1; 1.0 = heavy padding)")
    p.add_argument("--profile", type=int, default=0, metavar="TOP",
                   help="instead of timing: torch.profiler by op over one pass per contender, the TOP ops")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    results = []
    for name in args.shapes.split(","):
        batch = args.batch_tiny if "tiny" in name else args.batch_base
        results.append(bench_shape(name, batch, args, device))
        print(json.dumps(results[-1]), file=sys.stderr)
    print(json.dumps({"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "dtype": args.dtype, "results": results}, indent=2))


if __name__ == "__main__":
    main()
