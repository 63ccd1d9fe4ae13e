"""Can a small discriminator tell replaced tokens on this corpus at all? A probe behind the RTD
measurement (docs/guide.md, "Measured: RTD against MLM against random init"): it trains only a
discriminator on uniformly random replacements (no generator: an easier task than ELECTRA's),
bertcli's and transformers' ElectraForPreTraining of the same shape side by side, on the same
batches, and prints their BCE and accuracy every 100 steps as JSON lines.

    OMP_NUM_THREADS=1 python scripts/probe_rtd.py --tokenizer runs/bench-rtd/cache/tokenizer-* \
        --corpus runs/bench-rtd/data/tweets.txt --steps 400

If both stay near the base rate (accuracy = 1 - replaced share), the objective has too little
signal at this size and step count, whatever the implementation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F


def rows_of(tokenizer_dir: Path, corpus: Path, length: int, limit: int) -> tuple[torch.Tensor, dict]:
    """[N, length] rows of the corpus's pieces, packed, each [CLS] ... [SEP]; the special ids."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    lines = [t for t in corpus.read_text(encoding="utf-8").splitlines() if t.strip()][:limit]
    pieces = [i for e in tok.encode_batch(lines) for i in e.ids[1:-1]]
    body = length - 2
    flat = torch.tensor(pieces[: len(pieces) // body * body]).view(-1, body)       # [N, T-2]
    special = {k: tok.token_to_id(k) for k in ("[CLS]", "[SEP]")}
    cls = torch.full((len(flat), 1), special["[CLS]"])
    sep = torch.full((len(flat), 1), special["[SEP]"])
    return torch.cat([cls, flat, sep], 1), {"vocab": tok.get_vocab_size(), **special}


def models(vocab: int, hidden: int, layers: int, length: int, seed: int) -> dict[str, torch.nn.Module]:
    """bertcli's Discriminator and transformers' ElectraForPreTraining, same shape, dropout 0."""
    import transformers

    from bertcli.config.model import encoder_config
    from bertcli.config.sections import ModelConfig
    from bertcli.model.electra import Discriminator

    heads = max(1, hidden // 64)
    section = ModelConfig(family="bert", hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                          intermediate_size=4 * hidden, max_position_embeddings=length,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(seed)
    ours = Discriminator(encoder_config(section, vocab, 0).replace(layout="electra"))
    torch.manual_seed(seed)
    theirs = transformers.ElectraForPreTraining(transformers.ElectraConfig(
        vocab_size=vocab, embedding_size=hidden, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=4 * hidden, max_position_embeddings=length,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    return {"bertcli": ours, "transformers": theirs}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", type=Path, required=True, help="a tokenizer stage directory (tokenizer.json)")
    p.add_argument("--corpus", type=Path, required=True, help="a text file, one document per line")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lines", type=int, default=20000, help="corpus lines read")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rows, ids = rows_of(args.tokenizer, args.corpus, args.length, args.lines)
    arms = models(ids["vocab"], args.hidden, args.layers, args.length, args.seed)
    opts = {k: torch.optim.AdamW(m.parameters(), lr=args.lr, weight_decay=0.01) for k, m in arms.items()}
    g = torch.Generator().manual_seed(args.seed)
    for step in range(args.steps + 1):
        batch = rows[torch.randint(0, len(rows), (args.batch,), generator=g)]                  # [B, T]
        chosen = torch.rand(batch.shape, generator=g) < 0.15
        chosen[:, 0] = chosen[:, -1] = False                                                   # not [CLS] / [SEP]
        fake = batch.clone()
        fake[chosen] = torch.randint(5, ids["vocab"], (int(chosen.sum()),), generator=g)
        replaced = (fake != batch).float()                                                     # [B, T]
        mask = torch.ones_like(batch)
        record: dict = {"step": step, "replaced": round(float(replaced.mean()), 4)}
        for name, m in arms.items():
            m.train()
            logits = m(fake, attention_mask=mask).logits if name == "transformers" else m(fake, mask)   # [B, T]
            loss = F.binary_cross_entropy_with_logits(logits, replaced)
            opts[name].zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opts[name].step()
            acc = ((logits.detach() > 0).float() == replaced).float().mean()
            record[name] = {"bce": round(float(loss.detach()), 4), "acc": round(float(acc), 4)}
        if step % 100 == 0:
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    sys.exit(main())
