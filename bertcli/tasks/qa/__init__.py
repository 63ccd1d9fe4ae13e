"""SQuAD-layout question answering: records, windows, decoding (shared by `finetune squad`,
`export` and `predict`)."""
