"""Stage 1: train a tokenizer on the corpus (train, build); load one (load)."""
