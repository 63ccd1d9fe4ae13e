"""Distillation's pieces: the losses (zero with zero gradients when the student is the teacher,
the T^2 scaling, the hidden and attention losses), the uniform layer choice, the student made
from the teacher's layers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bertcli.config.model import EncoderConfig
from bertcli.finetune.distill import losses
from bertcli.finetune.distill.student import from_teacher, pick_layers
from bertcli.model.heads import SequenceClassifier
from bertcli.model.task_heads import SpanExtractor, TokenClassifier


def tiny_config(layers: int = 4, hidden: int = 32, heads: int = 2, **kw) -> EncoderConfig:
    base = dict(family="bert", vocab_size=50, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=2 * hidden, embedding_size=hidden, hidden_act="gelu",
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=64,
                type_vocab_size=2, layer_norm_eps=1e-12, initializer_range=0.2, sharing="none",
                num_hidden_groups=1, norm="post", classifier_dropout=0.0, pad_token_id=0, labels=("a", "b", "c"))
    base.update(kw)
    return EncoderConfig(**base)


def batch(B: int = 3, T: int = 9, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 50, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 6:] = 0
    ids[1, 6:] = 0
    return ids, mask, torch.zeros_like(ids)


# ------------------------------------------------------------------------------ losses
def test_soft_loss_is_zero_with_zero_gradients_when_the_student_is_the_teacher():
    torch.manual_seed(0)
    model = SequenceClassifier(tiny_config(layers=2))
    ids, mask, types = batch()
    student = model(ids, mask, types)                                # [B, C], with grad
    with torch.no_grad():
        teacher = model(ids, mask, types)
    loss = losses.soft_loss(student, teacher, temperature=1.0)
    loss.backward()
    assert abs(float(loss.detach())) < 1e-6
    grads = [p.grad.abs().max().item() for p in model.parameters() if p.grad is not None]
    assert grads and max(grads) < 1e-6, max(grads)
    # ... while another teacher gives a positive loss and real gradients (the test can fail)
    model.zero_grad()
    loss = losses.soft_loss(model(ids, mask, types), teacher + torch.tensor([2.0, 0.0, -1.0]), 1.0)
    loss.backward()
    assert float(loss) > 0.05
    assert max(p.grad.abs().max().item() for p in model.parameters() if p.grad is not None) > 1e-4


def test_soft_loss_is_t_squared_times_the_kl_at_temperature():
    g = torch.Generator().manual_seed(1)
    s, t = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    for T in (1.0, 2.0, 4.0):
        ref = F.kl_div(F.log_softmax(s / T, -1), F.softmax(t / T, -1), reduction="batchmean") * T * T
        assert math.isclose(float(losses.soft_loss(s, t, T)), float(ref), rel_tol=1e-5)


def test_soft_loss_masks_positions_out_of_both_distributions():
    g = torch.Generator().manual_seed(2)
    s, t = torch.randn(2, 6, generator=g), torch.randn(2, 6, generator=g)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[:, 4:] = False
    s_inf = s.masked_fill(~mask, float("-inf"))                      # as SquadTask.forward gives them
    got = losses.soft_loss(s_inf.requires_grad_(), t, 1.0, mask)
    ref = losses.soft_loss(s[:, :4], t[:, :4], 1.0)
    assert math.isclose(float(got), float(ref), rel_tol=1e-5)
    got.backward()                                                    # no NaN from the -inf entries
    assert torch.isfinite(s_inf.grad).all()


def test_hidden_and_attention_losses_vanish_for_the_teacher_itself_and_not_for_a_student():
    torch.manual_seed(0)
    teacher = SequenceClassifier(tiny_config(layers=4)).eval()
    ids, mask, types = batch()
    cap_t = losses.Capture(teacher, attention=True)
    cap_t.on = True
    with torch.no_grad():
        teacher(ids, mask, types)
    t_states, t_probs = cap_t.take()
    assert len(t_states) == 5 and len(t_probs) == 4                   # embeddings + 4 layers
    assert t_probs[-1] is None and t_probs[0].shape == (3, 2, 9, 9)   # the sparse last layer reads [CLS] only
    # each attention row is a distribution over the real keys only
    p = t_probs[0].exp()
    assert torch.allclose(p.sum(-1), torch.ones(3, 2, 9), atol=1e-5)
    assert float(p[1, :, :, 6:].max()) < 1e-6
    ident = list(range(4))
    assert float(losses.hidden_loss(t_states, t_states, ident)) == 0.0
    assert float(losses.attention_loss(t_probs, t_probs, ident, mask.bool())) < 1e-7

    student, chosen = from_teacher(teacher, 2, None, "test")
    cap_s = losses.Capture(student, attention=True, training=True)
    student.train()
    student(ids, mask, types)
    s_states, s_probs = cap_s.take()
    assert len(s_states) == 3
    student.eval()
    student(ids, mask, types)                                         # evaluation forwards are not captured
    assert cap_s.take() == ([], [])
    # the copied layers agree with their teacher layers on the embeddings (layer 0) ...
    assert torch.allclose(s_states[0], t_states[0])
    # ... and differ after the dropped layer: a real, differentiable loss
    h = losses.hidden_loss(s_states, t_states, chosen)
    a = losses.attention_loss(s_probs, t_probs, chosen, mask.bool())
    assert float(h) > 1e-4 and float(a) > 1e-5
    (h + a).backward()
    assert student.encoder.attention[0].qkv.weight.grad.abs().max() > 0


# ------------------------------------------------------------------------------ students
@pytest.mark.parametrize(("depth", "k", "want"), [
    (12, 6, [1, 3, 5, 7, 9, 11]),      # every other layer (DistilBERT), ending at the top
    (12, 4, [2, 5, 8, 11]),            # TinyBERT's g(m) = 3m
    (12, 2, [5, 11]), (12, 1, [11]), (4, 4, [0, 1, 2, 3]), (2, 1, [1]), (6, 4, [0, 2, 3, 5])])
def test_layers_are_chosen_uniformly_ending_at_the_top(depth, k, want):
    assert pick_layers(depth, k) == want


@pytest.mark.parametrize("cls", [SequenceClassifier, TokenClassifier, SpanExtractor])
def test_student_copies_embeddings_head_and_chosen_layers(cls):
    torch.manual_seed(0)
    teacher = cls(tiny_config(layers=4)).eval()
    student, chosen = from_teacher(teacher, 2, 0.1, "test")
    assert chosen == [1, 3] and student.config.num_hidden_layers == 2
    assert type(student) is cls and student.config.hidden_dropout_prob == 0.1
    t, s = teacher.state_dict(), student.state_dict()
    source = {"encoder.attention.0.": "encoder.attention.1.", "encoder.ffn.0.": "encoder.ffn.1.",
              "encoder.attention.1.": "encoder.attention.3.", "encoder.ffn.1.": "encoder.ffn.3."}
    dropped = ("encoder.attention.0.", "encoder.ffn.0.", "encoder.attention.2.", "encoder.ffn.2.")
    assert len(s) == len([k for k in t if not k.startswith(dropped)])
    for name, value in s.items():
        prefix = next((p for p in source if name.startswith(p)), None)
        src = name if prefix is None else source[prefix] + name[len(prefix):]
        assert torch.equal(value, t[src]), name
    # a one-layer student of a one-layer teacher is the teacher
    one = cls(tiny_config(layers=1)).eval()
    same, _ = from_teacher(one, 1, None, "test")
    ids, mask, types = batch()
    out_a, out_b = one(ids, mask, types), same.eval()(ids, mask, types)
    for a, b in zip(out_a if isinstance(out_a, tuple) else (out_a,), out_b if isinstance(out_b, tuple) else (out_b,)):
        assert torch.allclose(a, b)


def test_shared_layers_keep_their_block_and_k_beyond_the_depth_is_refused():
    from bertcli.core.errors import UserError

    teacher = SequenceClassifier(tiny_config(layers=4, family="albert", sharing="all", embedding_size=16)).eval()
    student, chosen = from_teacher(teacher, 2, None, "test")
    assert len(student.encoder.attention) == 1 and student.config.num_hidden_layers == 2
    assert torch.equal(student.encoder.attention[0].qkv.weight, teacher.encoder.attention[0].qkv.weight)
    with pytest.raises(UserError, match="more than the teacher's 4 layers"):
        from_teacher(teacher, 5, None, "test")


def test_a_narrower_student_learns_through_a_projection_of_its_hidden_states():
    torch.manual_seed(0)
    teacher = SequenceClassifier(tiny_config(layers=4, hidden=32)).eval()
    student = SequenceClassifier(tiny_config(layers=2, hidden=16)).train()
    ids, mask, types = batch()
    cap_t, cap_s = losses.Capture(teacher, attention=False), losses.Capture(student, attention=False, training=True)
    cap_t.on = True
    with torch.no_grad():
        teacher(ids, mask, types)
    student(ids, mask, types)
    project = torch.nn.Linear(16, 32)
    loss = losses.hidden_loss(cap_s.take()[0], cap_t.take()[0], pick_layers(4, 2), project)
    loss.backward()
    assert float(loss.detach()) > 0
    assert project.weight.grad.abs().max() > 0 and student.encoder.embeddings.word.weight.grad.abs().max() > 0
    with pytest.raises(ValueError, match="student state"):   # without the projection the widths cannot meet
        student(ids, mask, types)
        losses.hidden_loss(cap_s.take()[0], [torch.zeros(1, 32)] * 5, pick_layers(4, 2))


def _task(head: str, train, tmp_path):
    from types import SimpleNamespace

    from bertcli.finetune.task import TaskSplits

    return SimpleNamespace(head=head, encoding=None, data=TaskSplits(train, [], facts={"scheme": "iob2"}))


def _recipe():
    from types import SimpleNamespace

    return SimpleNamespace(corpus=SimpleNamespace(max_line_bytes=1 << 20))


def test_unlabelled_ner_sentences_follow_the_labelled_ones_words_or_characters(tmp_path):
    """Words split on white space; a character-level training split (every token one
    character, as People's Daily) gets one word per character. Placeholder tags `O`."""
    from bertcli.finetune.distill.unlabelled import add_unlabelled
    from bertcli.finetune.tagging.data import TagSplit

    f = tmp_path / "more.txt"
    f.write_text("John lives  in Paris\n\n上海 是 城市\n", encoding="utf-8")
    words = _task("token", TagSplit("train", "t", [["Ann", "runs"]], [["B-PER", "O"]], ["t:1"]), tmp_path)
    assert add_unlabelled(words, f, _recipe()) == 2
    t = words.data.train
    assert t.tokens == [["Ann", "runs"], ["John", "lives", "in", "Paris"], ["上海", "是", "城市"]]
    assert t.tags[1:] == [["O"] * 4, ["O"] * 3] and t.tags[0] == ["B-PER", "O"]
    assert words.data.facts == {"scheme": "iob2", "unlabelled": 2, "unlabelled_source": str(f)}
    chars = _task("token", TagSplit("train", "t", [["北", "京"]], [["B-LOC", "I-LOC"]], ["t:1"]), tmp_path)
    add_unlabelled(chars, f, _recipe())
    assert chars.data.train.tokens[2] == ["上", "海", "是", "城", "市"]
    jl = tmp_path / "more.jsonl"
    jl.write_text('{"tokens": ["a", "b"]}\n{"tokens": []}\n', encoding="utf-8")
    assert add_unlabelled(words, jl, _recipe()) == 1          # an empty sentence has nothing to teach


def test_unlabelled_squad_questions_have_no_answers_and_share_contexts(tmp_path):
    """The official JSON (answers not read) or jsonl; a context already in the training split
    is not repeated; ids prefixed so they never meet a labelled one."""
    import json

    from bertcli.finetune.distill.unlabelled import add_unlabelled
    from bertcli.tasks.qa.data import SquadSplit

    train = SquadSplit("train", "t", ["ctx one"], ["q1"], ["what?"], [0], [["one"]], [[4]])
    doc = {"data": [{"paragraphs": [{"context": "ctx one", "qas": [{"id": "q1", "question": "which?",
                                                                     "answers": [{"text": "x", "answer_start": 99}]}]},
                                    {"context": "ctx two", "qas": [{"id": "q2", "question": "who?"}]}]}]}
    (tmp_path / "u.json").write_text(json.dumps(doc), encoding="utf-8")
    task = _task("qa", train, tmp_path)
    assert add_unlabelled(task, tmp_path / "u.json", _recipe()) == 2
    t = task.data.train
    assert t.contexts == ["ctx one", "ctx two"] and t.context_of == [0, 0, 1]
    assert t.ids == ["q1", "unlabelled-q1", "unlabelled-q2"] and t.answers == [["one"], [], []]
    assert t.starts == [[4], [], []] and t.questions[1:] == ["which?", "who?"]
    (tmp_path / "u.jsonl").write_text('{"question": "a?", "context": "ctx three"}\n', encoding="utf-8")
    task = _task("qa", train, tmp_path)
    add_unlabelled(task, tmp_path / "u.jsonl", _recipe())
    assert task.data.train.contexts[-1] == "ctx three" and task.data.train.ids[-1].startswith("unlabelled-")


def test_hard_loss_leaves_out_what_only_the_teacher_labels():
    """Teacher.gold masks the --unlabelled features out of the task's own loss, per head."""
    from types import SimpleNamespace

    from bertcli.finetune.distill.teacher import Teacher

    t = Teacher.__new__(Teacher)
    t.gold = torch.tensor([True, False, True])
    logits = torch.randn(3, 4)
    labels = torch.tensor([1, 0, 2])
    task = SimpleNamespace(head="classification", loss=lambda o, b: F.cross_entropy(o, b["labels"]))
    got = t._hard(task, logits, {"index": torch.tensor([0, 1, 2]), "labels": labels})
    assert torch.allclose(got, F.cross_entropy(logits[[0, 2]], labels[[0, 2]]))
    # token head: rows at flat positions of a [B=2, T=3] batch; feature 1 (index 1) is unlabelled
    flat = torch.tensor([0, 2, 3, 5])
    tok_labels = torch.full((2, 3), -100)
    tok_labels.view(-1)[flat] = torch.tensor([1, 2, 3, 0])
    task = SimpleNamespace(head="token", loss=lambda o, b: F.cross_entropy(o[0], b["labels"].reshape(-1)[o[1]]))
    got = t._hard(task, (logits.repeat(2, 1)[:4], flat),
                  {"index": torch.tensor([0, 1]), "labels": tok_labels, "input_ids": torch.zeros(2, 3)})
    assert torch.allclose(got, F.cross_entropy(logits.repeat(2, 1)[:2], torch.tensor([1, 2])))
    # nothing labelled in the batch: zero, and the soft loss alone teaches
    assert float(t._hard(task, (logits[:1], flat[:1]), {"index": torch.tensor([1]), "labels": tok_labels,
                                                       "input_ids": torch.zeros(1, 3)})) == 0.0


def test_a_teacher_asked_to_time_onnx_needs_the_export_layers_timer():
    """Fine-tuning sits below export: the ONNX Runtime timing of teacher and student
    (bertcli.export.speed) is handed to the Teacher by the caller (bertcli.api.distill). With
    finetune.distill.measure_speed on and no timer, the Teacher is refused before any work rather
    than leaving `distill.speed` silently out of results.json."""
    from pathlib import Path

    from bertcli.config.finetune_sections import DistillConfig
    from bertcli.finetune.distill.teacher import Teacher

    with pytest.raises(ValueError, match="time_onnx"):
        Teacher(Path("teacher"), DistillConfig(measure_speed=True))
    assert Teacher(Path("teacher"), DistillConfig(measure_speed=False)).time_onnx is None


def test_relative_speed_is_each_figure_over_the_references_fp32():
    from bertcli.export.speed import relative

    fp32 = {"throughput_seq_per_s_batch32": 100.0, "latency_ms_batch1_p50": 8.0}
    speeds = {"teacher": {"fp32": fp32, "int8": {"throughput_seq_per_s_batch32": 150.0, "latency_ms_batch1_p50": 4.0}},
              "student": {"fp32": {"throughput_seq_per_s_batch32": 300.0, "latency_ms_batch1_p50": 2.0}}}
    assert relative(speeds, "teacher") == {
        "teacher": {"fp32": {"throughput_x": 1.0, "latency_x": 1.0}, "int8": {"throughput_x": 1.5, "latency_x": 2.0}},
        "student": {"fp32": {"throughput_x": 3.0, "latency_x": 4.0}}}
