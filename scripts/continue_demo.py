"""A small domain-adaptive pretraining run (docs/continued-pretraining.md): the quickstart's
bert-tiny (pretrained on the Python documentation's prose) continued on Python *source code*, a
domain its vocabulary splits into many pieces. Writes the domain and general text files, then
prints the commands to run; the figures in the docs come from them.

    python scripts/continue_demo.py OUT_DIR [--corpus-stage runs/bert-tiny/corpus-*]
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path


def code_documents(files: list[Path], max_lines: int = 150) -> list[list[str]]:
    """One document per source file: its non-empty code lines (comments and docstrings are
    the general model's prose; the rest is the domain)."""
    docs = []
    for f in files:
        try:
            lines = f.read_text(encoding="utf-8").splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        code = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith(("#", '"', "'"))]
        if len(code) >= 10:
            docs.append(code[:max_lines])
    return docs


def write(path: Path, docs: list[list[str]]) -> None:
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--corpus-stage", type=Path, required=True, help="the bert-tiny run's corpus-<hash> directory")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    train, held = [f for i, f in enumerate(files) if i % 10], [f for i, f in enumerate(files) if i % 10 == 0]
    write(a.out / "code_train.txt", code_documents(train))
    write(a.out / "code_heldout.txt", code_documents(held))
    import datasets

    val = datasets.load_from_disk(str(a.corpus_stage))["validation"]     # prose the start model never trained on
    write(a.out / "general_heldout.txt", [list(s) for s in val["sentences"]])
    for name in ("code_train.txt", "code_heldout.txt", "general_heldout.txt"):
        print(name, (a.out / name).stat().st_size, "bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
