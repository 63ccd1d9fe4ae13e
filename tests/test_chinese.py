"""Chinese: a vocabulary that covers the text ([UNK] below 0.5%), the [UNK] warning, byte-level BPE
word starts with jieba, Unigram scores that every reader reads alike, the Chinese recipes."""

from __future__ import annotations

import json

import pytest
from chinese_text import documents, write
from conftest import run_cli

from bertcli.config.recipe import load_recipe
from bertcli.corpus.build import split_sentences
from bertcli.data import words
from bertcli.tokenization.load import load_tokenizer
from bertcli.tokenization.train import new_tokenizer, new_trainer, write_hf_files

GOAL_UNK = 0.005


def unk_rate(tok_dir, sentences) -> float:
    info = load_tokenizer(tok_dir)
    encs = info.tokenizer.encode_batch(sentences, add_special_tokens=False)
    return sum(e.ids.count(info.unk_id) for e in encs) / sum(len(e.ids) for e in encs)


@pytest.fixture(scope="module")
def zh(tmp_path_factory):
    """0.8 MB of generated Chinese for training and 100k characters held out (another seed)."""
    tmp = tmp_path_factory.mktemp("zh")
    held = [s for d in documents(seed=2, n_chars=100_000) for p in d for s in split_sentences(p)]
    return {"tmp": tmp, "corpus": write(tmp / "zh.jsonl", seed=11, n_chars=270_000), "heldout": held}


def tokenize(zh, name, *sets):
    out = zh["tmp"] / name
    r = run_cli("tokenize", "-r", "bert-tiny-chinese", "--set", f"output_dir={out}",
                "--set", f"corpus.sources=[{zh['corpus']}]", *sets, cwd=zh["tmp"])
    assert r.rc == 0, r.output
    (path,) = out.glob("tokenizer-*")
    return r, path, json.loads((path / "tokenizer_info.json").read_text(encoding="utf-8"))


def test_auto_alphabet_covers_chinese_and_1000_characters_warn(zh):
    r, path, info = tokenize(zh, "auto")
    # several thousand characters, all of those seen twice kept: [UNK] below the goal, no warning
    assert info["alphabet"]["limit_alphabet"] == "auto"
    assert info["alphabet"]["kept"] == info["alphabet"]["frequent"] > 2500
    assert info["eval_unk_rate"] < GOAL_UNK
    held = unk_rate(path, zh["heldout"])
    assert held < GOAL_UNK, held
    assert "warning" not in r.stderr

    # the old default: 1,000 characters; the stage warns and names the cause and the key
    r, path, info = tokenize(zh, "limit1000", "--set", "tokenizer.limit_alphabet=1000")
    assert unk_rate(path, zh["heldout"]) > 0.05 and info["eval_unk_rate"] > 0.05
    causes = info["unk_causes"]
    assert causes["cut_by_limit"] > 0.9 * sum(v for k, v in causes.items() if k != "examples")
    warning = " ".join(r.stderr.split())
    assert "warning:" in warning and "[UNK]" in warning, r.stderr
    assert "characters cut by the alphabet limit" in warning and "tokenizer.limit_alphabet: auto" in warning

    # min_frequency far above most counts: the other cause, the other key
    r, _, info = tokenize(zh, "rare", "--set", "tokenizer.min_frequency=200")
    warning = " ".join(r.stderr.split())
    assert info["eval_unk_rate"] > 0.01 and "lower tokenizer.min_frequency" in warning, r.stderr


def test_pretrain_shows_the_unk_warning(zh):
    out = zh["tmp"] / "limit1000"  # reuses the tokenizer (and corpus) of the test above when it ran first
    r = run_cli("pretrain", "-r", "bert-tiny-chinese", "--set", f"output_dir={out}",
                "--set", f"corpus.sources=[{zh['corpus']}]", "--set", "tokenizer.limit_alphabet=1000",
                "--set", "data.whole_word=false", "--set", "data.word_segmenter=none",
                "--set", "data.dupe_factor=1", "--set", "train.max_steps=2", "--set", "train.warmup_steps=1",
                cwd=zh["tmp"], env={"OMP_NUM_THREADS": "1"})
    assert r.rc == 0, r.output
    assert "tokenizer.limit_alphabet" in " ".join(r.stderr.split()), r.stderr


