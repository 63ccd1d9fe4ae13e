"""Corpus readers: documents from text/jsonl/json/parquet/csv files, `datasets` hub names and
the built-in corpus, split into sentences, stored as an Arrow dataset (memory-mapped).

CONTRACT (used by the tokenizer and data stages):

    load_corpus(recipe) -> datasets.DatasetDict
        splits "train" and "validation"; one row per document; column
        "sentences": list[str] (non-empty, stripped). Cached in stage_dir(recipe, "corpus")
        (saved with save_to_disk, plus corpus_info.json with counts); reused when complete.

    corpus_fingerprint(cfg: CorpusConfig) -> list
        JSON-able description of the resolved inputs (absolute paths, sizes, mtimes; hub names;
        builtin + Python version) that goes into every stage hash depending on the corpus.
"""
