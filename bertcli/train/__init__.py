"""Pretraining: the `bertcli pretrain` pipeline, the trainer, checkpoints and exact resume, DDP.

Reusable pieces (fine-tuning imports these; they know nothing of pretraining):
    optim.build_optimizer(model, name, lr, betas, eps, weight_decay, device)   AdamW (fused/foreach) | LAMB
    optim.param_groups(model, weight_decay)          no decay on biases and normalization weights
    schedule.build_scheduler(optimizer, warmup_steps, max_steps, kind, power, min_lr_ratio)  LambdaLR
    schedule.lr_multiplier(step, warmup_steps, max_steps, kind, power, min_lr_ratio)  (step 1-based)
    precision.resolve_device(spec), precision.autocast(precision, device),
    precision.make_grad_scaler(precision, device), precision.clip_and_check(params, max_norm,
    scaler, optimizer) -> grad norm, precision.StepGuard(max_bad_steps)

Pretraining: pipeline.run_pretrain(recipe, resume, force) -> PretrainResult; resume.ResumeState
(where a run starts: scratch or a checkpoint); continued.start_weights; loop.Trainer;
checkpoint (HF directory + trainer_state/, no pickle); sampler (deterministic order + cursor);
metrics (metrics.jsonl, TensorBoard, live view); distributed (torchrun / DDP helpers).
"""
