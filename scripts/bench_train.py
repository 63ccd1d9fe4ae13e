#!/usr/bin/env python
"""Training throughput: bertcli's full training step vs transformers' model of the same shape.

    python scripts/bench_train.py --recipe bert-tiny [--set k=v ...] [--rounds 5] [--steps 4]
    python scripts/bench_train.py --recipe bert-tiny --rss-steps 3000 [--set train.num_workers=0]

Both sides train on the same built data (the recipe's tokenizer and data stages, on a slice of
its corpus), with the same batch, sequence lengths, parameter groups and AdamW (the fused
kernel when the device has one), gradient clipping at train.grad_clip, in one process, in
interleaved rounds so that machine noise hits both alike. Measured per step:

  bertcli       next(DataLoader) (workers, collator) + bertcli.train.loop.Trainer._train_step
                (sparse MLM prediction, SDPA, losses, backward, clip, optimizer, scheduler)
  transformers  next(DataLoader) + dense labels (-100 outside the masked positions) +
                the family's pretraining class (BertForPreTraining, AlbertForPreTraining,
                RobertaForMaskedLM, ModernBertForMaskedLM) forward with its own loss, backward,
                clip, optimizer

Throughput counts real (non-padding) tokens. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

PAIR_LABELS = {"nsp": "next_sentence_label", "sop": "sentence_order_label"}  # transformers' keyword per pair head


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", required=True)
    p.add_argument("--set", action="append", default=[], dest="sets", help="recipe override section.key=value")
    p.add_argument("--documents", type=int, default=600, help="corpus documents to build data from")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps per side per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per side first")
    p.add_argument("--rss-steps", type=int, default=0,
                   help="instead of the speed comparison: run this many bertcli steps (e.g. 3000) and report the "
                        "main process's anonymous RSS at the start and end, sampled every --rss-every steps, and "
                        "its slope (MB per 1,000 steps)")
    p.add_argument("--rss-every", type=int, default=100)
    p.add_argument("--no-window-compare", action="store_true",
                   help="local-attention models: skip the third contender, bertcli with the window as a mask")
    p.add_argument("--no-trim", action="store_true",
                   help="skip the periodic malloc_trim that Trainer.fit does (bertcli/train/heap.py)")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "bertcli-bench"),
                   help="where the bench's tokenizer and data are cached")
    return p.parse_args()


def main() -> None:
    args = parse()
    import transformers

    from bertcli.config.families import family_spec
    from bertcli.config.model import encoder_config
    from bertcli.config.recipe import load_recipe
    from bertcli.data.build import ensure_data
    from bertcli.data.collator import PretrainCollator
    from bertcli.data.dataset import PretrainDataset, load_data
    from bertcli.model import build_model
    from bertcli.model.hf import to_hf_config
    from bertcli.tokenization.build import ensure_tokenizer
    from bertcli.tokenization.load import load_tokenizer
    from bertcli.train.heap import release_free_memory
    from bertcli.train.loop import StopFlag, Trainer, TrainInputs
    from bertcli.train.optim import build_optimizer

    name = Path(args.recipe).name.removesuffix(".yaml")
    sets = [f"corpus.sources=[{{path: builtin, max_documents: {args.documents}}}]",
            f"output_dir={Path(args.cache) / name}", "train.log_every=1000000", "train.eval_every=1000000",
            "train.save_every=1000000", "train.max_steps=1000000", "train.warmup_steps=10", "train.tensorboard=false",
            "train.optimizer=adamw", *args.sets]  # AdamW on both sides, even for LAMB recipes
    recipe = load_recipe(args.recipe, sets)
    tok = load_tokenizer(ensure_tokenizer(recipe).path)
    data = load_data(ensure_data(recipe).path)
    cfg = recipe.train

    collate = PretrainCollator(tok, recipe.data, recipe.seed)
    train = data["train"]
    stop = StopFlag()

    def make_ours(window_blocks: bool = True):
        """bertcli's model, Trainer and step function (the same init and data for every variant)."""
        torch.manual_seed(recipe.seed)
        model = build_model(recipe.model, tok.vocab_size, tok.pad_id)
        model.encoder.window_blocks = window_blocks
        trainer = Trainer(TrainInputs(recipe=recipe, model=model, train_dataset=PretrainDataset(train),
                                      val_dataset=None, n_train=len(train), n_val=0, collate=collate,
                                      hf_save=lambda m, d: None, run_dir=Path(args.cache) / "unused"))
        it = iter(trainer._train_loader())

        def step() -> int:
            batches = [next(it) for _ in range(trainer.accum)]
            trainer._train_step(batches, stop)
            if not args.no_trim:
                release_free_memory(trainer.step)  # as Trainer.fit does after each step
            return sum(int(b["attention_mask"].sum()) for b in batches)
        return model, trainer, step

    ours_model, trainer, ours_step = make_ours()

    family = recipe.model.family
    spec = family_spec(family)
    hf_class = spec.architectures["pretraining"]
    hf_cfg = to_hf_config(encoder_config(recipe.model, tok.vocab_size, tok.pad_id), "pretraining")
    hf_cfg.pop("bertcli", None)
    config = transformers.AutoConfig.for_model(hf_cfg.pop("model_type"), **hf_cfg)
    theirs = getattr(transformers, hf_class)(config).train()
    theirs_opt = build_optimizer(theirs, cfg.optimizer, cfg.learning_rate,
                                 (cfg.beta1, cfg.beta2), cfg.eps, cfg.weight_decay, "cpu")
    theirs_it = iter(trainer._train_loader())
    pair_key = PAIR_LABELS.get(spec.pair_head)

    def theirs_step() -> int:
        tokens = 0
        batches = [next(theirs_it) for _ in range(trainer.accum)]
        for b in batches:
            labels = torch.full_like(b["input_ids"], -100)
            labels.view(-1)[b["mlm_positions"]] = b["mlm_labels"]
            kw = {"labels": labels}
            if pair_key:
                kw[pair_key] = b["pair_labels"]
                kw["token_type_ids"] = b["token_type_ids"]
            out = theirs(input_ids=b["input_ids"], attention_mask=b["attention_mask"], **kw)
            (out.loss / len(batches)).backward()
            tokens += int(b["attention_mask"].sum())
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(theirs.parameters(), cfg.grad_clip)
        theirs_opt.step()
        theirs_opt.zero_grad(set_to_none=True)
        return tokens

    if args.rss_steps:
        print(json.dumps(rss_run(ours_step, args, name, cfg, trainer), indent=1))
        return
    sides = {"bertcli": ours_step, "transformers": theirs_step}
    if (recipe.model.local_attention or 0) and not args.no_window_compare:
        # the same model with the window applied as a mask over full attention (before issue 23)
        sides["bertcli_masked_window"] = make_ours(window_blocks=False)[2]
    for fn in sides.values():
        for _ in range(args.warmup):
            fn()
    totals = {k: [0, 0.0] for k in sides}
    per_round = {k: [] for k in sides}
    for _ in range(args.rounds):
        for k, fn in sides.items():
            t0, tokens = time.perf_counter(), 0
            for _ in range(args.steps):
                tokens += fn()
            dt = time.perf_counter() - t0
            totals[k][0] += tokens
            totals[k][1] += dt
            per_round[k].append(round(tokens / dt))
    tps = {k: totals[k][0] / totals[k][1] for k in sides}
    ours_tps, theirs_tps = tps["bertcli"], tps["transformers"]
    extra = {}
    if "bertcli_masked_window" in tps:
        extra = {"bertcli_masked_window_tokens_per_s": round(tps["bertcli_masked_window"]),
                 "bertcli_masked_window_ratio": round(tps["bertcli_masked_window"] / theirs_tps, 2),
                 "window_blocks_speedup": round(ours_tps / tps["bertcli_masked_window"], 2)}
    print(json.dumps({
        "recipe": name, "family": family, "transformers_model": hf_class,
        "parameters": {"bertcli": sum(p.numel() for p in ours_model.parameters()),
                       "transformers": sum(p.numel() for p in theirs.parameters())},
        "max_seq_length": recipe.data.max_seq_length, "batch_size": cfg.batch_size, "micro_batch_size": trainer.micro,
        "precision": cfg.precision, "optimizer": "AdamW (both)", "num_workers": cfg.num_workers,
        "threads": torch.get_num_threads(), "device": str(trainer.device),
        "rounds": args.rounds, "steps_per_round": args.steps,
        "bertcli_tokens_per_s": round(ours_tps), "transformers_tokens_per_s": round(theirs_tps),
        "ratio": round(ours_tps / theirs_tps, 2), **extra,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "per_round_tokens_per_s": per_round, "torch": torch.__version__, "transformers": transformers.__version__,
    }, indent=1))


