"""Sentence-embedding speed of bertcli against sentence-transformers, same weights, same texts, in
one process: a training step with MultipleNegativesRankingLoss (scale 20, in-batch negatives),
and encoding throughput.

A model of the chosen size with random weights and a WordPiece tokenizer trained on the
generated texts is built locally (nothing is downloaded) and saved by bertcli as a
sentence-transformers directory, which sentence-transformers loads (`SentenceTransformer(dir)`).

Training step = forward of anchors and positives + loss + backward + AdamW step. bertcli runs
`EmbedTask.forward(train=True)` as `bertcli finetune embed`'s engine does (texts tokenized once into the task's
pool, batches collated from it, the encoder's dense layers on real tokens only);
sentence-transformers runs its model + MultipleNegativesRankingLoss forward/backward (the loop
inside SentenceTransformerTrainer.training_step), each batch tokenized beforehand by
`model.preprocess` (padded to its longest text), so neither side's timing includes tokenizing.
Encoding: `Embedder.encode` (length-sorted batches) against `SentenceTransformer.encode` (which
length-sorts too). Text lengths are drawn from a log-normal (median 24 words, clipped to
max_seq_length), so batches carry padding as real data do. Speed is real (non-padding) tokens
per second; repeats are interleaved and the median is reported.

    python scripts/bench_embed.py                      # small BERT, CPU, batch 32
    python scripts/bench_embed.py --size base --device cuda --batch-size 64
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

SIZES = {"tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512),
         "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
         "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)}
WORDS = ("model data text query answer search index vector token layer batch train loss score rank "
         "document passage sentence embed python list value function class method file table column "
         "result number string order group match learn deep small large fast slow first last").split()


def texts(n: int, max_words: int, rng: random.Random) -> list[str]:
    out = []
    for _ in range(n):
        m = int(min(max_words, max(3, round(rng.lognormvariate(np.log(24), 0.6)))))
        out.append(" ".join(rng.choice(WORDS) + ("s" if rng.random() < 0.3 else "") for _ in range(m)))
    return out


def build(directory: Path, size: str, max_len: int, corpus: list[str]) -> None:
    """A random bertcli BERT + WordPiece tokenizer, saved as a sentence-transformers directory."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from bertcli.config.sections import ModelConfig
    from bertcli.model import build_model, save_checkpoint
    from bertcli.model.pooling import Pooling
    from bertcli.model.sentence import write_sentence_dir

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(corpus, trainers.WordPieceTrainer(
        vocab_size=2000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]", model_max_length=max_len).save_pretrained(directory)
    cfg = ModelConfig(family="bert", **SIZES[size], hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                      max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu",
                      sharing="none", embedding_size=SIZES[size]["hidden_size"], classifier_dropout=0.1)
    torch.manual_seed(0)
    save_checkpoint(build_model(cfg, tok.get_vocab_size(), 0), directory, tokenizer_dir=directory)
    write_sentence_dir(directory, Pooling("mean", False, SIZES[size]["hidden_size"]), max_len)


def bertcli_side(directory: Path, anchors, positives, args, device):
    """(step(i) -> real tokens, embedder) running bertcli's embed task on `device`."""
    from bertcli.config.finetune_sections import FinetuneConfig
    from bertcli.finetune.embed.data import EmbedSplit
    from bertcli.finetune.embed.task import EmbedTask
    from bertcli.finetune.engine import collate
    from bertcli.model import load_checkpoint
    from bertcli.serve.evaluate_embed import Embedder
    from bertcli.tokenization.load import load_tokenizer

    cfg = FinetuneConfig(max_seq_length=args.max_seq_length, batch_size=args.batch_size)
    task = EmbedTask(cfg, Path("-"), None, directory)
    task.pooling = task.pooling.__class__("mean", False, SIZES[args.size]["hidden_size"])
    info = load_tokenizer(directory)
    all_texts = anchors + positives
    n = len(anchors)
    split = EmbedSplit("train", "bench", "pairs", all_texts, np.arange(n), np.arange(n, 2 * n), np.zeros((n, 0), np.int64))
    feats = task.featurize(split, info, zero_types=False)
    model, _ = load_checkpoint(directory, dropout=0.1)
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    lengths = np.diff(task.pool_features.offsets)

    def step(i: int) -> int:
        idx = np.arange(i * args.batch_size, (i + 1) * args.batch_size) % n
        batch = {k: v.to(device) for k, v in collate(feats, idx, info.pad_id).items()}
        opt.zero_grad(set_to_none=True)
        task.forward(model, batch, train=True).backward()
        opt.step()
        return int(lengths[idx].sum() + lengths[idx + n].sum())

    emb = Embedder.from_model(model, info, task.pooling, args.max_seq_length, batch_size=64)
    return step, emb, model


def st_side(directory: Path, anchors, positives, args, device):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    model = SentenceTransformer(str(directory), device=str(device))
    model.max_seq_length = args.max_seq_length
    model.train()
    loss_fn = MultipleNegativesRankingLoss(model, scale=20.0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    n = len(anchors)
    batches = []
    for i in range(args.steps + args.warmup):
        idx = [(i * args.batch_size + j) % n for j in range(args.batch_size)]
        feats = [model.preprocess([anchors[j] for j in idx]), model.preprocess([positives[j] for j in idx])]
        real = int(sum(int(f["attention_mask"].sum()) for f in feats))
        batches.append(([{k: v.to(device) if torch.is_tensor(v) else v for k, v in f.items()} for f in feats], real))

    def step(i: int) -> int:
        feats, real = batches[i]
        opt.zero_grad(set_to_none=True)
        loss_fn(feats, None).backward()
        opt.step()
        return real

    return step, model


def timed(fn, *a) -> tuple[float, object]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn(*a)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=SIZES, default="small")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--steps", type=int, default=6, help="timed training steps per repeat")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--encode-texts", type=int, default=512)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rng = random.Random(0)
    n = args.batch_size * (args.steps + args.warmup)
    anchors, positives = texts(n, 60, rng), texts(n, 100, rng)
    enc_texts = texts(args.encode_texts, 100, rng)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "model"
        d.mkdir()
        build(d, args.size, args.max_seq_length, anchors + positives)
        b_step, embedder, b_model = bertcli_side(d, anchors, positives, args, device)
        s_step, s_model = st_side(d, anchors, positives, args, device)
        b_model.eval()                       # the same vectors from the same weights, before any step
        s_model.eval()
        check = float(np.abs(embedder.encode(enc_texts[:16]) - s_model.encode(enc_texts[:16])).max())
        b_model.train()
        s_model.train()
        for i in range(args.warmup):
            b_step(i)
            s_step(i)
        train = {"bertcli": [], "sentence_transformers": []}
        for _ in range(args.repeats):
            for name, step in (("bertcli", b_step), ("sentence_transformers", s_step)):
                t, tokens = timed(lambda s: sum(s(args.warmup + i) for i in range(args.steps)), step)
                train[name].append(tokens / t)
        b_model.eval()
        s_model.eval()
        enc = {"bertcli": [], "sentence_transformers": []}
        real = sum(len(x) for x in embedder.tokenizer.encode_batch(enc_texts))
        for _ in range(args.repeats):
            t, _ = timed(embedder.encode, enc_texts)
            enc["bertcli"].append(real / t)
            t, _ = timed(lambda: s_model.encode(enc_texts, batch_size=64, convert_to_numpy=True))
            enc["sentence_transformers"].append(real / t)
    med = {k: {n: statistics.median(v) for n, v in d.items()} for k, d in (("train", train), ("encode", enc))}
    print(json.dumps({
        "size": args.size, "device": str(device), "threads": torch.get_num_threads(), "batch_size": args.batch_size,
        "max_seq_length": args.max_seq_length, "loss": "MultipleNegativesRankingLoss(scale=20)",
        "train_tokens_per_s": {k: round(v) for k, v in med["train"].items()},
        "train_speedup": round(med["train"]["bertcli"] / med["train"]["sentence_transformers"], 2),
        "encode_tokens_per_s": {k: round(v) for k, v in med["encode"].items()},
        "encode_speedup": round(med["encode"]["bertcli"] / med["encode"]["sentence_transformers"], 2),
        "encode_max_abs_diff_before_training": check, "repeats": args.repeats, "steps": args.steps,
    }, indent=2))


if __name__ == "__main__":
    main()
