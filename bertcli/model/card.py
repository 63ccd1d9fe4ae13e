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
    rtd = recipe.train.objective == "rtd"   # final/ is the discriminator (ELECTRA), generator/ beside it
    figures = ((("val_mlm_loss", "loss", "validation generator MLM loss"),
                ("val_rtd_acc", "accuracy", "validation replaced-token detection accuracy")) if rtd else
               (("val_loss", "loss", "validation MLM loss"), ("val_mlm_acc", "accuracy", "validation MLM accuracy")))
    metrics = [(t, n, results[k]) for k, t, n in figures if isinstance(results.get(k), (int, float))]
    objective = ("replaced-token detection (ELECTRA: this directory is the discriminator, `generator/` "
                 "beside it the masked-language-model generator)") if rtd else "masked language modeling"
    auto = "AutoModelForPreTraining" if rtd else "AutoModelForMaskedLM"
    # a discriminator has no fill-mask head: the Hub's closest task is its encoder's features
    task = ("feature-extraction", "Replaced-token detection") if rtd else ("fill-mask", "Masked language modeling")
    meta = {"library_name": "transformers", "tags": ["bertcli", m.family, "electra" if rtd else "fill-mask"],
            "language": recipe.language, "pipeline_tag": task[0], "base_model": base, "datasets": hub_data,
            "model-index": _model_index(recipe.name, task,
                                        ("held-out", "held-out split of the pretraining corpus"), metrics)}
    start = f"continued from `{m.init_from}`" if m.init_from else "from random initialization"
    body = f"""
# {recipe.name}

A {m.family} encoder ({m.num_hidden_layers} layers, hidden size {m.hidden_size}, {m.num_attention_heads} heads)
pretrained with {objective} by bertcli {__version__}, {start}.

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
from transformers import {auto}, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("path/to/this/directory")
model = {auto}.from_pretrained("path/to/this/directory")
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


# head -> (Hub pipeline tag, task name, transformers class)
_HEADS = {"classification": ("text-classification", "Text classification", "AutoModelForSequenceClassification"),
          "token": ("token-classification", "Token classification", "AutoModelForTokenClassification"),
          "qa": ("question-answering", "Question answering", "AutoModelForQuestionAnswering"),
          "pretraining": ("sentence-similarity", "Sentence embeddings", "AutoModel")}


def _sweep_parts(sweep: dict) -> tuple[list[tuple[str, str, float]], str, str, dict]:
    """A swept model's (model-index metrics: the chosen rate's dev means over its seeds, the
    evaluation table with mean ± sd, the section on the rate rule, front-matter record)."""
    key = sweep["chosen_key"]
    group = sweep["by_lr"][key]
    stats = [(split, m, s) for split, values in group["dev"].items() for m, s in values.items() if s["n"]]
    metrics = [(m, f"{split} {m} (mean of {s['n']} seeds)", s["mean"]) for split, m, s in stats]
    kept = sweep["kept"] or {}
    table = ("| metric | mean ± sd over seeds | seeds | min-max |\n|---|---|---|---|\n"
             + "".join(f"| {split} {m} | {s['mean']:.4f} ± {'-' if s['sd'] is None else format(s['sd'], '.4f')} "
                       f"| {s['n']} | {s['min']:.4f}-{s['max']:.4f} |\n" for split, m, s in stats)) if stats else _table([])
    rates = "".join(f"| {k}{' (chosen)' if k == key else ''} | {g['n']} | "
                    f"{'-' if g['selection_median'] is None else format(g['selection_median'], '.4f')} "
                    f"| {g['failed']['diverged']} diverged, {g['failed']['chance']} at chance |\n"
                    for k, g in sweep["by_lr"].items())
    section = f"""
## How the learning rate was chosen

