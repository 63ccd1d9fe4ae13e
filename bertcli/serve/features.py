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

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.core.fs import temporary_file
from bertcli.core.locks import run_lock
from bertcli.core.machine import use_threads
from bertcli.core.outputs import check_output_file, removing_on_signal
from bertcli.io import records, tables
from bertcli.io.text import LineOptions, check_encoding
from bertcli.model.finite import require_finite_outputs
from bertcli.tasks.encoder_heads import pool as pool_states
from bertcli.tasks.featurizer import Context, TextFeaturizer
from bertcli.tasks.heads import saved_head
from bertcli.tokenization.load import load_tokenizer

COMBINE = ("concat", "sum", "mean")
POOL = ("cls", "mean", "none")
NPY_HEADER = 128  # bytes reserved for the .npy header (magic, version, length, dict, padding)


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


# ------------------------------------------------------------------------------------ input
def iter_texts(path: Path, text_column: str, id_column: str | None,
               encoding: str | None = None) -> Iterator[tuple[str, str]]:
    """(id, text) pairs, streamed, read as predict and fine-tuning read them (bertcli.io)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"input file {path} does not exist", fix="give --input a .txt, .csv, .tsv, .jsonl or .parquet file")
    table = tables.open_table(path, LineOptions(encoding=check_encoding(encoding)))
    if tables.file_format(path) == "text":
        text_column, id_column = "text", None          # a .txt line is the text; its ids are line numbers
    if table.header is not None:      # a header: name a missing column at once
        names = table.names()
        for name in [text_column] + ([id_column] if id_column else []):
            if name not in names:
                raise UserError(f"no column {name!r}", where=table.header,
                                fix=f"the columns are: {', '.join(names)}; choose with --text-column / --id-column")
    return ((records.optional_text(rec, id_column, where, str(n)), records.text(rec, text_column, where, "--text-column"))
            for n, (where, rec) in enumerate(table.records()))


def batches(items: Iterator, size: int) -> Iterator[list]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ------------------------------------------------------------------------------------ model
def hidden_states(model, input_ids, attention_mask, token_type_ids):
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


# ------------------------------------------------------------------------------------ output
class NpyWriter:
    """Rows of float32 appended to a .npy file whose header is written on close."""

    def __init__(self, path: Path, width: int):
        self.path, self.width, self.rows = path, width, 0
        self.tmp = temporary_file(path)
        self.f = open(self.tmp, "wb")
        self.f.write(b"\0" * NPY_HEADER)

    def write(self, array: np.ndarray) -> None:
        self.f.write(np.ascontiguousarray(array, dtype="<f4").tobytes())
        self.rows += len(array)

    def close(self) -> None:
        head = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({self.rows}, {self.width}), }}"
        head = head.ljust(NPY_HEADER - 10 - 1) + "\n"
        self.f.seek(0)
        self.f.write(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode("latin1"))
        self.f.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)


def output_files(out: Path) -> list[Path]:
    """The files a features run writes: `out`, and for .npy its ids beside it."""
    out = Path(out)
    return [out, out.with_suffix(".ids.tsv")] if out.suffix == ".npy" else [out]


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


@contextlib.contextmanager
def writing_vectors(out: Path, input: Path, checkpoint: Path, force: bool, what: str, text_column: str,
                    id_column: str | None, encoding: str | None) -> Iterator[Iterator[tuple[str, str]]]:
    """The (id, text) records of `input`, for writing one vector file (`features`, `embed`): the
    output files checked before any work (.parquet or .npy, not an input, not inside the
    checkpoint, an existing one only with --force) and again holding their lock; Ctrl-C or SIGTERM
    remove the temporaries."""
    if out.suffix not in (".parquet", ".npy"):
        raise UserError(f"--out {out}: write .parquet or .npy", fix=f"e.g. --out {what}.parquet")

    def check():
        for path in output_files(out):
            check_output_file(path, force, [input], [checkpoint], "--out", f"the {what}")

    check()
    texts = iter_texts(input, text_column, id_column, encoding)      # the input's header checked before any work
    with run_lock(out), removing_on_signal(*[temporary_file(p) for p in output_files(out)]):
        check()                                        # again, holding the lock
        yield texts


def _extract(checkpoint, input, texts, out, layers, combine, pool, max_seq_length, batch_size, device,
             threads=None) -> dict:
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

    writer = ids_file = None
    if out.suffix == ".npy":
        writer = NpyWriter(out, width)
        ids_path = out.with_suffix(".ids.tsv")
        ids_tmp = temporary_file(ids_path)
        ids_file = open(ids_tmp, "w", encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        kind = pa.list_(pa.float32()) if pool != "none" else pa.list_(pa.list_(pa.float32()))
        fields = [("id", pa.string())] + ([("tokens", pa.list_(pa.string()))] if pool == "none" else []) + [("features", kind)]
        schema = pa.schema(fields)
        tmp = temporary_file(out)
        pw = pq.ParquetWriter(tmp, schema)
    n_texts = n_rows = 0
    try:
        with console.progress(f"features of {Path(input).name}", total=None) as bar, torch.no_grad():
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
                rows_np = None if pool == "none" else pool_states(feats, mask.to(dev), pool).cpu().numpy()
                feats_np = feats.cpu().numpy() if pool == "none" else None
                if writer is not None:
                    assert ids_file is not None, "opened together with writer"
                    for b, (text_id, _) in enumerate(chunk):
                        if feats_np is not None:                              # pool == "none"
                            n = len(encs[b].ids)
                            writer.write(feats_np[b, :n])
                            ids_file.writelines(f"{text_id}\t{p}\t{t}\n" for p, t in enumerate(encs[b].tokens))
                            n_rows += n
                        else:
                            ids_file.write(f"{text_id}\n")
                    if rows_np is not None:                                   # pool != "none"
                        writer.write(rows_np)
                        n_rows += len(rows_np)
                else:
                    cols = {"id": [i for i, _ in chunk]}
                    if feats_np is not None:                                  # pool == "none"
                        cols["tokens"] = [e.tokens for e in encs]
                        cols["features"] = [feats_np[b, :len(e.ids)].tolist() for b, e in enumerate(encs)]
                    else:
                        assert rows_np is not None, "pooled rows exist whenever pool != none"
                        cols["features"] = list(rows_np)
                    pw.write_table(pa.table(cols, schema=schema))
                    n_rows += len(chunk)
                n_texts += len(chunk)
                bar.advance(len(chunk))
    except BaseException:
        if writer is not None:
            assert ids_file is not None, "opened together with writer"
            writer.abort()
            ids_file.close()
            ids_tmp.unlink(missing_ok=True)
        else:
            pw.close()
            tmp.unlink(missing_ok=True)
        raise
    if writer is not None:
        assert ids_file is not None, "opened together with writer"
        writer.close()
        ids_file.close()
        os.replace(ids_tmp, ids_path)
    else:
        pw.close()
        os.replace(tmp, out)
    summary = {"texts": n_texts, "rows": n_rows, "width": width, "layers": chosen, "combine": combine, "pool": pool,
               "out": str(out)}
    console.summary(f"features: {out}", [(k, v) for k, v in summary.items() if k != "out"])
    return summary
