"""What distillation buys in speed: a MiniLM-sized teacher (12 layers, H=384, 12 heads, 1536
intermediate, built locally with random weights: speed does not depend on the values) against
its 4-layer and 2-layer students (`bertcli distill --student-layers K`'s own student builder), each
exported to ONNX and run by ONNX Runtime in fp32 and dynamic int8, timed in one process,
interleaved. Latency at batch 1 and throughput at batch 32, `--length` tokens.

Goals (issue 25): a 4-of-12-layer student at >= 2.5x the teacher's fp32 throughput, >= 5x in int8.

    python scripts/bench_distill.py                     # prints JSON
    python scripts/bench_distill.py --length 64 --repeats 10
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertcli.config.sections import ModelConfig  # noqa: E402

MINILM = dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=12, intermediate_size=1536)


def tokenizer(directory: Path, vocab: int = 8000) -> None:
    """A WordPiece tokenizer trained on the built-in corpus (nothing is downloaded)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    from bertcli.corpus.builtin import iter_documents

    texts = [text for _, text in iter_documents()][:2000]
    sp = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab, special_tokens=sp, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"pad_token": "[PAD]", "mask_token": "[MASK]"}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=20, help="batch-1 runs per model")
    ap.add_argument("--batches", type=int, default=4, help="batches of 32 per model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--students", default="4,2")
    args = ap.parse_args()
    from bertcli.core import console
    from bertcli.export.speed import onnx_speed, relative
    from bertcli.finetune.distill.student import from_teacher
    from bertcli.finetune.distill.teacher import parameter_count
    from bertcli.model import build_model, save_checkpoint

    console.out = console.err           # the export summaries go to stderr: stdout holds only the JSON
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer(work / "tok")
        vocab = json.loads((work / "tok" / "tokenizer.json").read_text())["model"]["vocab"]
        torch.manual_seed(0)
        teacher = build_model(ModelConfig(family="bert", **MINILM, max_position_embeddings=512), len(vocab), 0,
                              head="classification", labels=["a", "b"]).eval()
        models = {"teacher_L12": work / "teacher"}
        params = {"teacher_L12": parameter_count(teacher)}
        save_checkpoint(teacher, models["teacher_L12"], tokenizer_dir=work / "tok")
        for k in (int(x) for x in args.students.split(",")):
            student, chosen = from_teacher(teacher, k, None, "bench")
            name = f"student_L{k}"
            models[name] = work / name
            params[name] = parameter_count(student)
            save_checkpoint(student.eval(), models[name], tokenizer_dir=work / "tok")
        speeds = onnx_speed(models, work / "onnx", args.length, args.repeats, args.batches, args.threads)
    rel = relative(speeds, "teacher_L12")
    report = {"machine": f"{args.threads} threads, CPU, ONNX Runtime", "torch": torch.__version__,
              "shape": {**MINILM, "tokens": args.length, "vocab": len(vocab)},
              "parameters": params, "speed": speeds, "vs_teacher_fp32": rel}
    s4 = rel.get("student_L4")
    if s4:
        report["goals"] = {"student_L4 fp32 throughput x teacher fp32 (goal 2.5)": s4["fp32"]["throughput_x"],
                           "student_L4 int8 throughput x teacher fp32 (goal 5)": s4["int8"]["throughput_x"]}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
