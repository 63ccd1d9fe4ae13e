"""Deployment: `bertcli export` (a checkpoint -> a verified ONNX bundle) and `bertcli predict`
(batched inference with PyTorch or ONNX Runtime behind one interface).

CONTRACT
    run_export(checkpoint, out, task=None, opset=18, fp16=False, quantize=None | "int8",
               dev=None, verify=True, force=False) -> ExportResult(out, info, passed)   (run.py)
    open_model(path, task=None, ...) -> Predictor; Predictor.predict(records) -> predictions
    run_predict(model, input_file, out=None, ...) -> summary                           (predict.py)
    heads.register(HeadKind(...)) makes a new head exportable; decode.decoder(task) adds its
        predict decoder; dev.METRICS[task] its --dev metric.

Modules: heads (what is traced per task), graph (torch.onnx.export, int8), verify (ORT vs
PyTorch), backend (the two runtimes), inputs (streaming readers), decode (per-task outputs),
dev (--dev metrics), predict, run. onnx / onnxruntime / onnxscript come from the `export`
extra and are imported only inside the functions that need them.
"""
