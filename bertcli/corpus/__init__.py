"""Stage 0: raw text to a corpus of sentences (readers, splitting, the cached stage)."""
