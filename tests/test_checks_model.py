"""A checkpoint directory is input: config.json is checked against the safetensors headers before
any model is built (no allocation from declared sizes), the tokenizer against the model, and a
sharded index may only name files inside the directory."""

from __future__ import annotations

import json
import os

import pytest
from helpers.models import PAD, VOCAB, tiny_section
from safetensors.torch import load_file, save_file

import bertcli.model.checkpoint as model_checkpoint
from bertcli.core.errors import UserError
from bertcli.model import build_model, load_checkpoint, save_checkpoint
from bertcli.tokenization.load import SPECIAL_TOKENS


def write_tokenizer(directory, family: str, size: int = VOCAB) -> None:
    """A WordLevel-free, minimal tokenizer.json: WordPiece with `family`'s special tokens first
    (in that family's id order) and filler pieces up to `size` ids."""
    from tokenizers import Tokenizer, models

    specials = list(SPECIAL_TOKENS[family].values())
    vocab = {t: i for i, t in enumerate(specials)}
    vocab.update({f"w{i}": i for i in range(len(specials), size)})
    unk = SPECIAL_TOKENS[family]["unk"]
    tok = Tokenizer(models.WordPiece(vocab, unk_token=unk))
    tok.save(str(directory / "tokenizer.json"))


def saved(tmp_path, family="bert", name="ckpt", tokenizer=None, **changes):
    d = tmp_path / name
    save_checkpoint(build_model(tiny_section(family, **changes), VOCAB, PAD[family]), d)
    if tokenizer:
        write_tokenizer(d, tokenizer)
    return d


def edit_config(d, **values):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(values)
    cfg["bertcli"].update({k: v for k, v in values.items() if k in cfg["bertcli"]})  # bertcli's own block wins
    (d / "config.json").write_text(json.dumps(cfg))


def forbid_building(monkeypatch):
    """From here on, reading tensors or building a model is a test failure: the checks of
    config.json must come first (they read the safetensors headers only)."""
    def refuse(*a, **k):
        raise AssertionError("tensors were read or a model was built from an unchecked config.json")
    for name in ("PreTrainingModel", "SequenceClassifier", "read_weights"):
        monkeypatch.setattr(model_checkpoint, name, refuse)


@pytest.mark.parametrize("family,key,value,names", [
    ("bert", "vocab_size", 10 ** 12, "vocab_size 1,000,000,000,000"),
    ("bert", "hidden_size", 4 * 10 ** 5, "hidden_size 400,000"),
    ("bert", "intermediate_size", 10 ** 9, "intermediate_size 1,000,000,000"),
    ("bert", "max_position_embeddings", 10 ** 8, "max_position_embeddings 100,000,000"),
    ("bert", "type_vocab_size", 10 ** 7, "type_vocab_size 10,000,000"),
    ("bert", "num_hidden_layers", 10 ** 5, "num_hidden_layers 100000, the weights hold 2 stored layers"),
    ("roberta", "vocab_size", 5 * 10 ** 9, "vocab_size 5,000,000,000"),
    ("albert", "embedding_size", 10 ** 6, "embedding_size 1,000,000"),
    ("albert", "intermediate_size", 10 ** 8, "intermediate_size 100,000,000"),
])
def test_absurd_declared_shapes_fail_with_a_message_before_anything_is_allocated(
        tmp_path, monkeypatch, family, key, value, names):
    d = saved(tmp_path, family)
    forbid_building(monkeypatch)
    edit_config(d, **{key: value, **({"num_attention_heads": 4} if key == "hidden_size" else {})})
    with pytest.raises(UserError) as info:
        load_checkpoint(d)
    assert names in info.value.what and "config.json" in info.value.where, info.value.what


def test_a_consistent_checkpoint_still_loads(tmp_path):
    for family in ("bert", "roberta", "albert"):
        model, _ = load_checkpoint(saved(tmp_path, family, name=family, tokenizer=family))
        assert model.config.family == family


