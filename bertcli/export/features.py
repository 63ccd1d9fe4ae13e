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

import csv
import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from bertcli import console
from bertcli.errors import UserError

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
def iter_texts(path: Path, text_column: str, id_column: str | None) -> Iterator[tuple[str, str]]:
    """(id, text) pairs, streamed."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"input file {path} does not exist", fix="give --input a .txt, .csv, .tsv, .jsonl or .parquet file")
    suffix = path.suffix.lower()

    def pick(names: list[str], where: str):
        for name in [text_column] + ([id_column] if id_column else []):
            if name not in names:
                raise UserError(f"no column {name!r}", where=where,
                                fix=f"the columns are: {', '.join(names)}; choose with --text-column / --id-column")

    if suffix == ".parquet":
        import pyarrow.parquet as pq

        f = pq.ParquetFile(path)
        pick(f.schema_arrow.names, str(path))
        n = 0
        for batch in f.iter_batches(batch_size=1024, columns=[text_column] + ([id_column] if id_column else [])):
            texts = batch.column(text_column).to_pylist()
            ids = batch.column(id_column).to_pylist() if id_column else range(n, n + len(texts))
            n += len(texts)
            yield from ((str(i), str(t)) for i, t in zip(ids, texts))
        return
    with open(path, encoding="utf-8-sig", newline="" if suffix in (".csv", ".tsv") else None) as f:
        if suffix in (".csv", ".tsv"):
            reader = csv.reader(f, delimiter="," if suffix == ".csv" else "\t",
                                quoting=csv.QUOTE_MINIMAL if suffix == ".csv" else csv.QUOTE_NONE)
            header = next(reader, [])
            pick(header, f"{path}:1")
            t, k = header.index(text_column), header.index(id_column) if id_column else None
            for n, row in enumerate(r for r in reader if r):
                if len(row) != len(header):
                    raise UserError(f"{len(row)} fields where the header has {len(header)}", where=f"{path}:{reader.line_num}")
                yield (row[k] if k is not None else str(n)), row[t]
        elif suffix in (".jsonl", ".json"):
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"not a JSON object: {e.msg}", where=f"{path}:{lineno}")
                if not isinstance(row, dict):
                    raise UserError("not a JSON object", where=f"{path}:{lineno}")
                pick(list(row), f"{path}:{lineno}")
                yield str(row[id_column]) if id_column else str(lineno - 1), str(row[text_column])
        else:                                   # plain text: one text per line
            for n, line in enumerate(f):
                yield str(n), line.rstrip("\n")


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
def saved_head(checkpoint: Path) -> str:
    """The head config.json's architecture names, so no other head is reported as fresh."""
    try:
        arch = " ".join(json.loads((Path(checkpoint) / "config.json").read_text(encoding="utf-8")).get("architectures") or [])
    except (OSError, ValueError, AttributeError):
        return "pretraining"                   # load_checkpoint reports what is wrong
    for suffix, head in (("ForTokenClassification", "token"), ("ForSequenceClassification", "classification"),
                         ("ForQuestionAnswering", "qa")):
        if suffix in arch:
            return head
    return "pretraining"


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
        self.tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
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


def extract_features(checkpoint: Path, input: Path, out: Path, layers: str = "-1", combine: str = "concat",
                     pool: str = "cls", text_column: str = "text", id_column: str | None = None,
                     max_seq_length: int = 128, batch_size: int = 64, device: str = "auto") -> dict:
    """Write the features of every text of `input` to `out`; returns a summary."""
    import torch

    from bertcli.paths import check_output_dir
    from bertcli.model import load_checkpoint
    from bertcli.tokenizer import load_tokenizer
    from bertcli.train.precision import resolve_device

    out = Path(out)
    if combine not in COMBINE:
        raise UserError(f"--combine {combine!r} is not one of {', '.join(COMBINE)}")
    if pool not in POOL:
        raise UserError(f"--pool {pool!r} is not one of {', '.join(POOL)}")
    if out.suffix not in (".parquet", ".npy"):
        raise UserError(f"--out {out}: write .parquet or .npy", fix="e.g. --out features.parquet")
    check_output_dir(out.parent if str(out.parent) else Path("."), "the output directory", "--out")
    dev = resolve_device(device, where="--device")
    tok = load_tokenizer(checkpoint)
    model, _ = load_checkpoint(checkpoint, head=saved_head(checkpoint))
    model = model.to(dev).eval()
    c = model.config
    chosen = parse_layers(layers, c.num_hidden_layers)
    width = c.hidden_size * (len(chosen) if combine == "concat" else 1)
    usable = c.max_position_embeddings - c.position_offset
    encoder = tok.tokenizer
    encoder.enable_truncation(max_length=min(max_seq_length, usable))
    zero_types = c.type_vocab_size < 2

    writer = ids_file = None
    if out.suffix == ".npy":
        writer = NpyWriter(out, width)
        ids_path = out.with_suffix(".ids.tsv")
        ids_tmp = ids_path.with_name(f".{ids_path.name}.tmp-{os.getpid()}")
        ids_file = open(ids_tmp, "w", encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        kind = pa.list_(pa.float32()) if pool != "none" else pa.list_(pa.list_(pa.float32()))
        fields = [("id", pa.string())] + ([("tokens", pa.list_(pa.string()))] if pool == "none" else []) + [("features", kind)]
        schema = pa.schema(fields)
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        pw = pq.ParquetWriter(tmp, schema)
    n_texts = n_rows = 0
    try:
        with console.progress(f"features of {Path(input).name}", total=None) as bar, torch.no_grad():
            for chunk in batches(iter_texts(input, text_column, id_column), batch_size):
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
                if pool == "cls":
                    rows = feats[:, 0]
                elif pool == "mean":
                    m = mask.to(dev).unsqueeze(-1).float()
                    rows = (feats * m).sum(1) / m.sum(1)
                rows_np = None if pool == "none" else rows.cpu().numpy()
                feats_np = feats.cpu().numpy() if pool == "none" else None
                if writer is not None:
                    for b, (text_id, _) in enumerate(chunk):
                        if pool == "none":
                            n = len(encs[b].ids)
                            writer.write(feats_np[b, :n])
                            ids_file.writelines(f"{text_id}\t{p}\t{t}\n" for p, t in enumerate(encs[b].tokens))
                            n_rows += n
                        else:
                            ids_file.write(f"{text_id}\n")
                    if pool != "none":
                        writer.write(rows_np)
                        n_rows += len(rows_np)
                else:
                    cols = {"id": [i for i, _ in chunk]}
                    if pool == "none":
                        cols["tokens"] = [e.tokens for e in encs]
                        cols["features"] = [feats_np[b, :len(e.ids)].tolist() for b, e in enumerate(encs)]
                    else:
                        cols["features"] = list(rows_np)
                    pw.write_table(pa.table(cols, schema=schema))
                    n_rows += len(chunk)
                n_texts += len(chunk)
                bar.advance(len(chunk))
    except BaseException:
        if writer is not None:
            writer.abort()
            ids_file.close()
            ids_tmp.unlink(missing_ok=True)
        else:
            pw.close()
            tmp.unlink(missing_ok=True)
        raise
    if writer is not None:
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
