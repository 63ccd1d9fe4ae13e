"""Pretraining data: sentence pairs (NSP / SOP) or packed sequences, static or dynamic masking.

CONTRACT between the data builder, the collator and the trainer
---------------------------------------------------------------
Built data directory (`bertcli build-data`, see docs/design.md): a `datasets.DatasetDict` saved with
`save_to_disk`, splits "train" and "validation", unpadded rows with columns
    input_ids: list[int]          [CLS] A [SEP] B [SEP] (family's special tokens)
    token_type_ids: list[int]     0 for A (and its [CLS]/[SEP]), 1 for B
    pair_label: int               NSP 0 = B continues A, 1 = random; SOP 0 = in order, 1 = swapped
                                  (absent for objective none)
    masked_positions: list[int]   static masking only: selected positions (ascending)
    masked_ids: list[int]         static masking only: original ids there (input_ids already
                                  carries the 80/10/10 replacements)
    word_starts: list[int]        dynamic whole-word / n-gram masking only: 1 where a word begins
plus build_info.json with counts.

Trainer-facing API:
    load_data(path) -> datasets.DatasetDict
    PretrainDataset(split)             a torch Dataset; item (epoch, index) -> row dict with the
                                       columns above plus "epoch" and "index"
    PretrainCollator(tok: TokenizerInfo, cfg: DataConfig, seed: int, pad_to_multiple_of=8)
        __call__(rows) -> dict of tensors:
            input_ids       LongTensor [B, T]   T = longest row rounded up to a multiple of 8
            attention_mask  LongTensor [B, T]   1 = real token, 0 = padding
            token_type_ids  LongTensor [B, T]
            mlm_positions   LongTensor [N]      flat indices into input_ids.view(-1), ascending
            mlm_labels      LongTensor [N]      original ids at those positions
            pair_labels     LongTensor [B]      only when rows carry pair_label
        Dynamic masking draws from an RNG seeded by (seed, epoch, index) of each row, so the
        same row in the same epoch always gets the same mask (exact resume).

Also: run_build_data(recipe, force) / ensure_data(recipe) -> StageResult (the stage; path =
data_dir(recipe)). Stored dtypes: int32 ids and positions, int8 token types, labels and word
starts. Rows are stored in corpus order (document, then copy): the trainer shuffles them.
"""

from __future__ import annotations

import importlib

# Exported lazily: importing bertcli.data must not import torch or datasets.
_EXPORTS = {
    "load_data": "bertcli.data.dataset",
    "PretrainDataset": "bertcli.data.dataset",
    "PretrainCollator": "bertcli.data.collator",
    "run_build_data": "bertcli.data.build",
    "ensure_data": "bertcli.data.build",
    "data_dir": "bertcli.data.build",
    "MaskSpec": "bertcli.data.masking",
    "mask_row": "bertcli.data.masking",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'bertcli.data' has no attribute {name!r}")
