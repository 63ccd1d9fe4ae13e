"""Deployment: `bertcli export` (a checkpoint -> a verified ONNX bundle) and `bertcli predict`
(batched inference with PyTorch or ONNX Runtime behind one interface).

CONTRACT
    run_export(checkpoint, out, task=None, opset=18, fp16=False, quantize=None | "int8",
               dev=None, verify=True, force=False) -> ExportResult(out, info, passed)   (run.py)
    open_model(path, task=None, ...) -> Predictor; Predictor.predict(records) -> predictions
    run_predict(model, input_file, out=None, ...) -> summary                           (predict.py)
    bertcli.finetune.heads.register(HeadKind(...)) makes a new head exportable and predictable:
        the record names its model, outputs, featurizer (fine-tuning's own) and --dev metric.

Modules: heads (choosing the head kind, the traced module), graph (torch.onnx.export, int8),
verify (ORT vs PyTorch), backend (the two runtimes), inputs (streaming readers), dev (--dev),
predict, features (`bertcli features`), run. Featurization is fine-tuning's (bertcli.finetune).
onnx / onnxruntime / onnxscript come from the `export` extra and are imported only inside the functions that need them.
"""
