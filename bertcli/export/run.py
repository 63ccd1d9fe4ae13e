"""`bertcli export`: a checkpoint -> a verified ONNX bundle.

    OUT/model.onnx            (+ model.onnx.data for models over 2 GB)
    OUT/config.json           the checkpoint's, with its labels (id2label)
    OUT/tokenizer files       as the checkpoint has them
    OUT/export_info.json      task, opset, inputs/outputs, precision, verification figures,
                              dev metrics, file sizes, the source files' sha256

The bundle is built in a temporary directory next to OUT and renamed when complete; a bundle
whose verification fails is not kept (exit code 1), so nothing unverified looks finished.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from bertcli import __version__
from bertcli.config.checkpoint import read_config, weight_files
from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.core.locks import run_lock
from bertcli.core.machine import use_threads
from bertcli.core.outputs import check_output_dir, install, removing_on_signal, temporary_dir
from bertcli.export import graph
from bertcli.export.backend import OrtBackend, TorchBackend, require_onnx
from bertcli.export.dev import evaluate, load_dev
from bertcli.export.heads import architecture, detect_kind, exportable
from bertcli.export.predictor import Predictor, open_model, trained_options
from bertcli.export.verify import Check, check_reference, compare, verification_batches
from bertcli.tokenization.load import load_tokenizer

VERIFY_MAX_TOKENS = 1024


@dataclass
class ExportResult:
    out: Path
    info: dict
    passed: bool


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_out_dir(out: Path, force: bool, inputs=()) -> None:
    """OUT must be new, empty, or an earlier bundle (its marker, or export_info.json's file list
    for a bundle made before markers) with --force; never an input; writable."""

    check_output_dir(Path(out), force, inputs, "--out", "the export bundle")


def run_export(checkpoint: Path, out: Path, task: str | None = None, opset: int = 18, fp16: bool = False,
               quantize: str | None = None, dev: Path | None = None, verify: bool = True,
               force: bool = False, threads: int | None = None, optimize: bool = True) -> ExportResult:
    require_onnx()
    checkpoint, out = Path(checkpoint), Path(out)
    # Everything that needs no weights first: a mistake is reported at once.
    if opset < graph.MIN_OPSET:
        raise UserError(f"--opset {opset} is too old", fix=f"use {graph.MIN_OPSET} or later (LayerNormalization)")
    if quantize not in (None, "int8"):
        raise UserError(f"--quantize {quantize!r} is not supported", fix="use --quantize int8")
    if fp16 and quantize:
        raise UserError("--fp16 and --quantize int8 are two different targets", fix="choose one")
    if dev is not None and not quantize:
        raise UserError("--dev measures what quantization costs", fix="add --quantize int8")
    config = read_config(checkpoint, head="classification")
    files = weight_files(checkpoint)
    kind = detect_kind(checkpoint, task)
    tok = load_tokenizer(checkpoint)
    check_out_dir(out, force, [checkpoint, dev])
    dev_set = None
    if dev is not None:
        dev_set = load_dev(dev, kind.task, config.labels)

    console.log(f"exporting {checkpoint} as {kind.task} ({config.family}, opset {opset}"
                f"{', fp16' if fp16 else ''}{', int8' if quantize else ''})")
    use_threads(threads, "--threads")   # torch's and (in _verify) ONNX Runtime's; None: the free cores
    model = kind.load(checkpoint)
    module = exportable(kind, model)
    # a second export into OUT fails at once, naming this one; SIGTERM is an exception from before
    # the temporary exists, so the `finally` removes it (or, killed, the next run: it is marked)
    with run_lock(out), removing_on_signal():
        check_out_dir(out, force, [checkpoint, dev])
        tmp = temporary_dir(out)
        try:
            info = _build(tmp, checkpoint, files, config, kind, tok, module, opset, fp16, quantize, dev_set,
                          verify, optimize)
            passed = all(c["passed"] for c in info["verification"].values())
            if passed:                  # only the files an earlier bundle's marker lists are replaced
                install(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    show(out, info, passed)
    return ExportResult(out, info, passed)


def _build(tmp, checkpoint, files, config, kind, tok, module, opset, fp16, quantize, dev_set, verify,
           optimize=True) -> dict:
    from bertcli.model.checkpoint import copy_tokenizer

    copy_tokenizer(checkpoint, tmp)
    shutil.copyfile(checkpoint / "config.json", tmp / "config.json")
    max_len = graph.max_length(config)
    start = time.monotonic()
    fp32_path = tmp / ("model.fp32.onnx" if quantize else "model.onnx")
    reference = TorchBackend(module)
    # the longest verified sequence is capped: a padded 8192-token ModernBERT batch needs GBs of attention
    batches = verification_batches(tok.tokenizer, tok.pad_id, list(module.input_names), min(max_len, VERIFY_MAX_TOKENS))
    check_reference(reference, batches, checkpoint)      # before any graph is written
    dev_metrics: dict = {}
    if dev_set is not None:
        records, gold, metric = dev_set
        torch_predictor = Predictor(kind.task, reference, tok, config.labels, min(max_len, 512), checkpoint)
        dev_metrics["pytorch_fp32"] = evaluate(torch_predictor, records, gold, metric)
    if fp16:
        import copy

        outputs = graph.export_graph(copy.deepcopy(module), fp32_path, opset, fp16=True)
    else:
        outputs = graph.export_graph(module, fp32_path, opset)
    export_s = time.monotonic() - start
    checks = {}
    if fp16:
        optimization = {"applied": False, "fused": {}, "note": "not optimized: fp16 graphs are left as exported "
                        "(this CPU runtime cannot verify a fused fp16 graph)"}
        if verify:
            checks["fp16"] = _verify(reference, fp32_path, batches, "fp16")
    else:
        optimization = _optimize(fp32_path, config, reference, batches, verify, checks, optimize)
    if quantize:
        graph.quantize_int8(fp32_path, tmp / "model.onnx")
        if verify:
            checks["int8"] = _verify(reference, tmp / "model.onnx", batches, "int8")
        if dev_set is not None:
            records, gold, metric = dev_set
            for name, path in (("onnx_fp32", fp32_path), ("onnx_int8", tmp / "model.onnx")):
                p = open_model(path, task=kind.task, max_length=min(max_len, 512))
                dev_metrics[name] = evaluate(p, records, gold, metric)
        for leftover in tmp.glob("model.fp32.onnx*"):
            leftover.unlink()
    summary = graph.graph_summary(tmp / "model.onnx")
    info = {
        "bertcli_version": __version__,
        "task": kind.task, "family": config.family, "architecture": _arch(checkpoint),
        "precision": "fp16" if fp16 else (quantize or "fp32"),
        "opset": summary["opset"], "inputs": summary["inputs"], "outputs": summary["outputs"],
        "operators": summary["operators"], "output_names": outputs,
        "max_sequence_length": max_len, "vocab_size": config.vocab_size,
        "featurizer": trained_options(checkpoint),        # fine-tuning's windows: predict reads them
        "labels": list(config.labels) if kind.task in ("classification", "token-classification") and config.labels
        else None,
        "optimization": optimization,     # what ONNX Runtime's transformer optimizer fused, or why not
        "verification": {k: c.as_dict() for k, c in checks.items()},
        "dev_metrics": dev_metrics or None,
        "export_seconds": round(export_s, 2),
        "source": {"checkpoint": str(checkpoint.resolve()),
                   "sha256": {p.name: sha256(p) for p in [checkpoint / "config.json", *files]}},
        "versions": _versions(),
    }
    info["files"] = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())
                     if p.is_file() and not p.name.startswith(".bertcli-")}   # not the temporary's marker
    info["files"]["export_info.json"] = None  # itself; written below
    (tmp / "export_info.json").write_text(jsonout.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def _optimize(path: Path, config, reference, batches, verify: bool, checks: dict, optimize: bool) -> dict:
    """Fuse the fp32 graph at `path` in place with ONNX Runtime's transformer optimizer. The
    fused graph replaces the plain one only when it passes the fp32 verification against PyTorch
    (or verification is off); otherwise the plain graph stays, is verified, and the note says
    why. Sets checks["fp32"] to the kept graph's check; returns export_info's `optimization`."""
    fused: dict[str, int] = {}
    note = "not optimized: --no-optimize"
    rejected = None
    if optimize:
        candidate = path.with_name(path.stem + ".fused.onnx")
        external = Path(str(path) + ".data").exists()
        fused, note = graph.optimize(path, candidate, config.num_attention_heads, config.hidden_size, external)
        if fused:
            check = _verify(reference, candidate, batches, "fp32") if verify else None
            if check is None or check.passed:
                graph.move_graph(candidate, path)
                if check is not None:
                    checks["fp32"] = check
                else:
                    note += " (not verified: --no-verify)"
            else:
                rejected = check.as_dict()
                worst = max(check.max_abs_diff, key=lambda n: check.max_abs_diff[n] - check.tolerance[n])
                note = (f"not optimized: the fused graph ({note.removeprefix('fused: ')}) differs from PyTorch by "
                        f"{check.max_abs_diff[worst]:.3g} on {worst}, over the fp32 tolerance "
                        f"{check.tolerance[worst]:.3g}; the plain graph is kept")
                fused = {}
                for leftover in path.parent.glob(candidate.name + "*"):
                    leftover.unlink()
    if fused:
        console.log(f"optimized the graph: {note}")
    elif optimize:
        console.log(f"warning: {note}")
    if verify and "fp32" not in checks:
        checks["fp32"] = _verify(reference, path, batches, "fp32")
    return {"applied": bool(fused), "fused": fused, "note": note, "rejected_check": rejected}


def _verify(reference, path: Path, batches, precision: str):
    try:
        import torch

        candidate = OrtBackend(path, threads=torch.get_num_threads())   # the count run_export chose
        return compare(reference, candidate, batches, precision)
    except Exception as e:  # an fp16 graph may have no CPU kernels in this runtime
        if precision != "fp16":
            raise
        return Check(precision, {}, {}, {}, [], verified=False,
                     note=f"not verified: this machine's ONNX Runtime (CPU) cannot run the fp16 graph "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:200]}); run it on a GPU runtime")


def _arch(checkpoint: Path) -> str:
    return architecture(checkpoint)


def _versions() -> dict:
    import onnx
    import onnxruntime
    import torch

    return {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def show(out: Path, info: dict, passed: bool) -> None:
    rows = [("task", info["task"]), ("precision", info["precision"]), ("opset", info["opset"]),
            ("inputs", ", ".join(i["name"] for i in info["inputs"]))]
    for name, check in info["verification"].items():
        if not check["verified"]:
            rows.append((f"verification {name}", check["note"]))
            continue
        for output, diff in check["max_abs_diff"].items():
            agree = check["argmax_agreement"].get(output)
            extra = f", argmax agreement {agree:.4f}" if agree is not None and name != "fp32" else ""
            state = "ok" if diff <= check["tolerance"][output] else "FAILED"
            tolerance = check["tolerance"][output]
            rows.append((f"max |diff| {name} {output}", f"{diff:.3g} (tolerance {tolerance:.3g}{extra}) {state}"))
    for name, metrics in (info.get("dev_metrics") or {}).items():
        rows.append((f"dev {name}", ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())))
    size = sum(v for v in info["files"].values() if v)
    rows.append(("bundle", f"{out} ({size / 1e6:.1f} MB)" if passed else "not written: verification failed"))
    console.summary(f"export {info['task']}: {'done' if passed else 'FAILED'}", rows)