def anon_rss_mb() -> float:
    """The process's anonymous resident memory (heap, tensors), not its mapped files."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_run(step, args, name: str, cfg, trainer) -> dict:
    """Memory over a long run: RSS samples, and the least-squares slope over the second half
    (after the allocator's warm-up)."""
    for _ in range(args.warmup):
        step()
    samples, t0, c0 = [], time.perf_counter(), time.process_time()
    for i in range(args.rss_steps + 1):
        if i % args.rss_every == 0:
            samples.append((i, round(anon_rss_mb(), 1)))
        if i < args.rss_steps:
            step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    half = samples[len(samples) // 2:]
    n = len(half)
    mx, my = sum(x for x, _ in half) / n, sum(y for _, y in half) / n
    var = sum((x - mx) ** 2 for x, _ in half)
    slope = sum((x - mx) * (y - my) for x, y in half) / var * 1000 if var else 0.0
    return {"recipe": name, "steps": args.rss_steps, "batch_size": cfg.batch_size, "micro_batch_size": trainer.micro,
            "max_seq_length": trainer.r.data.max_seq_length, "num_workers": cfg.num_workers,
            "threads": torch.get_num_threads(), "malloc_trim": not args.no_trim,
            "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
            "rss_start_mb": samples[0][1], "rss_end_mb": samples[-1][1], "rss_max_mb": max(y for _, y in samples),
            "slope_mb_per_1000_steps_second_half": round(slope, 1), "s_per_step": round(wall / args.rss_steps, 4),
            "cpu_s_per_step": round(cpu / args.rss_steps, 4), "samples": samples,
            "load_average": [round(x, 2) for x in os.getloadavg()]}


if __name__ == "__main__":
    main()
