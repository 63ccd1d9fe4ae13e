"""Vocabulary adaptation (`tokenizer.extend`), for WordPiece, byte-level BPE and Unigram: old rows
bitwise unchanged, each new row the mean of its old pieces', every new token one piece (in
bertcli and in transformers), the embedding rounded up to the family's multiple, and the
extended model predicting on old-vocabulary text exactly as the original did."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ONE_THREAD, run_cli
from continue_fixtures import DOMAIN, domain_documents, general_documents, hf_checkpoint, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models: one thread (conftest.py)

OLD_WORDS = ("team", "visited", "music", "river", "garden", "school", "house", "people", "yesterday", "club")


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
def test_extend_adds_one_piece_tokens_initialized_as_the_mean_of_their_pieces(tmp_path, family):
    import transformers as tf

    from bertcli.config.recipe import load_recipe
    from bertcli.model import load_checkpoint
    from bertcli.model.init_from import init_model
    from bertcli.tokenization.build import ensure_tokenizer
    from bertcli.tokenization.extend import load_extension
    from bertcli.tokenization.load import load_tokenizer

    start = hf_checkpoint(tmp_path / "start", family, [s for d in general_documents(150) for s in d], vocab_size=400)
    write_corpus(tmp_path / "domain.txt", domain_documents(60))
    recipe = load_recipe("continue-tiny", [f"model.init_from={start}", f"corpus.sources=[{tmp_path / 'domain.txt'}]",
                                           f"output_dir={tmp_path / 'run'}", "tokenizer.extend=8"])
    stage = ensure_tokenizer(recipe)
    rows = dict(stage.summary)
    ext = load_extension(stage.path)
    n = len(ext.tokens)
    # BPE's merges make the prefixes tokens too: up to N in all (whole words only when they fit)
    assert n == 8 if family != "roberta" else 0 < n <= 8
    assert rows["tokens added"].startswith(f"{n} ")
    before, after = (float(x) for x in rows["tokens per word"].split(" -> "))
    assert after < before                                     # fewer pieces per corpus word
    old_tok, new_tok = load_tokenizer(start), load_tokenizer(stage.path)
    assert new_tok.vocab_size == old_tok.vocab_size + n
    original, _ = load_checkpoint(start)
    model, notes = init_model(recipe, new_tok, ext)
    V0 = original.config.vocab_size
    assert model.config.vocab_size == ext.vocab_size and ext.vocab_size % 8 == 0 and ext.vocab_size >= new_tok.vocab_size
    emb, bias = model.encoder.embeddings.word.weight.detach(), model.mlm.bias.detach()
    emb0, bias0 = original.encoder.embeddings.word.weight.detach(), original.mlm.bias.detach()
    assert torch.equal(emb[:V0], emb0) and torch.equal(bias[:V0], bias0)          # old rows bitwise
    for token, i, pieces in ext.tokens:
        # the pieces are the old tokenizer's split of the token's text
        assert [p.id for p in old_tok.tokenizer.model.tokenize(token)][:len(pieces)] == pieces
        assert torch.equal(emb[i], emb0[pieces].mean(0))
        assert bias[i] == bias0[pieces].mean()
    # every new word of the domain is one piece in context, in bertcli and in transformers
    hf_new = tf.AutoTokenizer.from_pretrained(stage.path)
    for token, i, _ in ext.tokens:
        word = new_tok.tokenizer.decode([i]).strip()
        text = f"the {word} binds in the cell ."
        ids = new_tok.tokenizer.encode(text).ids
        assert i in ids, (token, word, ids)
        assert hf_new(text)["input_ids"] == ids
        assert len(ids) < len(old_tok.tokenizer.encode(text).ids)
    if family != "roberta":                                   # the domain's own words made it in whole
        assert {t.lstrip("▁") for t, _, _ in ext.tokens} & set(DOMAIN)
    # old-vocabulary text: the same ids, and the same predictions over the old vocabulary
    extended = {t.lstrip("Ġ▁") for t, _, _ in ext.tokens}
    words = [w for w in OLD_WORDS if w not in extended][:4]
    assert len(words) == 4
    text = f"{words[0]} {words[1]} {old_tok.tokens['mask']} {words[2]} {words[3]}"
    ids = new_tok.tokenizer.encode(text).ids
    assert ids == old_tok.tokenizer.encode(text).ids
    x = torch.tensor([ids])
    model.eval()
    with torch.no_grad():
        a = original(x).mlm_logits[0]                         # [T, V0]
        b = model(x).mlm_logits[0]                            # [T, V']
    at = ids.index(old_tok.mask_id)
    assert torch.allclose(b[:, :V0], a, atol=1e-5)
    assert b[at].argmax() == a[at].argmax()                   # fill-mask's top filler is the original's
    assert (b[at, V0:] <= a[at].max() + 1e-5).all()           # a mean of pieces never outranks the best piece


def test_extend_through_pretrain_reports_and_saves_a_larger_vocabulary(tmp_path):
    import transformers as tf

    start = hf_checkpoint(tmp_path / "start", "bert", [s for d in general_documents(150) for s in d], vocab_size=400)
    write_corpus(tmp_path / "domain.txt", domain_documents(60))
    r = run_cli("pretrain", "-r", "continue-tiny", "--init-from", start, "--set", f"corpus.sources=[{tmp_path / 'domain.txt'}]",
                "--set", f"output_dir={tmp_path / 'run'}", "--set", "tokenizer.extend=10", "--set", "train.max_steps=10",
                "--set", "train.eval_every=10", "--set", "train.num_workers=0", "--set", "train.tensorboard=false",
                cwd=tmp_path, env=ONE_THREAD)
    assert r.rc == 0, r.output
    assert "tokenizer.extend: 10 new tokens" in r.stdout
    assert "tokens added" in r.stdout and "tokens per word" in r.stdout      # the adopt stage's report
    final = tmp_path / "run" / "final"
    cfg = json.loads((final / "config.json").read_text())
    v0 = json.loads((start / "config.json").read_text())["vocab_size"]
    assert cfg["vocab_size"] % 8 == 0 and v0 + 10 <= cfg["vocab_size"] < v0 + 18
    hf = tf.BertForPreTraining.from_pretrained(final)
    tok = tf.AutoTokenizer.from_pretrained(final)
    assert len(tok) == v0 + 10
    assert hf.bert.embeddings.word_embeddings.weight.shape[0] == cfg["vocab_size"]
