"""`bertcli info`: what a recipe would build where, and the size of its model."""

from __future__ import annotations

from bertcli.config.phases import plan
from bertcli.config.recipe import Recipe
from bertcli.config.stages import is_complete
from bertcli.core.errors import UserError
from bertcli.corpus.build import corpus_dir
from bertcli.data.build import data_dir
from bertcli.model.count import flops_per_token, parameter_counts
from bertcli.tokenization.build import tokenizer_dir


def describe(recipe: Recipe) -> list[tuple[str, list[tuple[str, object]]]]:
    """Summary tables: stage directories (built or missing), then parameter counts and FLOPs."""
    rows: list[tuple[str, object]] = []
    try:
        rows += _stage_rows(recipe)
    except UserError as e:
        # The stage directories are keyed by the corpus (its files' sizes and dates), which a
        # recipe may leave for the user to fill in (bert-base-chinese ships without sources):
        # the corpus is needed to build, not to describe the rest.
        rows.append(("stages", f"not known yet: {e.what} ({e.where}); to build them, {e.fix}"))
    run = recipe.out
    final = run / "final"
    rows.append(("run", f"{run}  ({'finished' if is_complete(final) else 'not finished'})"))
    tables = [("stages", rows)]

    m = recipe.model
    vocab = m.vocab_size or recipe.tokenizer.vocab_size
    counts = parameter_counts(m, vocab)
    size_rows: list[tuple[str, object]] = [(k.replace("_", " "), v) for k, v in counts.items()]
    seq = recipe.data.max_seq_length
    flops = flops_per_token(m, vocab, seq, recipe.data.mlm_probability)
    size_rows.append((f"training FLOPs per token (seq {seq})", f"{flops:.3e}"))
    run_flops = 0.0  # each phase at its own length and batch (one phase without train.phases)
    for ph in plan(recipe):
        d, t = ph.recipe.data, ph.recipe.train
        run_flops += flops_per_token(m, vocab, d.max_seq_length, d.mlm_probability) * ph.steps * t.batch_size * d.max_seq_length
    size_rows.append(("training FLOPs for the run (upper bound)", f"{run_flops:.3e}"))
    tables.append((f"model: {m.family}, vocab {vocab:,}", size_rows))
    return tables


def _stage_rows(recipe: Recipe) -> list[tuple[str, object]]:
    """Each stage's directory and whether it is built (each phase's data a stage of its own)."""
    rows: list[tuple[str, object]] = []
    for stage, path in (("corpus", corpus_dir(recipe)), ("tokenizer", tokenizer_dir(recipe)),
                        ("data", data_dir(recipe))):
        rows.append((stage, f"{path}  ({'built' if is_complete(path) else 'missing'})"))
    if recipe.train.phases:
        rows.pop()
        for ph in plan(recipe):
            path = data_dir(ph.recipe)
            rows.append((f"data {ph.name}", f"{path}  ({'built' if is_complete(path) else 'missing'}; "
                                            f"steps {ph.start + 1:,}-{ph.end:,})"))
    return rows
