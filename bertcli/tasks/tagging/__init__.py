"""Token classification: tagging schemes and word windows (shared by `finetune ner`, `export`
and `predict`)."""
