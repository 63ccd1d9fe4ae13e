"""Vocabulary adaptation (`tokenizer.extend: N`): new tokens for an adopted tokenizer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

FILE = "extension.json"


@dataclass
class Extension:
    old_vocab_size: int                                  # the checkpoint's embedding rows
    vocab_size: int                                      # the model's rows now (rounded up)
    tokens: list = field(default_factory=list)           # [token, new id, [old piece ids]]


def load_extension(tokenizer_dir: Path) -> Optional[Extension]:
    path = Path(tokenizer_dir) / FILE
    if not path.is_file():
        return None
    d = json.loads(path.read_text(encoding="utf-8"))
    return Extension(d["old_vocab_size"], d["vocab_size"], [tuple(t) for t in d["tokens"]])
