"""Batched inference of a checkpoint (PyTorch) or an export bundle (ONNX Runtime): what
`bertcli predict` (bertcli.serve.predict) and `bertcli export`'s checks run.

    open_model(path, task=None) -> Predictor     a checkpoint directory, a bundle directory or a
                                                 model.onnx inside a bundle
    Predictor.predict(records) -> iterator of predictions, in input order

Both backends run the same traced module (heads.exportable), take the same padded batches and
feed the same featurizer -- the head kind's, the one fine-tuning used (bertcli.tasks.heads) --
so they give the same predictions, and those of fine-tuning. A fine-tuned checkpoint's settings
(window length and overlap, SQuAD's doc stride, n-best ...) come from the results.json beside it,
an export bundle's from export_info.json's `featurizer`; --max-seq-length and the command's options
go over them. Records are read, encoded and run in
chunks (length-sorted inside a chunk to cut padding), so memory stays bounded on any input size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertcli.config.checkpoint import read_config
from bertcli.core.errors import UserError
from bertcli.export.backend import OrtBackend, TorchBackend, pad_batch
from bertcli.export.graph import max_length as longest
from bertcli.export.heads import check_bundle_files, detect_kind, exportable, read_export_info, read_json
from bertcli.model.finite import require_finite_outputs
from bertcli.tasks.embed import sentence_max_length
from bertcli.tasks.featurizer import Context
from bertcli.tasks.heads import head_kind
from bertcli.tokenization.load import load_tokenizer

# results.json `hyperparameters` that decide windows and decoding (the rest is training's own)
FEATURIZER_KEYS = ("max_seq_length", "window_overlap", "doc_stride", "max_query_length", "n_best",
                   "max_answer_length", "null_threshold")

if TYPE_CHECKING:
    from bertcli.tokenization.load import TokenizerInfo

GRAPH_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class Predictor:
    task: str
    backend: TorchBackend | OrtBackend
    info: TokenizerInfo
    labels: tuple[str, ...] | None
    max_length: int
    directory: Path
    options: dict = field(default_factory=dict)
    batch_size: int = 32
    per_token: frozenset = frozenset()    # outputs [B, T, ...]: cut to each window's real tokens
    sort: bool = True                     # batch by length inside each window of records (see predict)

    def __post_init__(self) -> None:
        if not self.per_token:
            self.per_token = head_kind(self.task).per_token

    def context(self) -> Context:
        return Context(self.info, self.labels, self.max_length, self.options)

    def predict(self, records: Iterable[tuple[str, dict]], chunk: int | None = None,
                bar=None) -> Iterator[dict]:
        """One prediction per (where, record), in order. Records are taken `chunk` at a time
        (default 10 batches' worth, so memory is bounded); inside a chunk their windows are run
        shortest first, so each batch is padded only to similar lengths (the exported graph
        computes every padded position), and the results are put back in input order. The
        predictions are those of unsorted batching: every position sees only its own row's
        real tokens."""
        dec = head_kind(self.task).featurizer(self.context())
        chunk = chunk or self.batch_size * 10
        buffer: list[tuple[str, dict]] = []
        for item in records:
            buffer.append(item)
            if len(buffer) >= chunk:
                yield from self._chunk(dec, buffer, bar)
                buffer = []
        if buffer:
            yield from self._chunk(dec, buffer, bar)

    def _chunk(self, dec, items, bar) -> Iterator[dict]:
        # per record: its windows (a decoder that windows a whole chunk at once has encode_many)
        windows = dec.encode_many(items) if hasattr(dec, "encode_many") else [dec.encode(rec, where) for where, rec in items]
        flat = [(r, w) for r, ws in enumerate(windows) for w in range(len(ws))]
        order = list(range(len(flat)))
        if self.sort:                 # stable: equal lengths keep their input order
            order.sort(key=lambda i: len(windows[flat[i][0]][flat[i][1]].ids))
        results: list[dict | None] = [None] * len(flat)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            encs = [windows[flat[i][0]][flat[i][1]] for i in idx]
            feed = pad_batch(encs, self.info.pad_id, self.backend.input_names)
            outs = self.backend.run(feed)
            for row, (i, e) in enumerate(zip(idx, encs)):
                n = len(e.ids)
                # per-token outputs [B, T, ...] are cut to the real tokens of the window
                results[i] = {k: v[row, :n] if k in self.per_token else v[row] for k, v in outs.items()}
                require_finite_outputs(results[i], self.directory, f"{self.task} outputs")
        if hasattr(dec, "decode_many"):
            preds = dec.decode_many(items, windows, results)
        else:
            bounds = np.cumsum([0] + [len(ws) for ws in windows])
            preds = [dec.decode(rec, ws, results[bounds[i]:bounds[i + 1]])
                     for i, ((_, rec), ws) in enumerate(zip(items, windows))]
        for (_, rec), pred in zip(items, preds):
            if "id" in rec:                                                # the user's own key comes along
                pred = {"id": rec["id"], **pred}
            if bar is not None:
                bar.advance(1)
            yield pred


# ------------------------------------------------------------------------------------ opening
def is_bundle(path: Path) -> bool:
    path = Path(path)
    return path.suffix == ".onnx" or (path / "model.onnx").is_file()


def open_model(path, task: str | None = None, threads: int | None = None, batch_size: int = 32,
               max_length: int | None = None, **options) -> Predictor:
    """A Predictor for a checkpoint (PyTorch) or an export bundle / .onnx file (ONNX Runtime)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} does not exist", fix="give a checkpoint directory, an export bundle or a model.onnx")
    if is_bundle(path):
        onnx_file = path if path.suffix == ".onnx" else path / "model.onnx"
        directory = onnx_file.parent
        info_file = directory / "export_info.json"
        export_info = read_export_info(info_file) if info_file.is_file() else {}
        config = read_config(directory, head="classification")
        found = task or export_info.get("task")
        if not found:
            raise UserError(f"no export_info.json next to {onnx_file.name}, so the task is unknown",
                            where=str(directory), fix="name it with --task (classification, fill-mask, features, ...)")
        kind = detect_kind(directory, found)
        tok = load_tokenizer(directory)
        backend: OrtBackend | TorchBackend
        backend = OrtBackend(onnx_file, threads=threads)
        check_graph(backend, tok, config, export_info, onnx_file)
        backend.expect(kind.outputs, {"labels": len(config.labels or ()) or None, "vocab": config.vocab_size,
                                      "hidden": config.hidden_size}, optional=kind.optional)
        check_bundle_files(export_info, directory)
        limit = int(export_info.get("max_sequence_length") or longest(config))
        trained = dict(export_info.get("featurizer") or {})
    else:
        kind = detect_kind(path, task)
        config = read_config(path, head="classification")
        tok = load_tokenizer(path)
        backend = TorchBackend(exportable(kind, kind.load(path)), threads=threads)
        directory, limit = path, longest(config)
        trained = trained_options(path)
    if max_length is not None and max_length > limit:
        raise UserError(f"--max-seq-length {max_length} exceeds the model's {limit} positions", fix=f"use at most {limit}")
    length = max_length or min(int(trained.pop("max_seq_length", None) or limit), limit)
    trained.pop("max_seq_length", None)
    if options.get("allow_impossible") is False:        # the flag's default: the training's choice stands
        options = {k: v for k, v in options.items() if k != "allow_impossible"}
    merged = {**trained, **{k: v for k, v in options.items() if v is not None}}
    return Predictor(kind.name, backend, tok, config.labels, length, directory, merged, batch_size, kind.per_token)


