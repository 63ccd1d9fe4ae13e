"""Small stand-ins for the model, the dataset and the collator, so the trainer's own logic
(accumulation, resume, DDP) is tested in-process in well under a second per run."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

VOCAB, PAD = 50, 0


@dataclass
class Out:
    mlm_logits: torch.Tensor
    pair_logits: torch.Tensor | None


class TinyModel(nn.Module):
    """Embedding -> linear+gelu -> LayerNorm -> dropout; MLM decoder tied to the embedding."""

    def __init__(self, pair: bool = True, dropout: float = 0.1):
        super().__init__()
        self.config = SimpleNamespace(vocab_size=VOCAB)
        self.emb = nn.Embedding(VOCAB, 16)
        self.seg = nn.Embedding(2, 16)
        self.ff = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)
        self.drop = nn.Dropout(dropout)
        self.bias = nn.Parameter(torch.zeros(VOCAB))
        self.pair = nn.Linear(16, 2) if pair else None

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mlm_positions=None):
        x = self.emb(input_ids) + (self.seg(token_type_ids) if token_type_ids is not None else 0)
        h = self.drop(self.norm(x + torch.nn.functional.gelu(self.ff(x))))            # [B, T, 16]
        flat = h.reshape(-1, h.shape[-1])
        mlm = flat[mlm_positions] @ self.emb.weight.T + self.bias                     # [N, V]
        pair = self.pair(h[:, 0]) if self.pair is not None else None
        return Out(mlm, pair)


class RowDataset(torch.utils.data.Dataset):
    """Row i: a deterministic pseudo-random sequence of 6..14 tokens whose masked positions are
    predictable from their neighbours (token = previous + 1 mod V), so the model can learn."""

    def __init__(self, n: int, offset: int = 0):
        self.n, self.offset = n, offset

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        epoch, index = key
        rng = np.random.default_rng(index + self.offset)
        length = int(rng.integers(6, 15))
        start = int(rng.integers(5, VOCAB))
        ids = [(start + k) % (VOCAB - 5) + 5 for k in range(length)]
        positions = sorted(rng.choice(np.arange(1, length), size=2, replace=False).tolist())
        masked = [ids[p] for p in positions]
        for p in positions:
            ids[p] = 4
        return {"input_ids": ids, "token_type_ids": [0] * (length // 2) + [1] * (length - length // 2),
                "pair_label": int(start % 2), "masked_positions": positions, "masked_ids": masked,
                "epoch": epoch, "index": index}


def collate(rows):
    T = -(-max(len(r["input_ids"]) for r in rows) // 8) * 8
    B = len(rows)
    ids = torch.full((B, T), PAD, dtype=torch.long)
    types = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.long)
    pos, lab = [], []
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, :n] = torch.tensor(r["input_ids"])
        types[i, :n] = torch.tensor(r["token_type_ids"])
        mask[i, :n] = 1
        pos += [i * T + p for p in r["masked_positions"]]
        lab += r["masked_ids"]
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
            "mlm_positions": torch.tensor(pos), "mlm_labels": torch.tensor(lab),
            "pair_labels": torch.tensor([r["pair_label"] for r in rows])}


def hf_save_stub(model, directory):
    """The Hugging Face part of a stand-in checkpoint: only a config.json."""
    (directory / "config.json").write_text("{}")
