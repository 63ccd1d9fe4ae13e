"""`bertcli fill-mask` through the real CLI on a tiny checkpoint that memorized a few sentences,
and the model's bad-input errors through the CLI (exit 2, one message)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ONE_THREAD, assert_user_error
from test_model_util import one_thread, tiny_section  # noqa: F401 (fixture)

from bertcli.model import build_model, save_checkpoint
from bertcli.serve.fill_mask import fill_mask, render

SENTENCES = ["the cat sat on the mat", "a dog ran in the park"]
WORDS = sorted({w for s in SENTENCES for w in s.split()})


def write_tokenizer(directory):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    directory.mkdir(parents=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"mask_token": "[MASK]", "pad_token": "[PAD]"}))
    return tok


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny BERT trained until it fills every word of SENTENCES back in."""
    root = tmp_path_factory.mktemp("fill")
    tok = write_tokenizer(root / "tok")
    torch.manual_seed(0)
    model = build_model(tiny_section("bert", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
                        tok.get_vocab_size(), 0)
    # Every (sentence, word) pair once per step: the word masked, the model asked for it.
    variants = [(torch.tensor(tok.encode(s).ids), p) for s in SENTENCES for p in range(1, 7)]
    ids = torch.stack([row for row, _ in variants])                    # [12, 8]
    positions = torch.tensor([i * ids.shape[1] + p for i, (_, p) in enumerate(variants)])
    labels = ids.view(-1)[positions].clone()
    ids.view(-1)[positions] = 4                                         # [MASK]
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(100):
        loss = torch.nn.functional.cross_entropy(model(ids, mlm_positions=positions).mlm_logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1
    save_checkpoint(model.eval(), root / "ckpt", tokenizer_dir=root / "tok")
    return root / "ckpt"


def test_fill_mask_json_through_the_cli(cli, checkpoint):
    res = cli("fill-mask", "-c", checkpoint, "a [MASK] ran in the [MASK]", "--top-k", "4", "--json", env=ONE_THREAD)
    assert res.rc == 0, res.output
    results = json.loads(res.stdout)
    assert [r["position"] for r in results] == [2, 6]
    for r, expected in zip(results, ["dog", "park"]):
        probs = [c["probability"] for c in r["candidates"]]
        assert len(probs) == 4 and probs == sorted(probs, reverse=True)
        assert 0 < sum(probs) <= 1 + 1e-6
        assert r["candidates"][0]["token"] == expected and probs[0] > 0.5
        assert r["candidates"][0]["word"] == expected       # the decoded piece, as the text shows it
    # Each mask is filled on its own; the other one is a special token, left out of the text.
    assert results[1]["candidates"][0]["text"] == "a ran in the park"
    # The CLI's figures are the model's own softmax at the mask.
    direct = fill_mask(checkpoint, "a <mask> ran in the <mask>", top_k=4)  # either spelling works
    assert [[c["id"] for c in r["candidates"]] for r in direct] == \
        [[c["id"] for c in r["candidates"]] for r in results]
    assert direct[0]["candidates"][0]["probability"] == pytest.approx(results[0]["candidates"][0]["probability"])


def test_fill_mask_table(checkpoint, capsys):
    render(fill_mask(checkpoint, "the cat sat on the [MASK]", top_k=3))
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert lines[0].startswith("mask 1 of 1 (token 6 of the encoded input") and len(lines) == 5
    assert lines[1].split()[:2] == ["filler", "probability"]
    assert lines[2].split()[0] == "mat" and lines[2].endswith("the cat sat on the mat")
    assert all(ln == ln.rstrip() for ln in lines)          # piped output: no padding


def test_fill_mask_errors_exit_2(cli, checkpoint, tmp_path):
    assert_user_error(cli("fill-mask", "-c", checkpoint, "no mask here", env=ONE_THREAD), "no mask token")
    assert_user_error(cli("fill-mask", "-c", tmp_path / "nowhere", "a [MASK]"), "does not exist")
    gpt = tmp_path / "gpt"
    gpt.mkdir()
    (gpt / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert_user_error(cli("fill-mask", "-c", gpt, "a [MASK]"), "unsupported model_type 'gpt2'")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((checkpoint / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    assert_user_error(cli("fill-mask", "-c", pickled, "a [MASK]", env=ONE_THREAD), "pytorch_model.bin", "never loads",
                      "save_pretrained")


def test_byte_level_filler_does_not_double_the_space():
    """Byte-level BPE keeps the space before <mask> as a piece of its own; a filler that brings
    its own space replaces it (`while the upon was quiet`, not `while the  upon`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from bertcli.serve.fill_mask import filled_text

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["while the night was quiet upon the hill"] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>", "<pad>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    enc = tok.encode("while the <mask> was quiet")
    pos = enc.tokens.index("<mask>")
    assert enc.tokens[pos - 1] == "Ġ"                       # the case: a lone space piece before the mask
    upon, bare = tok.token_to_id("Ġupon"), tok.token_to_id("while")
    assert filled_text(tok, enc.ids, pos, upon) == "while the upon was quiet"
    assert filled_text(tok, enc.ids, pos, bare) == "while the while was quiet"   # no space of its own: kept


def test_wordpiece_filler_text_is_unchanged(checkpoint):
    from bertcli.serve.fill_mask import filled_text
    from bertcli.tokenization.load import load_tokenizer

    tok = load_tokenizer(checkpoint).tokenizer
    enc = tok.encode("the cat sat on the [MASK]")
    pos = enc.tokens.index("[MASK]")
    assert filled_text(tok, enc.ids, pos, tok.token_to_id("park")) == "the cat sat on the park"