def trained_options(directory: Path) -> dict:
    """The window and decoding settings fine-tuning used for the model in `directory` (its
    results.json `hyperparameters`, FEATURIZER_KEYS only); {} for a model bertcli did not
    fine-tune."""
    st_length = sentence_max_length(Path(directory))      # a sentence-transformers directory's own
    if st_length is not None:
        return {"max_seq_length": st_length}
    path = Path(directory) / "results.json"
    if not path.is_file():
        return {}
    results = read_json(path)
    hyper = results.get("hyperparameters") if isinstance(results, dict) else None
    if not isinstance(hyper, dict):
        return {}
    out = {k: hyper[k] for k in FEATURIZER_KEYS if hyper.get(k) is not None}
    if results.get("head") == "qa" and "max_seq_length" in out:
        out["qa_max_length"] = out["max_seq_length"]
    if results.get("task") == "squad_v2":
        out["allow_impossible"] = True
    return out


def check_graph(backend, tok, config, export_info: dict, where: Path) -> None:
    """The graph's inputs must be the ones this tokenizer feeds, for this vocabulary."""
    names = backend.input_names
    unknown = [n for n in names if n not in GRAPH_INPUTS]
    if unknown or "input_ids" not in names:
        raise UserError(f"the ONNX graph takes inputs {', '.join(names)}; bertcli feeds "
                        f"{', '.join(GRAPH_INPUTS)}", where=str(where),
                        fix="export the model with `bertcli export` (inputs input_ids, attention_mask, token_type_ids)")
    for value in backend.session.get_inputs():
        if value.type != "tensor(int64)":
            raise UserError(f"graph input {value.name} is {value.type}, not int64 token ids", where=str(where))
    vocab = int(export_info.get("vocab_size") or config.vocab_size)
    if tok.vocab_size > vocab:
        raise UserError(f"the tokenizer has {tok.vocab_size:,} tokens but the graph's model only {vocab:,} "
                        "embeddings: the tokenizer does not belong to this model", where=str(where),
                        fix="keep the tokenizer files the export wrote next to model.onnx")
    if "token_type_ids" in names and not config.spec.uses_token_types:
        raise UserError("the graph takes token_type_ids but config.json describes a family without token types",
                        where=str(where), fix="config.json does not belong to this model.onnx")
    if tok.pad_id != config.pad_token_id:
        raise UserError(f"the tokenizer pads with id {tok.pad_id} but the model's pad_token_id is "
                        f"{config.pad_token_id}: the tokenizer does not belong to this model", where=str(where))
