"""`bertcli features`: BERT's feature-based use (paper section 5.3): the hidden states of chosen
layers, combined, per token or pooled per text, for a downstream model that keeps the encoder
fixed (the paper's best: the last four layers concatenated).

Layers are numbered as transformers' `hidden_states`: 0 is the embedding output (after ALBERT's
E -> H projection), 1..L the layers' outputs, negative numbers count from the end (-1 = the
last layer, = last_hidden_state). Combine: `concat` ([.., k*H]), `sum` or `mean` ([.., H]).
Pool: `cls` (the first token, [CLS] / <s>), `mean` (over the text's real tokens, special tokens
included, padding never), `none` (one vector per token, special tokens included, with the token
strings).

Input: .txt (one text per line), .csv, .tsv, .jsonl, .parquet (`--text-column`, `--id-column`;
ids default to the row number). Output:
    .parquet   pooled: columns id, features (list of float32); per token: id, tokens (list of
               strings), features (list of lists)
    .npy       float32 [texts, D] pooled, or [all tokens, D] per token; beside it
               `<name>.ids.tsv`: one line per row of the array (`id`, or `id<TAB>position<TAB>token`)
Memory stays bounded: texts are read, encoded and written a batch at a time (the .npy header is
written last, in a slot reserved at the start), so the input never has to fit in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.core.machine import use_threads
from bertcli.model.finite import require_finite_outputs
from bertcli.serve.vectors import batches, vector_writer, writing_vectors
from bertcli.tasks.encoder_heads import pool_states
from bertcli.tasks.featurizer import Context, TextFeaturizer
from bertcli.tasks.heads import saved_head
from bertcli.tokenization.load import load_tokenizer

if TYPE_CHECKING:  # torch loads where a model runs
    from torch import Tensor

    from bertcli.model.checkpoint import Model

COMBINE = ("concat", "sum", "mean")
POOL = ("cls", "mean", "none")


def parse_layers(spec: str, num_layers: int) -> list[int]:
    """`-1,-2,-3,-4` -> indices into the L + 1 hidden states."""
    out = []
    for part in spec.split(","):
        try:
            i = int(part.strip())
        except ValueError:
            raise UserError(f"--layers {spec!r}: {part.strip()!r} is not a layer number",
                            fix="comma-separated integers, e.g. -1,-2,-3,-4 (0 = embeddings)")
        if not -(num_layers + 1) <= i <= num_layers:
            raise UserError(f"--layers {spec!r}: layer {i} does not exist",
                            fix=f"the model has layers 0..{num_layers} (or -1..-{num_layers + 1})")
        out.append(i % (num_layers + 1))
    return out


# ------------------------------------------------------------------------------------ model
def hidden_states(model: Model, input_ids: Tensor, attention_mask: Tensor,
                  token_type_ids: Tensor | None) -> list[Tensor]:
    """[L + 1] hidden states, each [B, T, H] (zeros at padding), as transformers numbers them.
    Read through forward hooks on the encoder's sublayers (every layer ends with its
    feed-forward block; ALBERT's shared blocks fire once per layer that runs them)."""
    enc = model.encoder
    seen = []
    first = enc.proj if enc.proj is not None else enc.embeddings
    hooks = [first.register_forward_hook(lambda m, i, o: seen.append(o))]
    hooks += [f.register_forward_hook(lambda m, i, o: seen.append(o)) for f in enc.ffn]
    try:
        out = enc(input_ids, attention_mask, token_type_ids)
    finally:
        for h in hooks:
            h.remove()
    seen[-1] = out.hidden                      # pre-LN: the final norm belongs to the last layer
    return [out.layout.padded(x) for x in seen]


def combine_layers(states: list, layers: list[int], how: str):
    import torch

    picked = [states[i] for i in layers]
    if how == "concat":
        return torch.cat(picked, dim=-1)
    total = torch.stack(picked).sum(0)
    return total / len(picked) if how == "mean" else total


