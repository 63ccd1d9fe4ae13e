"""train_tokenizer leaves out readable_scores' round trip for Unigram (the Python overhead left
in its training time, issue 23): safe because reproducible.canonical already writes every score
so that both JSON readers read it exactly, i.e. readable_scores of canonical's output is the
same tokenizer, byte for byte."""

from __future__ import annotations

import datasets

from bertcli.config.sections import CorpusConfig, TokenizerConfig
from bertcli.corpus.build import documents, resolve_sources
from bertcli.corpus.readers import ReadStats
from bertcli.tokenization.train import readable_scores, train_tokenizer


def test_unigram_training_output_is_already_readable():
    cfg = CorpusConfig()
    docs = list(documents(cfg, resolve_sources(cfg), ReadStats()))[:200]
    ds = datasets.Dataset.from_dict({"sentences": docs})
    alphabet = "".join(sorted({c for d in docs for s in d for c in s}))
    tok = train_tokenizer(TokenizerConfig(kind="unigram", vocab_size=2000, special_tokens="albert", lowercase=True),
                          ds, alphabet, "test")
    assert type(tok.model).__name__ == "Unigram" and tok.get_vocab_size() == 2000
    assert readable_scores(tok).to_str() == tok.to_str()
