"""User mistakes the data stage catches, each with what, where and how to fix it."""

from __future__ import annotations

from bertcli.config.recipe import Recipe
from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.data.words import load_segmenter
from bertcli.tokenization.load import SPECIAL_TOKENS


def check_recipe(recipe: Recipe) -> None:
    """Before any work: settings that cannot be built."""
    d, where = recipe.data, recipe.source
    if d.word_segmenter != "none":
        if not d.whole_word:
            raise UserError(f"data.word_segmenter {d.word_segmenter} groups characters into words for "
                            "whole-word masking, which is off", where=where,
                            fix="set data.whole_word: true, or data.word_segmenter: none")

        load_segmenter(d.word_segmenter)  # a clear error now rather than in a worker later


def check_tokenizer(recipe: Recipe, tok) -> None:
    """The trained tokenizer must be the one the recipe describes."""
    t, m, where = recipe.tokenizer, recipe.model, f"{recipe.source}: tokenizer"
    if tok.kind != t.kind:
        raise UserError(f"the tokenizer in {tok.path} is {tok.kind}, the recipe asks for tokenizer.kind {t.kind}",
                        where=where, fix="rebuild it with `bertcli tokenize --recipe R --rebuild`")
    assert t.special_tokens is not None, "recipe resolution names the special tokens"
    want = SPECIAL_TOKENS[t.special_tokens]
    have = {role: tok.tokens.get(role) for role in want}
    if have != want:
        diff = ", ".join(f"{r}: {have[r]} (recipe: {want[r]})" for r in want if have[r] != want[r])
        raise UserError(f"the tokenizer's special tokens differ from tokenizer.special_tokens "
                        f"{t.special_tokens}: {diff}", where=where,
                        fix="rebuild the tokenizer with `bertcli tokenize --recipe R --rebuild`, or set "
                            "tokenizer.special_tokens to the set it was trained with")
    if m.vocab_size is not None and m.vocab_size != tok.vocab_size:
        raise UserError(
            f"the tokenizer has {tok.vocab_size:,} tokens but model.vocab_size is {m.vocab_size:,} "
            f"(a corpus this size supports {tok.vocab_size:,} of the {t.vocab_size:,} asked)",
            where=f"{recipe.source}: model.vocab_size",
            fix=f"leave model.vocab_size unset (it follows the tokenizer), or set tokenizer.vocab_size "
                f"and model.vocab_size to {tok.vocab_size} or less, or use a larger corpus")
    if tok.mask_id in (tok.pad_id, tok.cls_id, tok.sep_id):
        raise UserError(f"the tokenizer's mask token has the id of another special token ({tok.mask_id})",
                        where=str(tok.path))


def _alternatives(recipe: Recipe, *settings: tuple[str, object]) -> str:
    """The settings a fix line may offer, as the running command spells them (its flags, or
    the recipe's keys); those it cannot set are left out."""
    said = [s for s in (recipe.setting(k, v) for k, v in settings) if s]
    return " or ".join(said)


def check_tokenized(recipe: Recipe, info: dict, built: bool = False) -> None:
    """After tokenizing (and, with `built`, after building): a corpus the objective can use."""
    d = recipe.data
    key = (recipe.flags or {}).get("data.objective", "data.objective")     # evaluate's --objective
    where = f"{recipe.source}: {key}"
    t = info["train"]
    if not built:
        if t["corpus_tokens"] == 0:
            raise UserError(f"the training documents ({t['corpus_documents']:,}) contain no token",
                            where=f"{recipe.source}: corpus", fix="check the corpus sources")
        if d.objective in ("nsp", "sop") and t["multi_sentence_documents"] == 0:
            layout = _alternatives(recipe, ("corpus.sources[].layout", "documents"), ("corpus.sentence_split", "always"))
            none = recipe.setting("data.objective", "none")
            raise UserError(
                f"every training document ({t['documents']:,}) has a single sentence, and {key} {d.objective} "
                "pairs consecutive sentences of one document (0 documents have 2 or more)",
                where=where,
                fix="give documents of several sentences: Google's format is one sentence per line with a "
                    "blank line between documents" + (f"; for one document per line use {layout}" if layout else "")
                    + (f"; or use {none} (MLM only)" if none else ""))
        if d.objective == "nsp" and t["documents"] < 2:
            other = _alternatives(recipe, ("data.objective", "sop"))
            none = recipe.setting("data.objective", "none")
            raise UserError(
                f"the corpus is too small for NSP: {t['documents']} training document, and a random "
                "next sentence must come from another document", where=where,
                fix="add documents (at least 2; many more for a useful model)"
                    + (f", or use {other} (or {none}: MLM only)" if other else ""))
        share = t["multi_sentence_documents"] / max(1, t["documents"])
        if d.objective in ("nsp", "sop") and share < 0.5:
            console.log(f"warning: only {t['multi_sentence_documents']:,} of {t['documents']:,} training "
                        f"documents have 2 or more sentences; {d.objective} learns little from the rest")
    elif t["instances"] == 0:
        raise UserError(
            f"the corpus is too small for one training instance: {t['documents']:,} documents, "
            f"{t['corpus_tokens']:,} tokens", where=f"{recipe.source}: corpus",
            fix="use a larger corpus")
