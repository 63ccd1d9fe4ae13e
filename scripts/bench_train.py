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


class Bench:
    """bertcli's training step and transformers' on the same built data, in this process."""

    def __init__(self, recipe_name: str, sets: list[str], documents: int, cache: str, trim: bool = True,
                 window_compare: bool = True, reference: bool = True):
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
        from bertcli.train.precision import autocast

        self.name = name = Path(recipe_name).name.removesuffix(".yaml")
        sets = [f"corpus.sources=[{{path: builtin, max_documents: {documents}}}]",
                f"output_dir={Path(cache) / name}", "train.log_every=1000000", "train.eval_every=1000000",
                "train.save_every=1000000", "train.max_steps=1000000", "train.warmup_steps=10",
                "train.report_to=none", "train.optimizer=adamw", *sets]  # AdamW on both sides, even for LAMB recipes
        self.recipe = recipe = load_recipe(recipe_name, sets)
        self.tokenizer_dir = ensure_tokenizer(recipe).path
        tok = load_tokenizer(self.tokenizer_dir)
        data = load_data(ensure_data(recipe).path)
        self.cfg = cfg = recipe.train
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
                                          hf_save=lambda m, d: None, run_dir=Path(cache) / "unused"))
            it = iter(trainer._train_loader())

            def step() -> int:
                batches = [next(it) for _ in range(trainer.accum)]
                trainer._train_step(batches, stop)
                if trim:
                    release_free_memory(trainer.step)  # as Trainer.fit does after each step
                return sum(int(b["attention_mask"].sum()) for b in batches)
            return model, trainer, step

        self.model, self.trainer, ours_step = make_ours()
        trainer, device = self.trainer, self.trainer.device
        self.sides = {"bertcli": ours_step}
        self.family = family = recipe.model.family
        spec = family_spec(family)
        self.hf_class = hf_class = spec.architectures["pretraining"]
        self.theirs = None
        if reference:
            hf_cfg = to_hf_config(encoder_config(recipe.model, tok.vocab_size, tok.pad_id), "pretraining")
            hf_cfg.pop("bertcli", None)
            config = transformers.AutoConfig.for_model(hf_cfg.pop("model_type"), **hf_cfg)
            self.theirs = theirs = getattr(transformers, hf_class)(config).to(device).train()
            theirs_opt = build_optimizer(theirs, cfg.optimizer, cfg.learning_rate,
                                         (cfg.beta1, cfg.beta2), cfg.eps, cfg.weight_decay, device)
            theirs_it = iter(trainer._train_loader())
            pair_key = PAIR_LABELS.get(spec.pair_head)
            precision = "bf16" if cfg.precision == "bf16" else "fp32"   # fp16: the reference runs fp32

            def theirs_step() -> int:
                tokens = 0
                batches = [{k: v.to(device) for k, v in b.items()} for b in
                           (next(theirs_it) for _ in range(trainer.accum))]
                for b in batches:
                    labels = torch.full_like(b["input_ids"], -100)
                    labels.view(-1)[b["mlm_positions"]] = b["mlm_labels"]
                    kw = {"labels": labels}
                    if pair_key:
                        kw[pair_key] = b["pair_labels"]
                        kw["token_type_ids"] = b["token_type_ids"]
                    with autocast(precision, device):
                        out = theirs(input_ids=b["input_ids"], attention_mask=b["attention_mask"], **kw)
                    (out.loss / len(batches)).backward()
                    tokens += int(b["attention_mask"].sum())
                if cfg.grad_clip:
                    torch.nn.utils.clip_grad_norm_(theirs.parameters(), cfg.grad_clip)
                theirs_opt.step()
                theirs_opt.zero_grad(set_to_none=True)
                return tokens
            self.sides["transformers"] = theirs_step
        if (recipe.model.local_attention or 0) and window_compare:
            # the same model with the window applied as a mask over full attention (before issue 23)
            self.sides["bertcli_masked_window"] = make_ours(window_blocks=False)[2]

    def measure(self, rounds: int, steps: int, warmup: int) -> dict:
        """Interleaved rounds of `steps` steps per side after `warmup` untimed ones: tokens/s per
        side, per round, and the seconds of each side's first step (compilation, warm-up)."""
        device = self.trainer.device
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        first = {}
        for k, fn in self.sides.items():
            for i in range(warmup):
                sync()
                t0 = time.perf_counter()
                fn()
                sync()
                if i == 0:
                    first[k] = round(time.perf_counter() - t0, 3)
        totals = {k: [0, 0.0] for k in self.sides}
        per_round: dict[str, list] = {k: [] for k in self.sides}
        for _ in range(rounds):
            for k, fn in self.sides.items():
                sync()
                t0, tokens = time.perf_counter(), 0
                for _ in range(steps):
                    tokens += fn()
                sync()
                dt = time.perf_counter() - t0
                totals[k][0] += tokens
                totals[k][1] += dt
                per_round[k].append(round(tokens / dt))
        tps = {k: totals[k][0] / totals[k][1] for k in self.sides}
        out: dict = {f"{k}_tokens_per_s": round(v) for k, v in tps.items()}
        if "transformers" in tps:
            out["ratio"] = round(tps["bertcli"] / tps["transformers"], 2)
        if "bertcli_masked_window" in tps:
            out["bertcli_masked_window_ratio"] = (round(tps["bertcli_masked_window"] / tps["transformers"], 2)
                                                  if "transformers" in tps else None)
            out["window_blocks_speedup"] = round(tps["bertcli"] / tps["bertcli_masked_window"], 2)
        out["first_step_s"] = first
        out["s_per_step"] = {k: round(totals[k][1] / (rounds * steps), 4) for k in self.sides}
        out["per_round_tokens_per_s"] = per_round
        out["_tps"] = tps
        return out

    def describe(self) -> dict:
        cfg, tr = self.cfg, self.trainer
        params = {"bertcli": sum(p.numel() for p in self.model.parameters())}
        if self.theirs is not None:
            params["transformers"] = sum(p.numel() for p in self.theirs.parameters())
        return {"recipe": self.name, "family": self.family, "transformers_model": self.hf_class, "parameters": params,
                "max_seq_length": self.recipe.data.max_seq_length, "batch_size": cfg.batch_size,
                "micro_batch_size": tr.micro, "precision": cfg.precision, "optimizer": "AdamW (both)",
                "compile": cfg.compile, "num_workers": cfg.num_workers, "threads": torch.get_num_threads(),
                "device": str(tr.device)}


def main() -> None:
    args = parse()
    import transformers

    bench = Bench(args.recipe, args.sets, args.documents, args.cache, trim=not args.no_trim,
                  window_compare=not args.no_window_compare, reference=not args.rss_steps)
    if args.rss_steps:
        print(json.dumps(rss_run(bench.sides["bertcli"], args, bench.name, bench.cfg, bench.trainer), indent=1))
        return
    m = bench.measure(args.rounds, args.steps, args.warmup)
    m.pop("_tps")
    print(json.dumps({**bench.describe(), "rounds": args.rounds, "steps_per_round": args.steps, **m,
                      "load_average": [round(x, 2) for x in os.getloadavg()],
                      "torch": torch.__version__, "transformers": transformers.__version__}, indent=1))


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