def test_english_alphabet_unchanged():
    """The built-in corpus has fewer than 1,000 distinct characters: `auto` keeps them all, as the
    old default did, so the trainer gets the same input."""
    from bertcli.tokenization.alphabet import alphabet_limit

    counts = {chr(97 + i): 100 - i for i in range(26)} | {"é": 1}
    assert alphabet_limit("auto", 2, counts) == 27 and alphabet_limit(500, 2, counts) == 500
    many = {chr(0x4e00 + i): 1 + i % 7 for i in range(5000)}  # 5,000 characters, counts 1..7
    frequent = sum(1 for n in many.values() if n >= 2)
    assert alphabet_limit("auto", 2, many) == frequent
    # never fewer than 1,000, and never a cut inside a tie: all characters of the boundary count
    assert alphabet_limit("auto", 7, many) == sum(1 for n in many.values() if n >= 6)


# ------------------------------------------------------------------ byte-level BPE word starts
def test_bpe_jieba_word_start_never_inside_a_character_an_earlier_token_began():
    import jieba

    cfg = load_recipe("roberta-tiny", ["tokenizer.vocab_size=400"]).tokenizer
    tok = new_tokenizer(cfg)
    # spaces before Chinese words make `Ġ` + first byte merges, so a character's bytes split
    # between a token that begins at the space and one that continues the character
    sents = [" ".join(jieba.cut(p)) for d in documents(seed=5, n_chars=20_000) for p in d]
    tok.train_from_iterator(sents, trainer=new_trainer(cfg, show_progress=False))
    segment = words.load_segmenter("jieba")
    markers = words.start_marker_table(tok, "bpe")
    starts = split = 0
    for s in sents[:200]:
        enc = tok.encode(s, add_special_tokens=False)
        st = words.word_starts(enc.ids, enc.word_ids, markers, s, enc.offsets, segment)
        for i, (a, _b) in enumerate(enc.offsets):
            earlier = enc.offsets[:i]
            split += any(aj <= a < bj for aj, bj in earlier)
            if st[i]:
                starts += 1
                assert not any(aj <= a < bj for aj, bj in earlier), (s, enc.tokens[max(0, i - 2): i + 2])
        # jieba still decides inside runs of whole characters
        assert st[0] == 1
    assert split > 100 and starts > 1000  # the case occurred, and words were found


# ------------------------------------------------------------------------ Unigram scores
TIE = -7.417202434005343  # its shortest decimal is one `tokenizers` reads one unit in the last place off


