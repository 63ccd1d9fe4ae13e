"""`finetune.learning_rate: auto`: the peak learning rate from the model's size.

BERT's 2e-5 is right for BERT-base and -large and leaves a 2-layer, 128-wide model at chance
(issue 22: 50.0 dev accuracy in every epoch on an obviously separable task). The rate comes from
a table over the encoder's weight count, L x (4 H^2 + 2 H I) from config.json (attention's four
H x H projections and the feed-forward pair; embeddings left out, since their size follows the
vocabulary, not the depth or width that sets how far an update may move the representation):

    encoder weights   rate                    source
    <= 2M             1e-3                    measured here: the quickstart's bert-tiny (L2 H128,
                                              0.39M), docs/finetune-defaults.md
    <= 30M            1e-4                    Turc et al. 2019, "Well-Read Students Learn Better":
                                              the 24 small BERTs (L2-12, H128-512) fine-tuned
                                              with rates up to 1e-4
    larger            the task's paper rate   Devlin et al. 2019: 2e-5 .. 5e-5 for base and large
                                              (GLUE / classify 2e-5, NER 5e-5, SQuAD 3e-5)

A number set anywhere (recipe, --set, --lr, a task block) is used as given.
"""

from __future__ import annotations

from dataclasses import dataclass

TINY_MAX, SMALL_MAX = 2_000_000, 30_000_000
TINY_LR, SMALL_LR = 1e-3, 1e-4
PAPER_LR = {"ner": 5e-5, "squad": 3e-5, "squad_v2": 3e-5}   # anything else: BERT's GLUE 2e-5
GLUE_LR = 2e-5


@dataclass
class LrChoice:
    value: float
    source: str            # "auto" or "set"
    reason: str            # one phrase for the log and results.json

    def record(self) -> dict:
        return {"value": self.value, "source": self.source, "reason": self.reason}


def encoder_weights(config) -> int:
    """L x (4 H^2 + 2 H I): the encoder's weight matrices, from a model config."""
    h, layers = int(config.hidden_size), int(config.num_hidden_layers)
    inter = int(getattr(config, "intermediate_size", 4 * h) or 4 * h)
    return layers * (4 * h * h + 2 * h * inter)


def auto_rate(weights: int, task: str) -> tuple[float, str]:
    """(rate, why) for a model with `weights` encoder weights, fine-tuned on `task`."""
    size = f"{weights / 1e6:.2f}M encoder weights"
    if weights <= TINY_MAX:
        return TINY_LR, f"{size}, at most 2M: a tiny model, rate measured on the quickstart's bert-tiny"
    if weights <= SMALL_MAX:
        return SMALL_LR, f"{size}, at most 30M: a small BERT, Turc et al. 2019 searched up to 1e-4"
    rate = PAPER_LR.get(task, GLUE_LR)
    return rate, f"{size}, base or large: BERT's paper rate for {task}, Devlin et al. 2019"


def choose(learning_rate, config, task: str) -> LrChoice:
    """The rate to train with: the number given, or the table's for `config` when "auto"."""
    if learning_rate != "auto":
        return LrChoice(float(learning_rate), "set", "set in the recipe, --set or --lr")
    rate, why = auto_rate(encoder_weights(config), task)
    return LrChoice(rate, "auto", why)
