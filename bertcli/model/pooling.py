"""Sentence-embedding pooling: the token states of the last layer -> one vector per text.

Modes (all read the last layer's hidden states only, as sentence-transformers' Pooling module
does, so every mode round-trips through `1_Pooling/config.json` and a saved model gives the same
vectors in sentence-transformers):
    mean              mean over the real tokens (special tokens included, padding never): the
                      default, sentence-transformers' `pooling_mode_mean_tokens`
    last-layer-mean   the issue's name for `mean` (accepted, stored as `mean`): the mean of the
                      *last layer*, not SimCSE's "first-last-avg" of two layers, which
                      sentence-transformers cannot express
    cls               the first token ([CLS] / <s>), `pooling_mode_cls_token`
    max               the elementwise max over the real tokens, `pooling_mode_max_tokens`
`normalize` then scales each vector to unit L2 norm (sentence-transformers' `2_Normalize`
module): dot products become cosine similarities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bertcli.core.errors import UserError

if TYPE_CHECKING:  # torch is imported where pooling runs, so reading a directory's pooling stays light
    from torch import Tensor

MODES = ("mean", "cls", "max")
ALIASES = {"last-layer-mean": "mean"}
# sentence-transformers' legacy boolean keys (what 2.x-5.x write; 6.x reads them too)
LEGACY_KEYS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens"}
# modes sentence-transformers has and bertcli does not implement (refused when read)
OTHER_LEGACY_KEYS = {"pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}


def parse_mode(mode: str, where: str = "--pooling") -> str:
    """`mode` as one of MODES (aliases resolved); a UserError for anything else."""
    mode = ALIASES.get(mode, mode)
    if mode not in MODES:
        raise UserError(f"pooling {mode!r} is not one of {', '.join(MODES + tuple(ALIASES))}", where=where,
                        fix="use mean (the default), cls or max")
    return mode


def pool(hidden: Tensor, attention_mask: Tensor | None, mode: str = "mean", normalize: bool = False) -> Tensor:
    """hidden [B, T, H] (values at padding are ignored), attention_mask [B, T] (1 = real token;
    None = no padding) -> [B, H]."""
    import torch
    import torch.nn.functional as F

    mode = ALIASES.get(mode, mode)
    if mode == "cls":
        out = hidden[:, 0]                                               # [B, H]
    elif attention_mask is None:
        out = hidden.mean(1) if mode == "mean" else hidden.amax(1)
    else:
        m = attention_mask[:, :, None].to(torch.bool)                    # [B, T, 1]
        if mode == "mean":
            w = m.to(hidden.dtype)
            # the clamp keeps an all-padding row at 0 instead of NaN, as sentence-transformers
            out = (hidden * w).sum(1) / w.sum(1).clamp(min=1e-9)
        elif mode == "max":
            out = hidden.masked_fill(~m, torch.finfo(hidden.dtype).min).amax(1)
        else:
            raise ValueError(f"unknown pooling mode {mode!r}")
    return F.normalize(out, p=2, dim=-1) if normalize else out


@dataclass(frozen=True)
class Pooling:
    """How a text's token states become its embedding."""

    mode: str = "mean"
    """mean (over real tokens), cls (first token) or max; last-layer-mean is read as mean."""
    normalize: bool = False
    """Scale each embedding to unit L2 norm (sentence-transformers' 2_Normalize)."""
    dim: int = 0
    """Width of the embedding (the encoder's hidden size): word_embedding_dimension."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", parse_mode(self.mode))

    def __call__(self, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
        return pool(hidden, attention_mask, self.mode, self.normalize)

    def to_st_config(self) -> dict[str, Any]:
        """1_Pooling/config.json in sentence-transformers' legacy keys, which every version reads."""
        d: dict[str, Any] = {"word_embedding_dimension": self.dim}
        d.update({key: self.mode == mode for mode, key in LEGACY_KEYS.items()})
        d.update({key: False for key in OTHER_LEGACY_KEYS})
        d["include_prompt"] = True
        return d

    @classmethod
    def from_st_config(cls, d: object, where: str, normalize: bool = False) -> Pooling:
        """A 1_Pooling/config.json: the legacy boolean keys or 6.x's `pooling_mode` string,
        with `word_embedding_dimension` / `embedding_dimension`. Exactly one supported mode."""
        if not isinstance(d, dict):
            raise UserError("the pooling config must hold a JSON object", where=where)
        fix = "a sentence-transformers Pooling config with one of pooling_mode_mean_tokens, " \
              "pooling_mode_cls_token, pooling_mode_max_tokens true (or \"pooling_mode\": \"mean\")"
        dim_key = next((k for k in ("word_embedding_dimension", "embedding_dimension") if k in d), None)
        if dim_key is None:
            raise UserError("no word_embedding_dimension (or embedding_dimension) key", where=where, fix=fix)
        dim = d[dim_key]
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise UserError(f"{dim_key} {dim!r} is not a positive integer", where=where, fix=fix)
        if "pooling_mode" in d:
            mode = d["pooling_mode"]
            modes = [mode] if isinstance(mode, str) else mode
            if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
                raise UserError(f"pooling_mode {mode!r} is not a mode name", where=where, fix=fix)
        else:
            keys = {**{v: k for k, v in LEGACY_KEYS.items()}, **OTHER_LEGACY_KEYS}
            for key in keys:
                if key in d and not isinstance(d[key], bool):
                    raise UserError(f"{key} {d[key]!r} is not true or false", where=where, fix=fix)
            modes = [keys[k] for k in keys if d.get(k) is True]
        if len(modes) != 1:
            raise UserError(f"{'no' if not modes else 'several'} pooling modes ({', '.join(modes) or 'none true'}): "
                            "bertcli pools with exactly one", where=where, fix=fix)
        if modes[0] not in MODES:
            raise UserError(f"pooling mode {modes[0]!r} is not supported", where=where,
                            fix="bertcli implements " + ", ".join(MODES))
        if d.get("include_prompt", True) is not True:
            raise UserError("include_prompt false (prompt tokens left out of pooling) is not supported",
                            where=where, fix="set include_prompt to true, or leave the key out")
        return cls(modes[0], normalize, dim)
