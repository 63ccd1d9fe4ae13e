"""Reproducible from scratch: the same recipe on the same corpus gives a byte-identical
tokenizer.json in fresh processes (other hash seeds inside `tokenizers`, other PYTHONHASHSEED),
for WordPiece, byte-level BPE and Unigram, and `bertcli pretrain` from nothing gives the same
metrics.jsonl, field for field (timings aside). See bertcli/tokenization/reproducible.py for the causes."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import ONE_THREAD, run_cli_process

from bertcli.config.sections import CorpusConfig, SourceConfig, TokenizerConfig
from bertcli.corpus.build import documents, resolve_sources
from bertcli.corpus.readers import ReadStats
from bertcli.train.metrics import TIMING_KEYS, read_metrics

SPECIALS = {"wordpiece": "bert", "bpe": "roberta", "unigram": "albert"}
CORPUS = "corpus.sources=[{path: builtin, max_documents: 80}]"


def _docs():
    cfg = CorpusConfig(sources=[SourceConfig("builtin", max_documents=80)])
    return list(documents(cfg, resolve_sources(cfg), ReadStats()))


def _cfg(kind: str, **kw) -> TokenizerConfig:
    return TokenizerConfig(kind=kind, vocab_size=600, special_tokens=SPECIALS[kind], lowercase=kind != "bpe",
                           strip_accents=kind != "bpe", **kw)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture(scope="module")
def docs():
    return _docs()


def test_raw_tokenizers_training_depends_on_hash_order(docs):
    """The problem this file guards against, shown on the test corpus: `tokenizers` alone,
    trained four times in this process (each trainer gets new hash keys), learns more than one
    WordPiece and Unigram vocabulary. If this starts failing, tokenizers fixed #1794 and
    bertcli/tokenization/reproducible.py's workaround is no longer needed (the tests below still hold)."""
    from bertcli.tokenization.train import new_tokenizer, new_trainer

    sentences = [s for d in docs for s in d]
    for kind in ("wordpiece", "unigram"):
        seen = set()
        for _ in range(4):
            tok, trainer = new_tokenizer(_cfg(kind)), new_trainer(_cfg(kind), show_progress=False)
            tok.train_from_iterator(sentences, trainer=trainer)
            seen.add(_sha(tok.to_str()))
        assert len(seen) > 1, kind


@pytest.mark.parametrize("kind, extra", [("wordpiece", {}), ("wordpiece", {"limit_alphabet": 44}),
                                         ("bpe", {}), ("unigram", {})])
def test_training_in_one_process_is_byte_identical(docs, kind, extra):
    """Three trainings in one process (new hash keys each time); `limit_alphabet: 44` cuts the
    alphabet inside a run of equally frequent characters (checked), where the trainer's own
    choice is hash order."""
    import datasets

    from bertcli.tokenization.alphabet import character_counts
    from bertcli.tokenization.train import new_tokenizer, train_tokenizer

    ds = datasets.Dataset.from_dict({"sentences": docs})
    alphabet = "".join(sorted({c for d in docs for s in d for c in s}))
    cfg = _cfg(kind, **extra)
    if extra:
        counts = sorted(character_counts(new_tokenizer(cfg), ([s for s in d] for d in docs)).values(), reverse=True)
        assert counts[cfg.limit_alphabet - 1] == counts[cfg.limit_alphabet], "the cut is not inside a tie"
    shas = {_sha(train_tokenizer(cfg, ds, alphabet, "test").to_str()) for _ in range(3)}
    assert len(shas) == 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_tokenize_in_two_fresh_processes_gives_the_same_bytes(tmp_path, kind):
    """`bertcli tokenize` twice, in two processes with other PYTHONHASHSEED and cache dirs: the
    same tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json, byte for
    byte."""
    from bertcli.tokenization.load import load_tokenizer

    outs = []
    for run, seed in (("a", "1"), ("b", "2")):
        r = run_cli_process("tokenize", "-r", "bert-tiny", "--set", CORPUS, "--set", f"tokenizer.kind={kind}",
                    "--set", f"tokenizer.special_tokens={SPECIALS[kind]}", "--set", "tokenizer.vocab_size=600",
                    "--set", f"tokenizer.lowercase={str(kind != 'bpe').lower()}",
                    "--set", f"cache_dir={tmp_path / run}", cwd=tmp_path, env={"PYTHONHASHSEED": seed, **ONE_THREAD})
        assert r.rc == 0, r.output
        (path,) = (tmp_path / run).glob("tokenizer-*")
        outs.append(path)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        a, b = outs[0] / name, outs[1] / name
        assert a.is_file() == b.is_file() and (not a.is_file() or a.read_bytes() == b.read_bytes()), name
    tok = load_tokenizer(outs[0])
    assert tok.vocab_size == 600
    # the `##` pieces given to the trainer as special tokens are ordinary pieces again
    assert {a.content for a in tok.tokenizer.get_added_tokens_decoder().values()} == set(
        json.loads((outs[0] / "special_tokens_map.json").read_text()).values())
    if kind == "wordpiece":
        enc = tok.tokenizer.encode("the functions returned", add_special_tokens=False)
        assert any(t.startswith("##") for t in enc.tokens) and tok.unk_id not in enc.ids


@pytest.mark.slow
def test_pretrain_twice_from_nothing_gives_the_same_metrics(tmp_path):
    """`bertcli pretrain` from an empty directory, twice (other processes, PYTHONHASHSEED, output
    and cache directories): every metrics.jsonl field of every step but the timings is equal,
    and so are the tokenizer and the final weights, byte for byte."""
    sets = [CORPUS, "corpus.validation_fraction=0.1", "tokenizer.vocab_size=600", "data.max_seq_length=64",
            "data.dupe_factor=1", "model.hidden_size=32", "model.num_hidden_layers=2", "model.num_attention_heads=2",
            "model.intermediate_size=64", "train.batch_size=16", "train.max_steps=12", "train.warmup_steps=2",
            "train.log_every=1", "train.eval_every=6", "train.save_every=6", "train.eval_batches=4"]
    runs = []
    for run, seed in (("a", "11"), ("b", "22")):
        out = tmp_path / run
        r = run_cli_process("pretrain", "-r", "bert-tiny", *[x for s in sets for x in ("--set", s)],
                    "--set", f"output_dir={out}", "--set", f"cache_dir={out / 'cache'}", cwd=tmp_path,
                    env={"PYTHONHASHSEED": seed, **ONE_THREAD})
        assert r.rc == 0, r.output
        runs.append(out)
    records = [[{k: v for k, v in rec.items() if k not in TIMING_KEYS} for rec in read_metrics(out / "metrics.jsonl")]
               for out in runs]
    assert [r["step"] for r in records[0]] == list(range(1, 13))
    assert records[0] == records[1]
    tok = [next((out / "cache").glob("tokenizer-*")) / "tokenizer.json" for out in runs]
    assert tok[0].read_bytes() == tok[1].read_bytes()
    assert (runs[0] / "final" / "model.safetensors").read_bytes() == (runs[1] / "final" / "model.safetensors").read_bytes()
    assert json.loads((runs[0] / "final" / "config.json").read_text()) == \
        json.loads((runs[1] / "final" / "config.json").read_text())
