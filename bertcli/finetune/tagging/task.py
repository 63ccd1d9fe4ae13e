"""`bertcli finetune ner`: named-entity tagging (CoNLL-2003 style), BERT section 5.3.

Reading (`finetune/tagging/data.py`) -> the scheme told apart from the training tags (IOB1, IOB2,
BIOES; `tasks/tagging/schemes.py`), invalid sequences repaired or refused -> words aligned to
sub-tokens and windowed (`tasks/tagging/windows.py`: the first sub-token of each word labelled, the
others -100; every word predicted exactly once) -> transformers' *ForTokenClassification head
(the last layer computes only the labelled positions while training) -> cross-entropy ->
per-word tags -> entity P/R/F1 as conlleval (overall micro + per type) and token accuracy.

Output (default runs/ner/<checkpoint name>/): the best model as a Hugging Face directory
(AutoModelForTokenClassification, id2label in config.json), results.json, and the predictions
`dev_predictions.txt` / `test_predictions.txt` in CoNLL layout: `token gold predicted` per line,
a blank line between sentences.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.core.fs import write_text_atomic
from bertcli.finetune import runner
from bertcli.finetune.tagging.data import TagSplit, load_tagged
from bertcli.finetune.task import Features, Task, TaskSplits, overlay, pack
from bertcli.tasks.featurizer import Context
from bertcli.tasks.tagging import schemes as tagging
from bertcli.tasks.tagging.windows import TagFeaturizer, per_word

if TYPE_CHECKING:
    import torch
    from torch import nn

    from bertcli.config.finetune_sections import FinetuneConfig
    from bertcli.config.recipe import Recipe
    from bertcli.tokenization.load import TokenizerInfo


class NerTask(Task[TagSplit, list[list[str]]]):
    name = "ner"
    head = "token"
    labels: tuple[str, ...]                 # set from the training entity types (__init__)

    def __init__(self, cfg: FinetuneConfig, data_dir: Path, encoding: str | None = None):
        self.block = cfg.ner
        self.hyper = overlay(cfg, self.block)
        self.data_dir, self.encoding = Path(data_dir), encoding

    def read(self) -> TaskSplits[TagSplit]:
        """Every split, its tags checked; the scheme (detected or set), invalid sequences repaired
        (or refused), and the labels: every tag of the scheme for each training entity type."""
        block, data_dir = self.block, self.data_dir
        layout, splits = load_tagged(data_dir, block.tag_column, self.encoding)
        for split in splits.values():
            for tags, where in zip(split.tags, split.lines):
                tagging.check_tags(tags, where)
        self.scheme = tagging.detect_scheme(splits["train"].tags, splits["train"].source) \
            if block.scheme == "auto" else block.scheme
        self.repaired = {name: self._repair(split) for name, split in splits.items()}
        # Every tag of the scheme for each entity type of the training data (IOB1 may lack B-X in
        # train and have it in dev; the types are what must match).
        self.types = sorted({tagging.split_tag(t)[1] for tags in splits["train"].tags for t in tags} - {""})
        prefixes = "BIES" if self.scheme == "bioes" else "BI"
        self.labels = ("O",) + tuple(f"{p}-{t}" for t in self.types for p in prefixes)
        self.index = {t: i for i, t in enumerate(self.labels)}
        for name in ("dev", "test"):
            if name in splits:
                self._check_known(splits[name])
        console.log(f"ner: {self.scheme.upper()} tags ({'detected' if block.scheme == 'auto' else 'as set'}), "
                    f"{len(self.labels)} labels: {', '.join(self.labels)}")
        return TaskSplits(splits["train"], [splits["dev"]], [splits["test"]] if "test" in splits else [],
                          layout, str(data_dir), {"scheme": self.scheme, "repaired_sentences": self.repaired})

    # -- reading ------------------------------------------------------------------------------
    def _repair(self, split: TagSplit) -> int:
        """Rewrite invalid sequences in place (or stop, with invalid_tags=error); how many."""
        bad = []
        for i, tags in enumerate(split.tags):
            fixed = tagging.repair(tags, self.scheme)
            if fixed != tags:
                bad.append(i)
                if self.block.invalid_tags == "error":
                    raise UserError(f"tag sequence invalid for {self.scheme.upper()}: {' '.join(tags)}",
                                    where=split.lines[i],
                                    fix=f"it reads as {' '.join(fixed)}; correct the file, or --set "
                                        "finetune.ner.invalid_tags=repair to rewrite such sentences so")
                split.tags[i] = fixed
        if bad:
            i = bad[0]
            console.log(f"warning: {split.source}: {len(bad):,} sentence(s) with tags invalid for "
                        f"{self.scheme.upper()} (first at {split.lines[i]}) repaired: each chunk read as "
                        f"conlleval reads it and written back in {self.scheme.upper()} (same entities)")
        return len(bad)

    def _check_known(self, split: TagSplit) -> None:
        for tags, where in zip(split.tags, split.lines):
            unseen = [t for t in tags if t not in self.index]
            if unseen:
                raise UserError(f"{split.name} tag {unseen[0]!r}: its entity type never occurs in the training data",
                                where=where,
                                fix=f"training entity types: {', '.join(self.types) or 'none'} "
                                    f"({self.scheme.upper()}); a model cannot predict a type it never saw "
                                    "(same tag set and scheme in every split?)")

    # -- features -------------------------------------------------------------------------------
    def featurizer(self, tok: TokenizerInfo) -> TagFeaturizer:
        """The featurizer predict uses on this model: this run's window length and overlap."""
        return TagFeaturizer(Context(tok, self.labels, self.hyper.max_seq_length,
                                     {"window_overlap": self.block.window_overlap}))

    def featurize(self, split: TagSplit, tok: TokenizerInfo, zero_types: bool) -> Features:
        rows_ids, rows_labels, rows_words, example = [], [], [], []
        with console.progress(f"tokenizing ner {split.name}", total=len(split)) as bar:
            for e, (wins, tags) in enumerate(zip(self.featurizer(tok).encode_sentences(split.tokens), split.tags)):
                for win in wins:
                    mine = win.word >= 0
                    rows_ids.append(win.ids)
                    rows_words.append(win.word)
                    rows_labels.append(np.where(mine, [self.index[tags[i]] if i >= 0 else -100 for i in win.word], -100))
                    example.append(e)
                bar.advance(1)
        types = [np.zeros(len(r), dtype=np.int8) for r in rows_ids]
        return pack(rows_ids, types, example, zero_types, labels=rows_labels, word=rows_words)

    # -- model ------------------------------------------------------------------------------
    def forward(self, model: nn.Module, batch: dict, train: bool):
        # Only the words' first sub-tokens are read: the last layer computes just those rows.
        key = "labels" if train else "word"
        positions = batch[key].reshape(-1).ne(-100).nonzero().squeeze(1)     # [n] flat
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], positions=positions)
        return logits, positions                                            # [n, C], [n]

    def loss(self, outputs, batch: dict) -> torch.Tensor:
        import torch.nn.functional as F  # torch only where a model runs: reading data does not import it
        logits, positions = outputs
        return F.cross_entropy(logits.float(), batch["labels"].reshape(-1)[positions])

    def loss_units(self, batch: dict) -> int:
        return int(batch["labels"].ne(-100).sum())            # the words' first sub-tokens the loss averages

    def collect(self, outputs, batch: dict):
        logits, positions = outputs
        pred = logits.float().argmax(-1)
        row = positions.div(batch["input_ids"].shape[1], rounding_mode="floor")
        word = batch["word"].reshape(-1)[positions]
        row, word, pred = row.cpu().numpy(), word.cpu().numpy(), pred.cpu().numpy()
        return [(word[row == b], pred[row == b]) for b in range(batch["input_ids"].shape[0])]

    def decode(self, split: TagSplit, features: Features, collected: list) -> list[list[str]]:
        """Per-word label ids assembled from the windows that own the words (features.per_word,
        as predict does), as tags."""
        pieces: list[list] = [[] for _ in split.tokens]
        for f, piece in enumerate(collected):
            pieces[features.example[f]].append(piece)
        return [[self.labels[i] for i in per_word(len(words), p)] for words, p in zip(split.tokens, pieces)]

    # -- scores and files ---------------------------------------------------------------------
    def evaluate(self, split: TagSplit, predictions: list[list[str]]) -> dict[str, float]:
        s = tagging.score(split.tags, predictions)
        out = {"f1": s["f1"], "precision": s["precision"], "recall": s["recall"], "accuracy": s["accuracy"]}
        for t, m in s["per_type"].items():
            out.update({f"{t}/f1": m["f1"], f"{t}/precision": m["precision"], f"{t}/recall": m["recall"]})
        return out

    def format(self, dev_metrics: dict) -> str:
        m = next(iter(dev_metrics.values()))
        types = sorted({k.split("/")[0] for k in m if "/" in k})
        return (f"entity F1 {100 * m['f1']:.1f} (P {100 * m['precision']:.1f}, R {100 * m['recall']:.1f}), "
                f"token acc {100 * m['accuracy']:.1f}; " + " ".join(f"{t} {100 * m[t + '/f1']:.1f}" for t in types))

    def write_predictions(self, split: TagSplit, predictions, directory: Path, kind: str) -> list[Path]:
        lines = []
        for words, gold, pred in zip(split.tokens, split.tags, predictions):
            lines += [f"{w} {g} {p}" for w, g, p in zip(words, gold, pred)] + [""]
        return [write_text_atomic(Path(directory) / f"{kind}_predictions.txt", "\n".join(lines))]

    def results(self) -> dict:
        return {"labels": list(self.labels), "scheme": self.scheme}

    def has_gold(self, split: TagSplit) -> bool:
        return True                         # every split's file carries its tags (the reader requires them)

    def baseline(self, split: TagSplit) -> list[list[str]]:
        """Every word `O`, the majority tag: entity F1 0."""
        return [["O"] * len(words) for words in split.tokens]

    def chance_metric(self, split: TagSplit) -> tuple[str | None, int]:
        """Token accuracy over the words: the all-`O` baseline's entity F1 is 0 and has no
        spread to compare with, its word accuracy (the share of `O`) has one."""
        return "accuracy", sum(len(words) for words in split.tokens)

    def summary_title(self, results: dict) -> str:
        return f"NER dev results (x100), epoch {results['best_epoch']}"

    def summary_rows(self, results: dict) -> list[tuple[str, str]]:
        dev = next(iter(results["dev"].values()))
        return ([("entity F1 / P / R", f"{100 * dev['f1']:.1f} / {100 * dev['precision']:.1f} / {100 * dev['recall']:.1f}"),
                 ("token accuracy", f"{100 * dev['accuracy']:.1f}")]
                + [(f"{t} F1", f"{100 * dev[t + '/f1']:.1f}") for t in sorted({k.split('/')[0] for k in dev if '/' in k})])


def run_ner(recipe: Recipe, checkpoint: Path, data_dir: Path, out: Path | None = None, encoding: str | None = None) -> dict:
    """Fine-tune `checkpoint` on the tagged data in `data_dir`; returns results.json's content."""
    return runner.finetune_task(NerTask(recipe.finetune, data_dir, encoding), recipe, checkpoint, out)