Learning rate {sweep["chosen_lr"]:g} was chosen from {len(sweep["by_lr"])} rate(s), by the rule: {sweep["rule"]}.
Its seeds' figures are the evaluation above; the weights here are its best dev run (`{kept.get("dir")}`, seed
{kept.get("seed")}). Dev figures are selected on dev (best epoch x best rate): expect a little less on new data.

| learning rate | runs | median dev {sweep["score"]} | failed |
|---|---|---|---|
{rates}"""
    record = {"statistic": "mean over seeds", "seeds": sorted({r["seed"] for r in sweep["runs"]}),
              "learning_rates": sweep["learning_rates"], "chosen_lr": sweep["chosen_lr"], "rule": sweep["rule"],
              "kept": {"lr": kept.get("lr"), "seed": kept.get("seed"), "dir": kept.get("dir")}}
    return metrics, table, section, record


def finetune_card(results: dict, language: list[str] | None, seconds: float, device: str | None,
                  sweep: dict | None = None) -> str:
    """A fine-tuned (or distilled, or embedding) model directory's card, from its results.json
    content: the dev figures of the kept epoch are its evaluation results. `sweep` (a swept
    model: the task's entry of the sweep's results.json, sweep_summary.task_entry): the chosen
    rate's mean ± sd over seeds are, and the card says how the rate was chosen."""
    head, task = results["head"], results["task"]
    pipeline, task_name, cls = _HEADS.get(head, _HEADS["classification"])
    base = hub_id(results.get("checkpoint"))
    source = str((results.get("data") or {}).get("source") or task)
    metrics = [(k, f"{split} {k}", v) for split, values in (results.get("dev") or {}).items()
               for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    table, section, record = _table(metrics), "", None
    if sweep is not None and sweep.get("chosen_key") is not None:
        metrics, table, section, record = _sweep_parts(sweep)
    meta = {"library_name": "sentence-transformers" if head == "pretraining" else "transformers",
            "tags": ["bertcli", task, *(["distillation"] if "distill" in results else [])],
            "language": language, "pipeline_tag": pipeline, "base_model": base,
            "datasets": [source] if hub_id(source) else [],
            "model-index": _model_index(task, (pipeline, task_name), (hub_id(source) or task, source), metrics),
            "bertcli_sweep": record}
    hp = results.get("hyperparameters") or {}
    score = results.get("score")
    kept_by = "(the last: no dev set was given)" if score is None else f"by its dev score {score:.4f}"
    # distillation: the checkpoint is the teacher (base_model), the model a smaller student of it
    made = (f"A student distilled from the teacher `{results.get('checkpoint')}`" if "distill" in results
            else f"`{results.get('checkpoint')}` fine-tuned")
    if head == "pretraining":
        use = ('from sentence_transformers import SentenceTransformer\n\n'
               'model = SentenceTransformer("path/to/this/directory")\n'
               'embeddings = model.encode(["a sentence", "another one"])')
    else:
        use = (f'from transformers import {cls}, AutoTokenizer\n\n'
               'tokenizer = AutoTokenizer.from_pretrained("path/to/this/directory")\n'
               f'model = {cls}.from_pretrained("path/to/this/directory")')
    body = f"""
# {task}

{made} for {task_name.lower()} ({task}) by bertcli {__version__}.

## How it was made

- data: `{source}`, {(results.get("data") or {}).get("train", "?")} training examples
- {results.get("steps", "?")} steps; kept epoch {results.get("best_epoch")} {kept_by}
- learning rate {hp.get("learning_rate")}, batch {hp.get("batch_size")}, {hp.get("max_seq_length")} tokens
- seed {results.get("seed")}
- {seconds / 60:.1f} min of training {f"on {device}" if device else "(the kept run)"}; every figure is in `results.json`
  beside this card

## Evaluation (dev)

{table}{section}
## How to use

```python
{use}
```

## Limits

Its scores are on the dev data named above, {"over the seeds of a sweep" if record else "of one seed"};
on other text it may do worse, and it carries the biases of its pretraining corpus and of its training data.
"""
    return _front(meta) + body
