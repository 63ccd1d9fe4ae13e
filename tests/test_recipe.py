"""Recipes: every shipped recipe validates, overrides work, and each mistake gets a clear message."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from conftest import assert_user_error

from bertcli.config.recipe import Recipe, explain, load_recipe, shipped_recipes
from bertcli.core.errors import UserError

EXPECTED_RECIPES = {
    "bert-tiny", "bert-base", "bert-large", "roberta-tiny", "roberta-base",
    "albert-tiny", "albert-base", "albert-large", "albert-xlarge", "albert-xxlarge", "glue",
    "electra-tiny", "electra-small", "electra-base",
}


def test_all_recipes_of_the_design_table_are_shipped():
    assert EXPECTED_RECIPES <= set(shipped_recipes())


@pytest.mark.parametrize("name", sorted(EXPECTED_RECIPES))
def test_shipped_recipe_validates_and_round_trips(name, tmp_path):
    r = load_recipe(name)
    # Resolution leaves no family default unfilled.
    unset_ok = {"vocab_size", "sample_documents", "init_from", "extend"}   # optional by design
    for section in (r.model, r.tokenizer):
        for f in dataclasses.fields(section):
            assert f.name in unset_ok or getattr(section, f.name) is not None, f.name
    # The resolved recipe saved to disk loads back to the same recipe.
    r.save(tmp_path)
    again = load_recipe(str(tmp_path / "recipe.yaml"))
    assert again.to_dict() == r.to_dict()


@pytest.mark.parametrize(
    "name, L, H, A, E, ffn, vocab, objective, optimizer, lr, batch, steps, warmup",
    [
        ("bert-base", 12, 768, 12, 768, 3072, 30522, "nsp", "adamw", 1e-4, 256, 1_000_000, 10_000),
        ("bert-large", 24, 1024, 16, 1024, 4096, 30522, "nsp", "adamw", 1e-4, 256, 1_000_000, 10_000),
        ("roberta-base", 12, 768, 12, 768, 3072, 50265, "none", "adamw", 6e-4, 8192, 500_000, 24_000),
        ("albert-base", 12, 768, 12, 128, 3072, 30000, "sop", "lamb", 0.00176, 4096, 125_000, 3125),
        ("albert-large", 24, 1024, 16, 128, 4096, 30000, "sop", "lamb", 0.00176, 4096, 125_000, 3125),
        ("albert-xlarge", 24, 2048, 32, 128, 8192, 30000, "sop", "lamb", 0.00176, 4096, 125_000, 3125),
        ("albert-xxlarge", 12, 4096, 64, 128, 16384, 30000, "sop", "lamb", 0.00176, 4096, 125_000, 3125),
    ],
)
def test_shipped_recipes_carry_the_papers_settings(name, L, H, A, E, ffn, vocab, objective, optimizer, lr,
                                                   batch, steps, warmup):
    r = load_recipe(name)
    m, t = r.model, r.train
    assert (m.num_hidden_layers, m.hidden_size, m.num_attention_heads, m.embedding_size,
            m.intermediate_size) == (L, H, A, E, ffn)
    assert r.tokenizer.vocab_size == vocab
    assert r.data.objective == objective
    assert (t.optimizer, t.learning_rate, t.batch_size, t.max_steps, t.warmup_steps) == (
        optimizer, lr, batch, steps, warmup)
    assert r.data.mlm_probability == 0.15
    assert (r.data.mask_replace_prob, r.data.random_replace_prob) == (0.8, 0.1)
    if name.startswith("roberta"):
        assert (m.max_position_embeddings, m.type_vocab_size, r.data.masking, t.beta2) == (514, 1, "dynamic", 0.98)
    if name.startswith("albert"):
        assert (m.sharing, m.num_hidden_groups, r.data.ngram, r.data.whole_word) == ("all", 1, 3, True)
    if name.startswith("bert"):
        assert (r.data.masking, r.data.dupe_factor, r.data.max_predictions_per_seq) == ("static", 10, 20)


def test_recipe_by_name_works_with_and_without_extension_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_recipe("albert-base").name == "albert-base"
    assert load_recipe("albert-base.yaml").name == "albert-base"


def test_a_local_file_wins_and_relative_paths_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("name: mine\ntrain: {max_steps: 7, warmup_steps: 1}\n")
    r = load_recipe("mine.yaml")
    assert (r.name, r.train.max_steps) == ("mine", 7)
    assert r.out.as_posix() == "runs/mine"


def test_family_defaults_are_resolved():
    r = load_recipe(None, ["model.family=roberta", "data.objective=none", "tokenizer.kind=bpe"])
    m = r.model
    assert (m.max_position_embeddings, m.type_vocab_size, m.layer_norm_eps) == (514, 1, 1e-5)
    assert r.tokenizer.special_tokens == "roberta"
    a = load_recipe(None, ["model.family=albert", "data.objective=sop"])
    assert (a.model.embedding_size, a.model.sharing, a.model.hidden_act) == (128, "all", "gelu_new")
    b = load_recipe(None)
    assert (b.model.embedding_size, b.model.sharing, b.tokenizer.strip_accents) == (768, "none", True)


def test_overrides_parse_yaml_values_and_nested_keys():
    r = load_recipe("bert-tiny", [
        "train.learning_rate=5e-4",          # PyYAML reads 5e-4 as a string; we take the number
        "train.max_steps=1_000",
        "data.whole_word=true",
        "corpus.sources=[a.txt, {path: b.jsonl, text_field: body}]",
        "finetune.tasks.rte.epochs=5",
        "model.embedding_size=null",
    ])
    assert r.train.learning_rate == 5e-4 and isinstance(r.train.learning_rate, float)
    assert r.train.max_steps == 1000
    assert r.data.whole_word is True
    assert [s.path for s in r.corpus.sources] == ["a.txt", "b.jsonl"]
    assert r.corpus.sources[1].text_field == "body"
    assert r.finetune.tasks["rte"].epochs == 5.0
    assert r.model.embedding_size == r.model.hidden_size


def _error(spec, overrides=()):
    with pytest.raises(UserError) as info:
        load_recipe(spec, list(overrides))
    return info.value


def test_unknown_key_names_path_line_and_closest_key(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("name: x\ntrain:\n  max_steps: 10\n  lerning_rate: 0.1\n")
    e = _error(str(p))
    assert "train.lerning_rate: unknown key; did you mean train.learning_rate?" in str(e)
    assert e.where == f"{p}:4"


def test_unknown_section_and_override_key():
    assert "did you mean tokenizer" in str(_error(None, ["tokenzier.kind=bpe"]))
    e = _error("bert-tiny", ["train.lerning_rate=1"])
    assert "did you mean train.learning_rate" in str(e) and e.where == "--set train.lerning_rate"


@pytest.mark.parametrize("override, needle", [
    ("train.max_steps=ten", "train.max_steps: expected an integer, got str 'ten'"),
    ("train.max_steps=1.5", "train.max_steps: expected an integer"),
    ("data.whole_word=maybe", "data.whole_word: expected true or false"),
    ("train.learning_rate=[1]", "train.learning_rate: expected a number, got a list"),
    ("train.optimizer=adamm", "is not one of: adamw, lamb; did you mean adamw?"),
    ("data.mlm_probability=1.5", "data.mlm_probability: must be <= 1.0, got 1.5"),
    ("train.batch_size=0", "train.batch_size: must be >= 1, got 0"),
    ("corpus.sources=notalist", "corpus.sources: expected a list"),
    ("model=3", "model: expected a mapping"),
    ("train.max_steps", "expected section.key=value"),
])
def test_wrong_types_and_values_name_the_expectation(override, needle):
    assert needle in str(_error("bert-tiny", [override]))


@pytest.mark.parametrize("overrides, needle", [
    (["model.num_attention_heads=5"], "not divisible by model.num_attention_heads"),
    (["data.max_seq_length=600"], "exceeds the model's 512 positions"),
    (["model.family=roberta", "data.objective=none", "model.max_position_embeddings=512",
      "data.max_seq_length=512"], "RoBERTa positions start at 2"),
    (["data.objective=none", "data.mask_replace_prob=0.95"], "exceed 1"),
    (["model.family=roberta"], "needs a sentence-pair head"),
    (["data.ngram=3"], "needs data.whole_word: true"),
    (["train.micro_batch_size=48"], "not a multiple of train.micro_batch_size"),
    (["model.vocab_size=100"], "differs from tokenizer.vocab_size"),
])
def test_cross_field_rules(overrides, needle):
    e = _error("bert-tiny", overrides)
    assert needle in str(e)


def test_malformed_yaml_names_the_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\ntrain:\n  max_steps: [1, 2\n  lr: 3\n")
    e = _error(str(p))
    assert "malformed YAML" in e.what and e.where.startswith(f"{p}:")
    assert int(e.where.rsplit(":", 1)[1]) in (3, 4)


def test_missing_recipe_suggests_shipped_names():
    e = _error("albert-bse")
    assert "did you mean albert-base" in str(e)


def test_cache_hash_ignores_settings_that_do_not_change_outputs_and_follows_those_that_do():
    base = load_recipe("bert-tiny")
    h = base.section_hash("corpus", "tokenizer", "data")
    assert load_recipe("bert-tiny", ["data.num_proc=7", "train.device=cpu"]).section_hash(
        "corpus", "tokenizer", "data") == h
    assert load_recipe("bert-tiny", ["data.dupe_factor=2"]).section_hash("corpus", "tokenizer", "data") != h
    assert load_recipe("bert-tiny", ["seed=1"]).section_hash("corpus", "tokenizer", "data", "seed") != \
        base.section_hash("corpus", "tokenizer", "data", "seed")
    # A change in a later section does not touch an earlier stage's key.
    assert load_recipe("bert-tiny", ["data.dupe_factor=2"]).section_hash("corpus", "tokenizer") == \
        base.section_hash("corpus", "tokenizer")


def test_stage_directories_follow_their_own_inputs_only(tmp_path):
    from bertcli.config.stages import stage_dir

    base = load_recipe("bert-tiny", [f"output_dir={tmp_path}"])
    reseeded = load_recipe("bert-tiny", [f"output_dir={tmp_path}", "seed=7"])
    # The seed changes the data (masks, pairs) but not the corpus or the tokenizer.
    for stage, same in (("corpus", True), ("tokenizer", True), ("data", False)):
        assert (stage_dir(base, stage, ["files"]) == stage_dir(reseeded, stage, ["files"])) is same, stage
    assert stage_dir(base, "tokenizer", ["a"]) != stage_dir(base, "tokenizer", ["b"])


def test_explain_lists_every_field_with_its_help():
    rows = explain("train")
    keys = {r[0] for r in rows}
    assert {"train.learning_rate", "train.optimizer", "train.max_steps"} <= keys
    assert all(r[3] for r in rows), [r[0] for r in rows if not r[3]]
    for section in ("corpus", "corpus.sources", "tokenizer", "data", "model", "finetune", "finetune.tasks", None):
        assert all(r[3] for r in explain(section)), section
    with pytest.raises(UserError, match="did you mean train"):
        explain("trian")


def test_resolved_recipe_is_plain_yaml():
    text = load_recipe("albert-base").to_yaml()
    data = yaml.safe_load(text)
    internal = {f.name for f in dataclasses.fields(Recipe) if f.metadata.get("internal")}   # source, flags, ...
    assert {"source", "flags", "sweep_threads"} <= internal
    assert set(data) == {f.name for f in dataclasses.fields(Recipe)} - internal             # not recipe keys


def test_cli_reports_recipe_mistakes_with_exit_code_2(cli, tmp_path):
    (tmp_path / "r.yaml").write_text("train:\n  lerning_rate: 1\n")
    res = cli("info", "--recipe", "r.yaml")
    assert_user_error(res, "train.lerning_rate: unknown key; did you mean train.learning_rate?", "r.yaml:2")
    res = cli("info", "--recipe", "bert-tiny", "--set", "train.max_steps=ten")
    assert_user_error(res, "expected an integer")
    res = cli("info", "--recipe", "nope")
    assert_user_error(res, "no recipe file 'nope'")
    res = cli("--debug", "info", "--recipe", "nope")
    assert res.rc != 0 and "Traceback" in res.stderr


def test_cli_info_prints_the_resolved_recipe(cli):
    res = cli("info", "--recipe", "roberta-tiny", "--set", "train.max_steps=9")
    assert res.rc == 0, res.output
    assert "max_steps: 9" in res.stdout and "max_position_embeddings: 130" in res.stdout


def test_a_stage_version_bump_rebuilds_that_stage_and_the_later_ones(tmp_path, monkeypatch):
    """One key scheme for every stage: its sections, the corpus files' fingerprint, and the code
    versions of the stage and of the stages before it."""
    from bertcli.config import stages

    recipe = load_recipe("bert-tiny", [f"output_dir={tmp_path}"])
    before = {s: stages.stage_dir(recipe, s, ["files"]) for s in stages.STAGE_VERSIONS}
    monkeypatch.setitem(stages.STAGE_VERSIONS, "tokenizer", stages.STAGE_VERSIONS["tokenizer"] + 1)
    after = {s: stages.stage_dir(recipe, s, ["files"]) for s in stages.STAGE_VERSIONS}
    assert before["corpus"] == after["corpus"]
    assert before["tokenizer"] != after["tokenizer"] and before["data"] != after["data"]
