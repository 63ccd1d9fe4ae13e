"""One encoder for BERT, RoBERTa, ALBERT and ModernBERT, its heads, and Hugging Face checkpoints.
What makes each family is its spec in bertcli.config.families (`family_spec(name)`,
`model.config.spec`).

CONTRACT (used by the trainer, fill-mask and fine-tuning)
    build_model(model_cfg: ModelConfig, vocab_size: int, pad_token_id: int, head="pretraining")
        -> PreTrainingModel (MLM head + the spec's pair head: NSP for bert, SOP for albert, none
           for roberta and modernbert)
    PreTrainingModel.forward(input_ids [B,T], attention_mask [B,T] | None,
                             token_type_ids [B,T] | None, mlm_positions [N] | None)
        -> PreTrainingOutput(mlm_logits [N, V] (or [B, T, V] when mlm_positions is None),
                             pair_logits [B, 2] | None, mlm_rows [M', V] | None)
        mlm_positions are flat indices into input_ids.view(-1); logits are computed only there.
        mlm_rows: mlm_logits followed by rows of a zero input up to a bucketed count M' (what
        the trainer's loss reads, with ignored labels, so that shapes repeat).
    SequenceClassifier (fine-tuning): forward(input_ids, attention_mask, token_type_ids) -> [B, C]
    TokenClassifier (head="token"): forward(ids, mask, types, positions=None) -> [B, T, C] | [n, C]
    SpanExtractor (head="qa"): forward(ids, mask, types) -> (start [B, T], end [B, T]) logits
    save_checkpoint(model, directory, tokenizer_dir=None)  HF directory: config.json,
        model.safetensors (transformers' names), tokenizer files
    load_checkpoint(directory, head="pretraining" | "classification" | "token" | "qa", num_labels=None)
        -> (model, LoadReport)  any HF directory of a known family; fresh heads are listed

ADDED (also usable)
    build_model(..., head="classification", labels=[names] | num_labels=C)  1 label = regression
    load_checkpoint(..., labels=[names]); the model comes back in eval mode on the CPU in fp32.
    LoadReport: fresh (transformers names initialized fresh), unused (checkpoint tensors this
        model does not use, e.g. cls.* when fine-tuning), notes, warnings (all, as lines).
    save_checkpoint(...) -> list of caveats for transformers users (pre-LN, unrolled sharing, E != H).
    model.config: EncoderConfig (family, sizes, labels ...); model.encoder(input_ids,
        attention_mask, token_type_ids) -> EncoderOutput with .padded() [B, T, H] last hidden
        states (zeros at padding), .first() [B, H]; model.encoder.pool(out) the BERT pooler.
    read_config(directory) -> EncoderConfig without loading weights (no torch import).
    parameter_counts(model_cfg, vocab_size), flops_per_token(model_cfg, vocab_size, seq_len,
        mlm_fraction): for `bertcli info` (bertcli.model.count).
    Switches for benchmarks: model.encoder.unpad (run dense layers on real tokens only) and
        model.sparse_last_layer (last layer only where heads read); both on by default.
"""

# Names are imported on first use (PEP 562), so `import bertcli.model.hf` and the CLI's error
# paths do not pay for importing torch.
import importlib

_EXPORTS = {
    "build_model": "heads", "PreTrainingModel": "heads", "PreTrainingOutput": "heads",
    "SequenceClassifier": "heads", "TokenClassifier": "task_heads", "SpanExtractor": "task_heads",
    "save_checkpoint": "checkpoint", "load_checkpoint": "checkpoint",
    "LoadReport": "checkpoint", "unwrap": "checkpoint", "read_config": "hf", "EncoderConfig": "bertcli.config.model",
    "encoder_config": "bertcli.config.model", "Encoder": "encoder", "EncoderOutput": "encoder",
    "parameter_counts": "count", "flops_per_token": "count",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bertcli.model' has no attribute {name!r}")
    where = _EXPORTS[name]
    return getattr(importlib.import_module(where if "." in where else f"bertcli.model.{where}"), name)
