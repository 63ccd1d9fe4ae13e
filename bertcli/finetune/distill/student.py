"""The student: a smaller model of the teacher's family, with the teacher's tokenizer and head.

    from_teacher(teacher, K, dropout)    the teacher's embeddings, head and K of its layers,
                                         chosen uniformly ending at the top one (`pick_layers`)
    from_spec(spec, teacher, task, ...)  a bertcli checkpoint directory (its encoder, a fresh task
                                         head) or a recipe (its `model` section, random weights)

Either way `layer_map` says which teacher layer each student layer learns from (the hidden-state
and attention losses); index 0 of the hidden states is the embeddings' output on both sides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bertcli.config.checkpoint import read_config
from bertcli.config.model import encoder_config
from bertcli.config.recipe import load_recipe
from bertcli.core.errors import UserError
from bertcli.model.checkpoint import load_checkpoint
from bertcli.model.heads import init_weights
from bertcli.tokenization.load import load_tokenizer


def pick_layers(depth: int, k: int) -> list[int]:
    """K of `depth` layers (0-based), evenly spaced and ending at the last: layer (m+1)*depth/K - 1
    for student layer m. 12 -> 6 keeps every other layer (DistilBERT's rule, shifted up by one so
    that the head reads the layer it was trained on); 12 -> 4 keeps 2, 5, 8, 11 (TinyBERT's
    mapping g(m) = m * depth / K, 1-based)."""
    if not 1 <= k <= depth:
        raise ValueError(f"k={k} outside 1..{depth}")
    return [(m + 1) * depth // k - 1 for m in range(k)]


def _dropout(c, dropout: float | None):
    if dropout is None:
        return c
    return c.replace(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, classifier_dropout=dropout)


def from_teacher(teacher: Any, k: int, dropout: float | None, where: str) -> tuple[Any, list[int]]:
    """A K-layer copy of `teacher` (same class, hidden size, embeddings and head); (student,
    the teacher layer of each student layer). Shared layers (ALBERT) keep their blocks: the
    student runs them K times instead of L."""
    c = teacher.config
    depth = c.num_hidden_layers
    if k > depth:
        raise UserError(f"--student-layers {k} is more than the teacher's {depth} layers", where=where,
                        fix=f"give --student-layers between 1 and {depth} (the student is a subset of the teacher's layers)")
    if c.sharing != "none" and k % c.num_hidden_groups:
        raise UserError(f"--student-layers {k} is not a multiple of the teacher's {c.num_hidden_groups} layer groups",
                        where=where, fix=f"give a multiple of {c.num_hidden_groups}")
    chosen = pick_layers(depth, k)
    sc = _dropout(c.replace(num_hidden_layers=k), dropout)
    student = type(teacher)(sc)
    if getattr(teacher.encoder, "pooler", 1) is None:        # token / QA models are built without one
        student.encoder.pooler = None
    state = teacher.state_dict()
    if c.sharing == "none":
        # student block m <- teacher block chosen[m]; every other tensor has the same name
        rename = {}
        for m, t in enumerate(chosen):
            for kind in ("attention", "ffn"):
                rename[f"encoder.{kind}.{m}."] = f"encoder.{kind}.{t}."
        mapped = {}
        for name in student.state_dict():
            src = name
            for mine, theirs in rename.items():
                if name.startswith(mine):
                    src = theirs + name[len(mine):]
                    break
            mapped[name] = state[src]
        state = mapped
    student.load_state_dict(state, strict=True)
    return student.train(), chosen


def _family_and_vocab(student_cfg, teacher_cfg, spec: str) -> None:
    if student_cfg.family != teacher_cfg.family:
        raise UserError(f"the student {spec} is a {student_cfg.family} model and the teacher a {teacher_cfg.family} one",
                        where=spec, fix=f"give a {teacher_cfg.family} student (or --student-layers K for a subset of the "
                                        "teacher's layers)")
    if student_cfg.vocab_size != teacher_cfg.vocab_size or student_cfg.pad_token_id != teacher_cfg.pad_token_id:
        raise UserError(f"the student {spec} has a vocabulary of {student_cfg.vocab_size:,} tokens (padding id "
                        f"{student_cfg.pad_token_id}) and the teacher {teacher_cfg.vocab_size:,} (padding id "
                        f"{teacher_cfg.pad_token_id}): the student must read the teacher's token ids", where=spec,
                        fix="pretrain the student with the teacher's tokenizer (tokenizer.from: TEACHER), or use "
                            "--student-layers K")


def _same_tokenizer(student_dir: Path, teacher_dir: Path) -> None:
    a, b = load_tokenizer(student_dir).tokenizer, load_tokenizer(teacher_dir).tokenizer
    if a.get_vocab() != b.get_vocab():
        raise UserError(f"the student {student_dir} has another vocabulary than the teacher {teacher_dir} (same size, "
                        "other tokens)", where=str(student_dir),
                        fix="pretrain the student with the teacher's tokenizer, or use --student-layers K")


def from_spec(spec: str, teacher: Any, teacher_dir: Path, task, dropout: float | None, seed: int
              ) -> tuple[Any, list[int]]:
    """A student from a checkpoint directory or a recipe of the teacher's family and
    vocabulary; its task head starts fresh. (student, teacher layer of each student layer:
    the uniform mapping of `pick_layers`)."""
    tc = teacher.config
    torch.manual_seed(seed)
    path = Path(spec)
    if path.is_dir():
        _family_and_vocab(read_config(path), tc, spec)
        _same_tokenizer(path, teacher_dir)
        student, _ = load_checkpoint(path, head=task.head, dropout=dropout, **task.model_kwargs)
    else:
        recipe = load_recipe(spec, [])
        if recipe.model.family != tc.family:
            raise UserError(f"the student recipe {spec} builds a {recipe.model.family} model and the teacher is a "
                            f"{tc.family} one", where=f"{recipe.source}: model.family",
                            fix=f"give a {tc.family} recipe (or --student-layers K for a subset of the teacher's layers)")
        sc = encoder_config(recipe.model, tc.vocab_size, tc.pad_token_id, labels=tc.labels)
        sc = _dropout(sc, dropout)
        student = type(teacher)(sc)
        if getattr(teacher.encoder, "pooler", 1) is None:
            student.encoder.pooler = None
        init_weights(student)
    depth, k = tc.num_hidden_layers, student.config.num_hidden_layers
    if k > depth:
        raise UserError(f"the student {spec} has {k} layers, more than the teacher's {depth}", where=spec,
                        fix="a student is smaller than its teacher: give one with fewer layers")
    return student.train(), pick_layers(depth, k)