def test_unigram_scores_read_alike_by_tokenizers_and_transformers(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import AutoTokenizer

    cfg = load_recipe("albert-tiny").tokenizer
    tok = new_tokenizer(cfg)
    specials = [("<pad>", 0.0), ("<unk>", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[MASK]", 0.0)]
    # "──" scores exactly twice "─": every run of ─ has equal-score segmentations
    pieces = [("▁", -2.0), ("─", TIE), ("──", 2 * TIE), ("┼", -3.0), ("─┼", TIE - 3.0)]
    tok.model = models.Unigram(specials + pieces, unk_id=1, byte_fallback=False)
    write_hf_files(tok, cfg, tmp_path)
    file = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    ours = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    inputs = ["─┼" + "─" * 39] + ["─" * n for n in range(1, 41)] + ["┼" + "─" * n + "┼" for n in range(1, 20)]
    for text in inputs:
        assert ours.encode(text, add_special_tokens=False).ids == hf(text, add_special_tokens=False)["input_ids"], text
    read_back = json.loads(ours.to_str())["model"]["vocab"]
    assert read_back == file  # tokenizers reads the file's numbers exactly as Python does


def test_trained_unigram_file_reads_back_exactly(tmp_path):
    from tokenizers import Tokenizer

    write(tmp_path / "zh.jsonl", seed=3, n_chars=60_000)
    r = run_cli("tokenize", "-r", "albert-tiny", "--set", f"output_dir={tmp_path / 'run'}",
                "--set", f"corpus.sources=[{tmp_path / 'zh.jsonl'}]", "--set", "tokenizer.vocab_size=4000",
                cwd=tmp_path)
    assert r.rc == 0, r.output
    (path,) = (tmp_path / "run").glob("tokenizer-*")
    file = json.loads((path / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    back = json.loads(Tokenizer.from_file(str(path / "tokenizer.json")).to_str())["model"]["vocab"]
    assert len(file) > 3000 and back == file


# ------------------------------------------------------------------------------- recipes
@pytest.mark.parametrize("name", ["bert-base-chinese", "chinese-roberta-wwm"])
def test_chinese_base_recipes_have_google_chinese_bert_size(name):
    import torch
    import transformers as tf

    from bertcli.model.count import parameter_counts

    r = load_recipe(name)
    assert r.tokenizer.vocab_size == 21128 and r.tokenizer.split_cjk and r.tokenizer.limit_alphabet == "auto"
    assert r.model.family == "bert"
    config = tf.BertConfig(vocab_size=21128)  # bert-base-chinese's bert_config.json = BertConfig defaults
    with torch.device("meta"):
        theirs = sum(p.numel() for p in tf.BertForPreTraining(config).parameters())
    assert theirs == 102_882_442 == parameter_counts(r.model, r.tokenizer.vocab_size)["total"]


def test_chinese_roberta_wwm_is_mlm_only_bert_with_jieba_whole_words():
    from bertcli.config.model import encoder_config
    from bertcli.model.count import DEFAULT_PAD
    from bertcli.model.hf import to_hf_config

    r = load_recipe("chinese-roberta-wwm")
    d = r.data
    assert (d.objective, d.whole_word, d.word_segmenter, d.masking, d.max_seq_length) == \
        ("none", True, "jieba", "static", 512)
    keys = to_hf_config(encoder_config(r.model, 21128, DEFAULT_PAD["bert"]), "pretraining")
    assert keys["model_type"] == "bert"


# ------------------------------------------------------------------------------ end to end
def test_pretrain_bert_tiny_chinese_end_to_end(zh):
    """The real CLI: bert-tiny-chinese on generated Chinese, shortened (150 steps of 16 x 64)."""
    import math

    import datasets
    import transformers as tf

    out = zh["tmp"] / "e2e"
    r = run_cli("pretrain", "-r", "bert-tiny-chinese", "--set", f"output_dir={out}",
                "--set", f"corpus.sources=[{zh['corpus']}]", "--set", "data.dupe_factor=1",
                "--set", "data.max_seq_length=64", "--set", "data.max_predictions_per_seq=10",
                "--set", "train.batch_size=16", "--set", "train.max_steps=150", "--set", "train.warmup_steps=15",
                "--set", "train.eval_every=150", "--set", "train.eval_batches=20", "--set", "train.save_every=150",
                "--set", "train.log_every=10", "--set", "data.num_proc=1", cwd=zh["tmp"], env={"OMP_NUM_THREADS": "1"})
    assert r.rc == 0, r.output
    assert "warning" not in r.stderr, r.stderr
    (tok_dir,) = out.glob("tokenizer-*")
    info = json.loads((tok_dir / "tokenizer_info.json").read_text(encoding="utf-8"))
    assert info["eval_unk_rate"] < GOAL_UNK and unk_rate(tok_dir, zh["heldout"]) < GOAL_UNK

    # it trains: from ln(V) at initialization to at least one nat below it on validation
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    vocab = info["vocab_size"]
    assert rows[-1]["val_mlm_loss"] < math.log(vocab) - 1.0 and rows[-1]["mlm_loss"] < rows[0]["mlm_loss"] - 0.8

    # whole words from jieba: a masked character's right neighbour is masked far more often than
    # the 15% of independent masking (0.41 measured; most jieba words have two characters)
    (data_dir,) = out.glob("data-*")
    train = datasets.load_from_disk(str(data_dir))["train"].select(range(2000))
    adjacent = masked = 0
    for positions in train["masked_positions"]:
        p = set(positions)
        masked += len(p)
        adjacent += sum(q + 1 in p for q in p)
    assert masked > 10_000 and adjacent / masked > 0.3

    # the checkpoint is a transformers BERT with the Chinese character vocabulary
    model = tf.AutoModelForPreTraining.from_pretrained(str(out / "final"))
    assert type(model).__name__ == "BertForPreTraining" and model.config.vocab_size == vocab
    hf = tf.AutoTokenizer.from_pretrained(str(out / "final"))
    assert hf.tokenize("我们用BERT") == ["我", "们", "用", "bert"]

    # and it fine-tunes: Chinese sentiment classification from the pretrained checkpoint
    from helpers.chinese import finetune_sentiment

    assert finetune_sentiment(out / "final", zh["tmp"], n_train=300, n_dev=80)["accuracy"] >= 0.9
