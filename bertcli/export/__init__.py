"""Deployment: `bertcli export` (a checkpoint -> a verified ONNX bundle) and the predictor that
runs a checkpoint (PyTorch) or a bundle (ONNX Runtime) behind one interface.

CONTRACT
    run_export(checkpoint, out, task=None, opset=18, fp16=False, quantize=None | "int8",
               dev=None, verify=True, force=False) -> ExportResult(out, info, passed)   (run.py)
    open_model(path, task=None, ...) -> Predictor; Predictor.predict(records) -> predictions
                                                                                      (predictor.py)
    teacher_student_speed(teacher, student, length) -> distill.speed                   (speed.py)
    bertcli.tasks.heads.register(HeadKind(...)) makes a new head exportable and predictable:
        the record names its model, outputs, featurizer (fine-tuning's own) and --dev metric.

Modules: heads (choosing the head kind, the traced module), graph (torch.onnx.export, int8),
verify (ORT vs PyTorch), backend (the two runtimes), inputs (streaming readers), dev (--dev),
predictor, speed (ONNX Runtime timing of a distilled student beside its teacher), run.
Featurization is the task layer's (bertcli.tasks); the `predict` command is bertcli.serve.predict.
onnx / onnxruntime / onnxscript come from the `export` extra and are imported only inside the functions that need them.
"""
