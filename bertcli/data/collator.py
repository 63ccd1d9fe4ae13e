"""Batches for the trainer: pad to a multiple of 8, attention mask, sparse MLM targets, and
dynamic masking (a fresh mask per epoch, reproducible from (seed, epoch, row index)).

Output (see bertcli/data/__init__.py):
    input_ids, attention_mask, token_type_ids  LongTensor [B, T]
    mlm_positions  LongTensor [N]  flat indices into input_ids.view(-1), ascending
    mlm_labels     LongTensor [N]  original ids there
    pair_labels    LongTensor [B]  when the rows carry pair_label
    rtd_uniform    DoubleTensor [N] with rtd=True: one uniform per masked position, from the row's
                   (seed, RTD, epoch, index) stream; the generator's sample there is its inverse CDF
With rtd=True (train.objective: rtd) masks follow ELECTRA's pretrain_helpers.mask: 85% [MASK],
15% the original token, no random token, whatever data.mask_replace_prob / random_replace_prob say.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
import torch

from bertcli.data.masking import MaskSpec, replace, select
from bertcli.data.rng import DYNAMIC, RTD, KeyedRng

if TYPE_CHECKING:
    from bertcli.config.sections import DataConfig
    from bertcli.tokenization.load import TokenizerInfo


class PretrainCollator:
    def __init__(self, tok: TokenizerInfo, cfg: DataConfig, seed: int, pad_to_multiple_of: int = 8,
                 rtd: bool = False):
        self.spec = MaskSpec.from_config(tok, cfg)
        self.rtd = rtd
        if rtd:
            self.spec = dataclasses.replace(self.spec, mask_prob=0.85, random_prob=0.0)
        self.pad_id = int(tok.pad_id)
        self.dynamic = cfg.masking == "dynamic"
        self.seed = int(seed)
        self.multiple = max(1, int(pad_to_multiple_of))
        self._rng = KeyedRng()

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        B = len(rows)
        lens = [len(r["input_ids"]) for r in rows]
        T = -(-max(lens) // self.multiple) * self.multiple
        ids = np.full((B, T), self.pad_id, dtype=np.int64)
        types = np.zeros((B, T), dtype=np.int64)
        attn = np.zeros((B, T), dtype=np.int64)
        for b, (r, n) in enumerate(zip(rows, lens)):
            ids[b, :n] = r["input_ids"]
            attn[b, :n] = 1
            if "token_type_ids" in r:
                types[b, :n] = r["token_type_ids"]
        uniform = None
        if self.dynamic:
            positions, labels = self._mask(rows, ids, lens, T)
            if self.rtd:
                counts = np.bincount(positions // T, minlength=B)
                uniform = np.concatenate([self._rng.seed(self.seed, RTD, r["epoch"], r["index"]).random(k)
                                          for r, k in zip(rows, counts)])
        elif self.rtd:
            raise ValueError("train.objective rtd needs data.masking: dynamic")
        else:
            positions, labels = self._stored(rows, T)
        out = {
            "input_ids": torch.from_numpy(ids),
            "attention_mask": torch.from_numpy(attn),
            "token_type_ids": torch.from_numpy(types),
            "mlm_positions": torch.from_numpy(positions),
            "mlm_labels": torch.from_numpy(labels),
        }
        if uniform is not None:
            out["rtd_uniform"] = torch.from_numpy(uniform)
        if "pair_label" in rows[0]:
            out["pair_labels"] = torch.tensor([int(r["pair_label"]) for r in rows], dtype=torch.long)
        return out

    def _mask(self, rows, ids, lens, T) -> tuple[np.ndarray, np.ndarray]:
        """Dynamic masking: per-row selection from the row's own stream, then one vectorized
        80/10/10 replacement over the whole batch."""
        spec = self.spec
        pos_parts, draw_parts = [], []
        for b, (r, n) in enumerate(zip(rows, lens)):
            if "masked_positions" in r:
                raise ValueError("rows are already masked (static data) but data.masking is dynamic")
            try:
                key = (self.seed, DYNAMIC, r["epoch"], r["index"])
            except KeyError:
                raise ValueError("dynamic masking needs rows with 'epoch' and 'index' (use PretrainDataset)") from None
            starts = r.get("word_starts")
            if spec.whole_word and starts is None:
                raise ValueError("whole-word masking needs the word_starts column: rebuild the data "
                                 "with data.whole_word: true")
            pos, draws = select(ids[b, :n], self._rng.seed(*key), spec, starts)
            pos_parts.append(pos.astype(np.int64) + b * T)
            draw_parts.append(draws)
        positions = np.concatenate(pos_parts)
        # ids.reshape(-1) is a view: replace() writes the replacements into ids
        labels = replace(ids.reshape(-1), positions, np.concatenate(draw_parts), spec)
        return positions, labels.astype(np.int64)

    @staticmethod
    def _stored(rows, T) -> tuple[np.ndarray, np.ndarray]:
        """Static masking: the builder stored the positions and the original ids."""
        try:
            pos = [np.asarray(r["masked_positions"], dtype=np.int64) + b * T for b, r in enumerate(rows)]
            lab = [np.asarray(r["masked_ids"], dtype=np.int64) for r in rows]
        except KeyError:
            raise ValueError("rows carry no masked_positions: the data was built with dynamic "
                             "masking, set data.masking: dynamic") from None
        return np.concatenate(pos), np.concatenate(lab)