def extract_features(checkpoint: Path, input: Path, out: Path, layers: str = "-1", combine: str = "concat",
                     pool: str = "cls", text_column: str = "text", id_column: str | None = None,
                     max_seq_length: int = 128, batch_size: int = 64, device: str = "auto",
                     encoding: str | None = None, force: bool = False, threads: int | None = None) -> dict:
    """Write the features of every text of `input` to `out`; returns a summary. The output files
    are checked before any work (not an input, not inside the checkpoint, an existing one only
    with --force), written under temporary names while holding their lock, renamed when
    complete; Ctrl-C or SIGTERM remove the temporaries."""
    out = Path(out)
    with writing_vectors(out, input, checkpoint, force, "features", text_column, id_column, encoding) as texts:
        return _extract(checkpoint, input, texts, out, layers, combine, pool, max_seq_length, batch_size, device,
                        threads)


def _extract(checkpoint: Path, input: Path, texts: Iterator[tuple[str, str]], out: Path, layers: str, combine: str,
             pool: str, max_seq_length: int, batch_size: int, device: str, threads: int | None = None) -> dict:
    import torch

    from bertcli.model.checkpoint import load_checkpoint
    from bertcli.train.precision import resolve_device

    if combine not in COMBINE:
        raise UserError(f"--combine {combine!r} is not one of {', '.join(COMBINE)}")
    if pool not in POOL:
        raise UserError(f"--pooling {pool!r} is not one of {', '.join(POOL)}")
    dev = resolve_device(device, where="--device")
    use_threads(threads, "--threads", dev)          # None: the free cores (bertcli.core.machine)
    tok = load_tokenizer(checkpoint)
    model, _ = load_checkpoint(checkpoint, head=saved_head(checkpoint))
    model = model.to(dev).eval()
    c = model.config
    chosen = parse_layers(layers, c.num_hidden_layers)
    width = c.hidden_size * (len(chosen) if combine == "concat" else 1)
    usable = c.max_position_embeddings - c.position_offset
    # predict's `features` encoding: the texts truncated alike, special tokens included
    encoder = TextFeaturizer(Context(tok, None, min(max_seq_length, usable))).tokenizer
    zero_types = c.type_vocab_size < 2
    per_token = pool == "none"
    n_texts = 0
    with vector_writer(out, width, "features", per_token) as writer, \
            console.progress(f"features of {Path(input).name}", total=None) as bar, torch.no_grad():
        for chunk in batches(texts, batch_size):
            encs = encoder.encode_batch([t for _, t in chunk])
            T = max(len(e.ids) for e in encs)
            ids = torch.full((len(encs), T), tok.pad_id, dtype=torch.long)
            mask = torch.zeros((len(encs), T), dtype=torch.long)
            types = torch.zeros((len(encs), T), dtype=torch.long)
            for b, e in enumerate(encs):
                ids[b, :len(e.ids)] = torch.tensor(e.ids)
                mask[b, :len(e.ids)] = 1
                if not zero_types:
                    types[b, :len(e.ids)] = torch.tensor(e.type_ids)
            states = hidden_states(model, ids.to(dev), mask.to(dev), types.to(dev))
            feats = combine_layers(states, chosen, combine).float()            # [B, T, D]
            require_finite_outputs(feats[mask.to(dev).bool()], checkpoint, "hidden states")   # real tokens
            text_ids = [i for i, _ in chunk]
            if per_token:                                  # each text's real tokens: [n_b, D]
                feats_np = feats.cpu().numpy()
                writer.write(text_ids, [feats_np[b, :len(e.ids)] for b, e in enumerate(encs)], [e.tokens for e in encs])
            else:                                          # [B, D]
                writer.write(text_ids, pool_states(feats, mask.to(dev), pool).cpu().numpy())
            n_texts += len(chunk)
            bar.advance(len(chunk))
    summary = {"texts": n_texts, "rows": writer.rows, "width": width, "layers": chosen, "combine": combine, "pool": pool,
               "out": str(out)}
    console.summary(f"features: {out}", [(k, v) for k, v in summary.items() if k != "out"])
    return summary
