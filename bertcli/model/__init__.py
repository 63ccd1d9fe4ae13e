"""One encoder for BERT, RoBERTa and ALBERT, its heads, and Hugging Face checkpoints.

CONTRACT (used by the trainer, fill-mask and fine-tuning)
    build_model(model_cfg: ModelConfig, vocab_size: int, pad_token_id: int, head="pretraining")
        -> PreTrainingModel (MLM head + NSP head for bert, none for roberta, SOP for albert)
    PreTrainingModel.forward(input_ids [B,T], attention_mask [B,T] | None,
                             token_type_ids [B,T] | None, mlm_positions [N] | None)
        -> PreTrainingOutput(mlm_logits [N, V] (or [B, T, V] when mlm_positions is None),
                             pair_logits [B, 2] | None)
        mlm_positions are flat indices into input_ids.view(-1); logits are computed only there.
    SequenceClassifier (fine-tuning): forward(input_ids, attention_mask, token_type_ids) -> [B, C]
    save_checkpoint(model, directory, tokenizer_dir=None)  HF directory: config.json,
        model.safetensors (transformers' names), tokenizer files
    load_checkpoint(directory, head="pretraining" | "classification", num_labels=None)
        -> (model, LoadReport)  any HF bert/roberta/albert directory; fresh heads are listed
"""
