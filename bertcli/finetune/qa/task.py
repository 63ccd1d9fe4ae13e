"""`bertcli finetune squad`: extractive question answering (SQuAD v1.1 / v2.0, CMRC 2018) as a task
of the fine-tuning engine.

    readers      tasks/qa/data.py        official JSON, datasets save_to_disk / parquet, --hub
    windows      tasks/qa/features.py    question + context slices, offsets, start/end labels
    head         model/task_heads.py     SpanExtractor (transformers' *ForQuestionAnswering `qa_outputs`)
    loss         mean of the start and the end cross-entropy over each window's real tokens
    decoding     tasks/qa/decode.py      n-best over all windows of a question, v2.0 null odds
    metrics      finetune/qa/metrics.py  the official scripts' EM / F1 (character F1 for text without spaces)

Output (default `runs/squad/<checkpoint name>` or `runs/squad_v2/...`): the best epoch's model as a
Hugging Face directory (AutoModelForQuestionAnswering loads it), results.json, and the dev set's
predictions.json (official format: id -> answer), nbest_predictions.json, null_odds.json (v2.0:
the official evaluation's --na-prob-file) and eval.json (the official script's output dict).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.finetune import runner
from bertcli.finetune.classification.submission import write_json
from bertcli.finetune.qa import metrics as squad_metrics
from bertcli.finetune.task import Features, Task, TaskSplits, overlay
from bertcli.tasks.featurizer import Context
from bertcli.tasks.qa.data import SquadSplit, load_squad
from bertcli.tasks.qa.decode import Decoded, SpanFeaturizer

if TYPE_CHECKING:
    import torch
    from torch import nn

    from bertcli.config.finetune_sections import FinetuneConfig
    from bertcli.config.recipe import Recipe
    from bertcli.tokenization.load import TokenizerInfo


class SquadTask(Task[SquadSplit, Decoded]):
    head = "qa"
    labels = None

    def __init__(self, cfg: FinetuneConfig, version: int, data_dir: Path | None = None, hub: str | None = None):
        if (data_dir is None) == (hub is None):
            raise UserError("give exactly one of --data-dir (local SQuAD files) and --hub (a `datasets` name)",
                            fix="e.g. --data-dir squad/ (train-v1.1.json, dev-v1.1.json), or --hub rajpurkar/squad")
        self.version, self.source = version, (data_dir, hub)
        self.name = "squad" if version == 1 else "squad_v2"
        self.block = cfg.squad if version == 1 else cfg.squad_v2
        self.hyper = overlay(cfg, self.block)
        for key in ("doc_stride", "max_query_length", "n_best", "max_answer_length", "null_threshold", "scoring"):
            self.hyper.values[key] = getattr(self.block, key)
        self.unaligned: dict[str, int] = {}
        self.windows: dict[str, int] = {}

    def read(self) -> TaskSplits[SquadSplit]:
        data_dir, hub = self.source
        console.log(f"reading SQuAD {'v2.0' if self.version == 2 else 'v1.1'} from {hub or data_dir}")
        data = load_squad(data_dir, hub, self.version, bad_answers=self.block.bad_answers)
        self.chars = self.block.scoring == "chars" or (
            self.block.scoring == "auto" and not squad_metrics.has_spaces(data.dev.contexts))
        return TaskSplits(data.train, [data.dev], [], data.layout, data.source,
                          {"version": "v2.0" if self.version == 2 else "v1.1", "scoring": "chars" if self.chars else "words",
                           "answers_repaired": {"train": data.train.repaired, "dev": data.dev.repaired},
                           "answers_dropped": {"train": data.train.dropped, "dev": data.dev.dropped}})

    def describe(self) -> str:
        return f"SQuAD {self.data.facts['version']} ({len(self.data.dev[0]):,} dev questions)"

    # ------------------------------------------------------------------------- features
    def featurize(self, split: SquadSplit, tok: TokenizerInfo, zero_types: bool) -> Features:
        is_train = split is self.data.train
        f = self.featurizer(tok).windows(split, zero_types, labels=is_train)
        self.windows[split.name] = len(f)
        if is_train and f.unaligned:
            self.unaligned[split.name] = f.unaligned
            console.log(f"note: {f.unaligned:,} training answers start or end inside a token; their labels "
                        "cover the whole tokens")
        per_feature = {"ctx_start": f.ctx_start.astype(np.int64), "doc_len": f.doc_len.astype(np.int64)}
        if is_train:
            assert f.labels is not None, "training features carry their labels"
            per_feature["start_positions"] = f.labels[:, 0]
            per_feature["end_positions"] = f.labels[:, 1]
        return Features(f.ids, f.types, f.offsets, f.example.astype(np.int64),
                        per_feature=per_feature, extra={"squad": f})

    # ------------------------------------------------------------------------- model side
    def forward(self, model: nn.Module, batch: dict, train: bool):
        start, end = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        pad = batch["attention_mask"] == 0
        # padding can never be an answer: out of the softmax
        return start.float().masked_fill(pad, float("-inf")), end.float().masked_fill(pad, float("-inf"))

    def loss(self, outputs, batch: dict) -> torch.Tensor:
        """(CE(start) + CE(end)) / 2, transformers' and run_squad.py's span loss."""
        import torch.nn.functional as F  # torch only where a model runs: reading data does not import it
        start, end = outputs
        return (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])) / 2

    def collect(self, outputs, batch: dict) -> list:
        """Per window: (context start logits [D_f], context end logits [D_f], (start[0], end[0]))."""
        start, end = (x.cpu().numpy() for x in outputs)
        c0, n = batch["ctx_start"].cpu().numpy(), batch["doc_len"].cpu().numpy()
        return [(start[i, c0[i]:c0[i] + n[i]], end[i, c0[i]:c0[i] + n[i]], (start[i, 0], end[i, 0]))
                for i in range(len(c0))]

    # ------------------------------------------------------------------------- answers
    def decode(self, split: SquadSplit, features: Features, collected: list) -> Decoded:
        f = features.extra["squad"]
        s = np.full(f.nonempty.shape, -np.inf, dtype=np.float32)
        e = np.full(f.nonempty.shape, -np.inf, dtype=np.float32)
        null = np.zeros((len(f), 2), dtype=np.float32)
        for i, (a, b, n0) in enumerate(collected):
            s[i, :len(a)], e[i, :len(b)], null[i] = a, b, n0
        return self.featurizer(None).answers(split, f, s, e, null)

    def featurizer(self, tok) -> SpanFeaturizer:
        """The featurizer predict uses on this model: this run's windows and decoding settings."""
        b = self.block
        return SpanFeaturizer(Context(tok, None, self.hyper.max_seq_length, {
            "doc_stride": b.doc_stride, "max_query_length": b.max_query_length, "n_best": b.n_best,
            "max_answer_length": b.max_answer_length, "null_threshold": b.null_threshold,
            "allow_impossible": self.version == 2}))

    def official(self, split: SquadSplit, predictions: Decoded) -> dict:
        """The official script's output dict (percentages); v2.0 with the best thresholds, searched
        over each question's best non-null span against its null odds."""
        golds = dict(zip(split.ids, split.answers))
        r = squad_metrics.official_scores(predictions.predictions, golds, self.version, chars=self.chars)
        if self.version == 2:
            best = squad_metrics.official_scores(predictions.best_spans, golds, 2, na_probs=predictions.null_odds,
                                          chars=self.chars)
            r.update({k: v for k, v in best.items() if k.startswith("best_")})
        return r

    def evaluate(self, split: SquadSplit, predictions: Decoded) -> dict[str, float]:
        """Fractions, F1 first; v2.0 also HasAns / NoAns and the best threshold on this split
        (best_*_thresh are null-odds values, not fractions)."""
        r = self.official(split, predictions)
        if self.version == 1:
            return {"f1": r["f1"] / 100, "exact": r["exact_match"] / 100}
        out = {"f1": r["f1"] / 100, "exact": r["exact"] / 100}
        for k in ("HasAns_f1", "HasAns_exact", "NoAns_f1", "NoAns_exact", "best_f1", "best_exact"):
            if k in r:
                out[k] = r[k] / 100
        out["best_f1_thresh"], out["best_exact_thresh"] = r["best_f1_thresh"], r["best_exact_thresh"]
        return out

    def format(self, dev_metrics: dict) -> str:
        m = next(iter(dev_metrics.values()))
        line = f"EM {100 * m['exact']:.1f}, F1 {100 * m['f1']:.1f}"
        if self.version == 2:
            line += (f" (HasAns F1 {100 * m.get('HasAns_f1', 0):.1f}, NoAns {100 * m.get('NoAns_f1', 0):.1f}; "
                     f"best F1 {100 * m['best_f1']:.1f} at threshold {m['best_f1_thresh']:.2f})")
        return line

    def write_predictions(self, split: SquadSplit, predictions: Decoded, directory: Path, kind: str) -> list[Path]:
        directory = Path(directory)
        nbest = {q: [{k: x[k] for k in ("text", "probability", "start_logit", "end_logit", "answer_start")}
                     for x in entries] for q, entries in predictions.nbest.items()}
        paths = [write_json(directory / "predictions.json", predictions.predictions),
                 write_json(directory / "nbest_predictions.json", nbest)]
        if self.version == 2:
            paths.append(write_json(directory / "null_odds.json", predictions.null_odds))
        if kind == "dev":
            paths.append(write_json(directory / "eval.json", self.official(split, predictions)))
        return paths

    def results(self) -> dict:
        return {"version": self.data.facts["version"], "windows": self.windows,
                "unaligned_answers": self.unaligned}


    def summary_title(self, results: dict) -> str:
        return f"SQuAD {self.data.facts['version']} dev (x100)"

    def summary_rows(self, results: dict) -> list[tuple[str, object]]:
        m = results["dev"]["dev"]
        rows: list[tuple[str, object]] = [("EM", f"{100 * m['exact']:.2f}"), ("F1", f"{100 * m['f1']:.2f}")]
        if self.version == 2:
            rows += [(k.replace("_", " "), f"{100 * m[k]:.2f}") for k in ("HasAns_f1", "NoAns_f1") if k in m]
            rows += [("best F1 / threshold", f"{100 * m['best_f1']:.2f} / {m['best_f1_thresh']:.3f}"),
                     ("best EM / threshold", f"{100 * m['best_exact']:.2f} / {m['best_exact_thresh']:.3f}")]
        rows.append(("best epoch", results["best_epoch"]))
        return rows


# ----------------------------------------------------------------------------------- command
def run_squad(recipe: Recipe, checkpoint: Path, data_dir: Path | None = None, hub: str | None = None,
              version: int = 1, out: Path | None = None) -> dict:
    """Fine-tune `checkpoint` on SQuAD; returns results.json's content."""
    return runner.finetune_task(SquadTask(recipe.finetune, version, data_dir, hub), recipe, checkpoint, out)


__all__ = ["SquadTask", "run_squad"]
