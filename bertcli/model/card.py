"""Model cards: the README.md of a model directory, in the Hugging Face model-card format (YAML
front matter, then Markdown), written without huggingface_hub.

    pretrain_card(recipe, step, tokens, seconds, results, device)   final/ of a pretraining run
    finetune_card(task, base, recipe, results, metrics)             a fine-tuned model directory
    card_wanted(directory)                                          False when a README.md there
                                                                    is not bertcli's (the user's)

Front matter: library_name, tags, language (the recipe's `language`), base_model and datasets
only when they are Hub ids (a local path is named in the body instead), and model-index with
the evaluation results, which huggingface_hub's model_index_to_eval_results reads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bertcli.core.outputs import listed_files
from bertcli.core.version import __version__

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe

CARD = "README.md"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_id(name: str | None) -> str | None:
    """`owner/name` when `name` reads as a Hub id and is no local path; otherwise None."""
    if not name or not _HUB_ID.match(name) or Path(name).exists():
        return None
    return name


def card_wanted(directory: Path) -> bool:
    """A README.md is written unless one is there that bertcli's marker does not list."""
    if not (Path(directory) / CARD).exists():
        return True
    return CARD in (listed_files(Path(directory)) or set())


def _front(meta: dict[str, Any]) -> str:
    meta = {k: v for k, v in meta.items() if v not in (None, [], "")}
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n"


def _model_index(name: str, task: tuple[str, str], dataset: tuple[str, str], metrics: list[tuple[str, str, float]]) -> list:
    """model-index for one task on one dataset: metrics as (type, name, value)."""
    if not metrics:
        return []
    return [{"name": name, "results": [{
        "task": {"type": task[0], "name": task[1]},
        "dataset": {"type": dataset[0], "name": dataset[1]},
        "metrics": [{"type": t, "name": n, "value": round(float(v), 6)} for t, n, v in metrics],
    }]}]


def _table(metrics: list[tuple[str, str, float]]) -> str:
    if not metrics:
        return "No evaluation results were recorded.\n"
    return "| metric | value |\n|---|---|\n" + "".join(f"| {n} | {v:.4f} |\n" for _, n, v in metrics)


def _sources(recipe: Recipe) -> tuple[list[str], list[str]]:
    """(Hub dataset ids, every source as the recipe names it)."""
    paths = [s.path for s in recipe.corpus.sources]
    return [p for p in paths if hub_id(p)], paths


def pretrain_card(recipe: Recipe, step: int, tokens: int, seconds: float, results: dict, device: str) -> str:
    """final/'s card: a masked-language model; results are the last validation's figures."""
    m = recipe.model
    base = hub_id(m.init_from)
    hub_data, sources = _sources(recipe)
    metrics = [(t, n, results[k]) for k, t, n in (("val_loss", "loss", "validation MLM loss"),
                                                  ("val_mlm_acc", "accuracy", "validation MLM accuracy"))
               if isinstance(results.get(k), (int, float))]
    meta = {"library_name": "transformers", "tags": ["bertcli", m.family, "fill-mask"],
            "language": recipe.language, "pipeline_tag": "fill-mask", "base_model": base, "datasets": hub_data,
            "model-index": _model_index(recipe.name, ("fill-mask", "Masked language modeling"),
                                        ("held-out", "held-out split of the pretraining corpus"), metrics)}
    start = f"continued from `{m.init_from}`" if m.init_from else "from random initialization"
    body = f"""
# {recipe.name}

A {m.family} encoder ({m.num_hidden_layers} layers, hidden size {m.hidden_size}, {m.num_attention_heads} heads)
pretrained with masked language modeling by bertcli {__version__}, {start}.

## How it was made

- corpus: {", ".join(f"`{s}`" for s in sources)}
- objective: {recipe.data.objective}; sequence length {recipe.data.max_seq_length}
- steps: {step:,} of batch {recipe.train.batch_size}; {tokens:,} tokens seen; {seconds / 3600:.2f} h of training on {device}
- optimizer {recipe.train.optimizer}, learning rate {recipe.train.learning_rate}, precision {recipe.train.precision}
- the full recipe is `recipe.yaml` beside this card

## Evaluation

{_table(metrics)}
## How to use

```python
from transformers import AutoModelForMaskedLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("path/to/this/directory")
model = AutoModelForMaskedLM.from_pretrained("path/to/this/directory")
```

## Limits

A pretrained encoder is a starting point: fine-tune it for a task (`bertcli finetune`). Its
figures above are masked-token predictions on held-out text of its own corpus, not task scores; it
knows only the language and the biases of that corpus.
"""
    return _front(meta) + body


def write_card(directory: Path, text: str) -> bool:
    """Write README.md into `directory` unless the user's own card is there; True when written."""
    if not card_wanted(directory):
        return False
    (Path(directory) / CARD).write_text(text, encoding="utf-8")
    return True
