"""Chinese text handling: sentence splitting, full-width forms as BERT treats them, English inside
Chinese as WordPiece pieces, whole words from jieba and from English."""

from __future__ import annotations

import unicodedata

import pytest
from chinese_text import documents

from bertcli.config.recipe import load_recipe
from bertcli.corpus.build import split_sentences
from bertcli.data import words
from bertcli.tokenization.load import CJK_CHAR
from bertcli.tokenization.train import new_tokenizer, text_encoder, train_tokenizer


@pytest.mark.parametrize("text, expected", [
    ("他说：“你好。”我们走吧。", ["他说：“你好。”", "我们走吧。"]),                # closer after 。
    ("「真的吗？！」她问。『是的。』", ["「真的吗？！」", "她问。", "『是的。』"]),
    ("他（笑着）说：好的。）然后走了", ["他（笑着）说：好的。）", "然后走了"]),
    ("“好！”，他说。然后走了", ["“好！”，他说。", "然后走了"]),                   # a comma: one sentence
    ("白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",                            # verse: clauses whole
     ["白日依山尽，黄河入海流。", "欲穷千里目，更上一层楼。"]),
    ("床前明月光，\n疑是地上霜。\n举头望明月，\n低头思故乡。",                       # hard-wrapped lines
     ["床前明月光，疑是地上霜。", "举头望明月，低头思故乡。"]),
    ("我们用BERT模型。It works. 好！Why?他走了", ["我们用BERT模型。", "It works.", "好！", "Why?", "他走了"]),
    ("价格1.5亿元……真的吗", ["价格1.5亿元……", "真的吗"]),
    ("中文\nEnglish line\nwrapped", ["中文 English line wrapped"]),
])
def test_chinese_sentence_splitting(text, expected):
    assert split_sentences(text) == expected


# ---------------------------------------------------------------------------- full-width forms
def google_basic_tokenize(text: str, lower: bool = True) -> list[str]:
    """Google BERT's BasicTokenizer (tokenization.py) written from its definition: clean control
    characters, spaces around CJK ideographs, whitespace split, lower case + NFD accent strip,
    split off punctuation (ASCII ranges or Unicode category P*). No NFKC anywhere."""
    def is_punct(c):
        o = ord(c)
        return 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126 or \
            unicodedata.category(c).startswith("P")

    chars = []
    for c in text:
        if ord(c) in (0, 0xFFFD) or (unicodedata.category(c).startswith("C") and c not in "\t\n\r"):
            continue
        chars.append(" " if c in " \t\n\r" or unicodedata.category(c) == "Zs" else
                     f" {c} " if CJK_CHAR.match(c) else c)
    out = []
    for word in "".join(chars).split():
        if lower:
            word = "".join(c for c in unicodedata.normalize("NFD", word.lower()) if unicodedata.category(c) != "Mn")
        cur = ""
        for c in word:
            if is_punct(c):
                out += [cur, c] if cur else [c]
                cur = ""
            else:
                cur += c
        if cur:
            out.append(cur)
    return out


FULL_WIDTH = ["ＡＢＣ１２３，ｘｙｚ！", "全角：（ＢＥＲＴ）模型＂引号＂ｅｎｄ．", "Ｃａｆé　中文＄１００＾＋＝",
              "混合English和１２３数字。Ｎｏ．５", "ＡＢＣ abc Ａbc"]


@pytest.mark.parametrize("lower", [True, False])
def test_full_width_forms_are_pretokenized_as_google_bert_does(lower):
    """WordPiece keeps full-width forms as BERT does: letters lowercased in full width (Ａ -> ａ),
    digits full width, full-width punctuation split off like ASCII punctuation, symbols (＄＾＋)
    left in the word; and transformers' BertTokenizer rebuilds the same pipeline."""
    cfg = load_recipe("bert-tiny-chinese", [f"tokenizer.lowercase={str(lower).lower()}"]).tokenizer
    tok = new_tokenizer(cfg)
    for text in FULL_WIDTH:
        ours = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text))]
        assert ours == google_basic_tokenize(text, lower), text
    assert google_basic_tokenize("ＡＢＣ１２３，") == ["ａｂｃ１２３", "，"]  # what the README documents


# ------------------------------------------------------------------ mixed text, whole words
MIXED = "我们用Transformer做pretraining，GPU训练2025年的BERT模型。"


@pytest.fixture(scope="module")
def wordpiece():
    import datasets

    sents = [s for d in documents(seed=7, n_chars=150_000) for p in d for s in split_sentences(p)]
    sents += [MIXED, "模型的tokenizer和pretraining数据。"] * 20
    cfg = load_recipe("bert-tiny-chinese", ["tokenizer.vocab_size=4000"]).tokenizer
    ds = datasets.Dataset.from_dict({"sentences": [sents[i: i + 20] for i in range(0, len(sents), 20)]})
    alphabet = "".join(sorted({c for s in sents for c in s}))
    return text_encoder(train_tokenizer(cfg, ds, alphabet, where="test"))


@pytest.mark.parametrize("text, english", [
    (MIXED, ("transformer", "pretraining", "gpu", "bert")),
    ("他说Retokenizing的GPUs很快。", ("retokenizing", "gpus")),   # words never seen: several pieces
])
def test_english_inside_chinese_stays_wordpiece_pieces(wordpiece, text, english):
    enc = wordpiece.encode(text, add_special_tokens=False)
    assert "[UNK]" not in enc.tokens, [(t, text[a:b]) for t, (a, b) in zip(enc.tokens, enc.offsets) if t == "[UNK]"]
    for word in english:
        # the pieces of the English word, in order, spell it: a first piece then ## continuations
        i = next(i for i, (a, _) in enumerate(enc.offsets) if text.lower()[a:].startswith(word))
        pieces = []
        while "".join(p.removeprefix("##") for p in pieces) != word:
            pieces.append(enc.tokens[i + len(pieces)])
        assert not pieces[0].startswith("##") and all(p.startswith("##") for p in pieces[1:]), pieces
        assert word != "retokenizing" or len(pieces) > 1
    # every CJK ideograph is a token of its own (character-level vocabulary)
    assert all(len(text[a:b]) == 1 for a, b in enc.offsets if CJK_CHAR.match(text[a]))


def test_whole_words_are_jieba_words_and_english_words(wordpiece):
    import jieba

    segment = words.load_segmenter("jieba")
    markers = words.start_marker_table(wordpiece, "wordpiece")
    enc = wordpiece.encode(MIXED, add_special_tokens=False)
    starts = words.word_starts(enc.ids, enc.word_ids, markers, MIXED, enc.offsets, segment)
    spans, begin, end = [], None, 0
    for i, (a, b) in enumerate(enc.offsets):
        if starts[i]:
            if begin is not None:
                spans.append(MIXED[begin:end])
            begin = a
        end = b
    spans.append(MIXED[begin:end])
    expected = [w for w in jieba.cut(MIXED, HMM=True) if w.strip()]
    assert spans == expected
    assert "Transformer" in spans and "pretraining" in spans and "我们" in spans