@pytest.mark.parametrize("model_family,tok_family,needles", [
    ("roberta", "bert", ["padding id is 0, config.json's pad_token_id 1", "[CLS] [SEP] [MASK] are bert's"]),
    ("bert", "roberta", ["padding id is 1, config.json's pad_token_id 0", "<s> </s> <mask> are roberta's"]),
    ("albert", "roberta", ["padding id is 1", "roberta's; a albert model uses [CLS] [SEP] [MASK]"]),
])
def test_a_tokenizer_of_another_family_is_refused_naming_what_disagrees(tmp_path, model_family, tok_family, needles):
    d = saved(tmp_path, model_family, tokenizer=tok_family)
    with pytest.raises(UserError) as info:
        load_checkpoint(d)
    assert "the tokenizer does not belong to this model" in info.value.what
    for n in needles:
        assert n in info.value.what, info.value.what


def test_a_tokenizer_larger_than_the_embedding_is_refused(tmp_path):
    d = saved(tmp_path, "bert")
    write_tokenizer(d, "bert", size=VOCAB + 20)
    with pytest.raises(UserError, match=f"tokenizer has {VOCAB + 20} tokens, the model {VOCAB} embeddings"):
        load_checkpoint(d)


def test_the_cli_refuses_a_mismatched_tokenizer_with_one_message(tmp_path, cli):
    from conftest import assert_user_error

    d = saved(tmp_path, "roberta", tokenizer="bert")
    assert_user_error(cli("fill-mask", "-c", d, "a [MASK] b"), "does not belong to this model", "pad_token_id 1")


# ---------------------------------------------------------------------------------- shards
def shard(d, outside=None, how="relative"):
    """Split d's model.safetensors into two shards + index; the second one named as `how` says."""
    state = load_file(str(d / "model.safetensors"))
    (d / "bertcli-manifest.json").unlink(missing_ok=True)  # resharded by hand: as the manifest check's fix says
    names = sorted(state)
    half = len(names) // 2
    save_file({k: state[k] for k in names[:half]}, str(d / "part-1.safetensors"))
    second = {k: state[k] for k in names[half:]}
    if how == "relative":
        save_file(second, str(d / "part-2.safetensors"))
        ref = "part-2.safetensors"
    else:
        outside.mkdir(exist_ok=True)
        save_file(second, str(outside / "part-2.safetensors"))
        if how == "absolute":
            ref = str(outside / "part-2.safetensors")
        elif how == "dotdot":
            ref = os.path.relpath(outside / "part-2.safetensors", d)
        elif how == "symlink":
            (d / "part-2.safetensors").symlink_to(outside / "part-2.safetensors")
            ref = "part-2.safetensors"
        elif how == "symlinked_dir":
            (d / "sub").symlink_to(outside, target_is_directory=True)
            ref = "sub/part-2.safetensors"
    (d / "model.safetensors").unlink()
    wmap = {k: "part-1.safetensors" for k in names[:half]} | {k: ref for k in names[half:]}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wmap}))


def test_a_sharded_checkpoint_inside_its_directory_loads(tmp_path):
    d = saved(tmp_path)
    reference, _ = load_checkpoint(d)
    shard(d)
    model, _ = load_checkpoint(d)
    for a, b in zip(reference.state_dict().values(), model.state_dict().values()):
        assert (a == b).all()


@pytest.mark.parametrize("how,needle", [("absolute", "outside the checkpoint directory"),
                                        ("dotdot", "outside the checkpoint directory"),
                                        ("symlink", "a symbolic link"), ("symlinked_dir", "a symbolic link")])
def test_shards_outside_the_directory_are_refused(tmp_path, how, needle):
    d = saved(tmp_path)
    shard(d, outside=tmp_path / "elsewhere", how=how)
    with pytest.raises(UserError, match=needle) as info:
        load_checkpoint(d)
    assert info.value.where.endswith("model.safetensors.index.json")


def test_a_shard_name_that_is_no_string_is_refused(tmp_path):
    d = saved(tmp_path)
    shard(d)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"][next(iter(index["weight_map"]))] = 7
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(UserError, match="not a file name|unreadable safetensors index"):
        load_checkpoint(d)
