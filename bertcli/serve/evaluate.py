"""`bertcli evaluate -c DIR --corpus F [--corpus G ...]`: MLM loss, MLM accuracy, pseudo-perplexity
(and NSP / SOP accuracy where the rows and the checkpoint have that head) of any checkpoint on
held-out text.

Each corpus goes through the pipeline's own stages, as a continued-pretraining run would read it:
corpus -> the checkpoint's tokenizer adopted (bertcli.tokenization.adopt) -> data built with static
masks drawn from `seed` (one copy, every document, no validation split). The masks depend on the
text, the tokenizer, the data settings and the seed only, never on the weights: checkpoints that
share a tokenizer are scored on the same masked positions (and share the cached stages).

    mlm_loss, mlm_acc      over every masked position of every row (sums / count)
    pseudo_perplexity      Salazar et al. 2020: exp(-mean log p(token | the row with only that
                           token masked)) over every real token of the first `pppl_rows` rows;
                           null with `pseudo_perplexity_reason` when there is none (--pppl-rows 0)
    pair_acc               NSP (bert) / SOP (albert) rows, when the checkpoint has the head

An RTD checkpoint (train.objective: rtd; bertcli.config.checkpoint.rtd_generator) is scored
twice on the same masked rows: the MLM figures are its generator/'s, and the discriminator
judges each row with the generator's samples in place of the masked tokens (drawn by inverse CDF
of its softmax from uniforms seeded by `seed`, as in training; the masks are the static
80/10/10 ones every checkpoint gets here, not ELECTRA's 85/15):
    rtd_acc, rtd_auc       replaced-or-original accuracy (logit > 0) and ROC AUC of the
                           discriminator's logits, over every real token (specials included)
    rtd_loss, replaced     its mean BCE, and the fraction of real tokens that were replaced
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

from bertcli.config.checkpoint import read_config, rtd_generator
from bertcli.config.recipe import load_recipe
from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.core.machine import use_threads
from bertcli.core.outputs import check_work_dir
from bertcli.data.build import ensure_data
from bertcli.model.finite import require_finite_outputs
from bertcli.tokenization.build import ensure_tokenizer
from bertcli.tokenization.load import load_tokenizer


@dataclass
class EvalSettings:
    seed: int = 42
    max_seq_length: int = 128
    objective: str | None = None          # None: the family's pair head (nsp / sop / none)
    batch_size: int = 32
    pppl_rows: int = 32
    cache: Path = Path("runs/evaluate")
    threads: int | None = None            # None: the cores other jobs leave free (bertcli.core.machine)


def eval_recipe(checkpoint: Path, corpus: Path, s: EvalSettings, pair_head: bool = True):
    """The recipe whose stages turn `corpus` into masked rows for `checkpoint`'s tokenizer. The
    rows are pairs (the family's nsp / sop) only when asked (--objective) or when the checkpoint
    has the trained pair head that scores them; else single texts, which any corpus gives
    (one text per line included)."""
    c = read_config(checkpoint)
    objective = s.objective or (c.spec.pair_head if pair_head else "none")   # as data.objective spells them
    length = min(s.max_seq_length, c.max_position_embeddings - c.position_offset)
    sets = [f"output_dir={s.cache}", f"seed={s.seed}", f"model.init_from={_yaml_str(checkpoint)}",
            f"corpus.sources=[{_yaml_str(corpus)}]", "corpus.validation_fraction=0.0",
            f"data.objective={objective}", f"data.max_seq_length={length}", "data.masking=static",
            "data.dupe_factor=1", f"data.max_predictions_per_seq={max(1, round(length * 0.15))}"]
    recipe = load_recipe(None, sets)
    recipe.source, recipe.flags = f"--corpus {corpus}", {"data.objective": "--objective"}   # its messages name the flag
    return recipe


def _yaml_str(p) -> str:
    return jsonout.dumps(str(p))


def _check_inputs(checkpoint: Path, corpora: list[Path], s: EvalSettings) -> None:
    """Before torch and the model load: the corpora exist, the cache writes into none of the
    inputs, and an --objective is the checkpoint family's layout (or none)."""
    if not corpora:
        raise UserError("no --corpus given", fix="bertcli evaluate -c DIR --corpus held_out.txt [--corpus more.txt]")
    for corpus in corpora:
        if not Path(corpus).exists():
            raise UserError(f"--corpus {corpus} does not exist", fix="give a text file (or directory) of held-out text")
    check_work_dir(s.cache, corpora, "--cache", [checkpoint])
    config = read_config(checkpoint)
    family, pairs = config.family, config.spec.pair_head
    if s.objective not in (None, "none", pairs):
        shown = "has no pair head" if pairs == "none" else f"pairs rows for {pairs.upper()}"
        raise UserError(f"--objective {s.objective} does not fit the checkpoint: a {family} model {shown}",
                        where="--objective", fix=" or ".join(f"--objective {o}" for o in dict.fromkeys((pairs, "none")))
                        + " (or leave it out: rows follow the checkpoint's heads)")


def run_evaluate(checkpoint: Path, corpora: list[Path], s: EvalSettings) -> dict:
    checkpoint = Path(checkpoint)
    _check_inputs(checkpoint, corpora, s)
    import torch

    from bertcli.data.collator import PretrainCollator
    from bertcli.data.dataset import PretrainDataset, load_data
    from bertcli.model.checkpoint import load_checkpoint, missing_heads

    generator = rtd_generator(checkpoint)
    mlm_dir = generator or checkpoint                  # an RTD run's MLM figures are its generator's
    missing = missing_heads(mlm_dir)
    if "mlm" in missing:
        raise _no_mlm_head(checkpoint)
    use_threads(s.threads, "--threads")
    model, _ = load_checkpoint(mlm_dir, "pretraining")
    disc = load_checkpoint(checkpoint, "discriminator")[0] if generator is not None else None
    pair_head = model.pair is not None and "pair" not in missing
    out: dict = {"checkpoint": str(checkpoint), "seed": s.seed, "corpora": []}  # JSON: mixed values
    if generator is not None:
        out["generator"] = str(generator)
    for corpus in corpora:
        recipe = eval_recipe(checkpoint, Path(corpus), s, pair_head)
        tok_stage = ensure_tokenizer(recipe)
        data_stage = ensure_data(recipe)
        tok = load_tokenizer(tok_stage.path)
        rows = PretrainDataset(load_data(data_stage.path)["train"])
        collate = PretrainCollator(tok, recipe.data, recipe.seed)
        with torch.no_grad():
            res = _score(model, rows, collate, s.batch_size, pair_head and recipe.data.objective != "none", checkpoint)
            if disc is not None:
                res.update(score_rtd(model, disc, rows, collate, s.batch_size, s.seed, checkpoint))
            pppl, res["pppl_tokens"] = _pseudo_perplexity(model, rows, tok, s.pppl_rows, checkpoint)
        res.update(jsonout.number_or_null("pseudo_perplexity", pppl, _no_pppl(s.pppl_rows, res["pppl_tokens"])))
        res.update(corpus=str(corpus), data=str(data_stage.path), tokenizer=str(tok_stage.path), objective=recipe.data.objective,
                   max_seq_length=recipe.data.max_seq_length)
        out["corpora"].append(res)
        console.log(f"{corpus}: {res['rows']:,} rows, {res['masked']:,} masked tokens: MLM loss {res['mlm_loss']:.4f}, "
                    f"acc {res['mlm_acc']:.4f}, pseudo-perplexity {_ppl(res)}"
                    + (f"; discriminator acc {res['rtd_acc']:.4f}, AUC {_num(res['rtd_auc'])}" if disc else ""))
    return out


def score_rtd(gen, disc, rows, collate, batch_size: int, seed: int, checkpoint: Path) -> dict:
    """The discriminator's figures on the rows as the generator corrupts them (module docstring)."""
    import torch
    import torch.nn.functional as F

    from bertcli.model.electra import sample

    g = torch.Generator().manual_seed(seed)
    scores, labels, loss = [], [], 0.0
    for start in range(0, len(rows), batch_size):
        b = collate([rows[(0, i)] for i in range(start, min(len(rows), start + batch_size))])
        ids, attn, types, pos = b["input_ids"], b["attention_mask"], b["token_type_ids"], b["mlm_positions"]
        logits = gen(ids, attn, types, pos).mlm_logits.float()                            # [N, V]
        fake = ids.clone()
        fake.view(-1)[pos] = sample(logits, torch.rand(len(pos), generator=g, dtype=torch.float64))
        original = ids.clone()
        original.view(-1)[pos] = b["mlm_labels"]
        real = attn.bool()
        d = disc(fake, attn, types).float()                                              # [B, T]
        require_finite_outputs(d, checkpoint, "discriminator logits")
        replaced = (fake != original)[real].float()
        loss += F.binary_cross_entropy_with_logits(d[real].double(), replaced.double(), reduction="sum").item()
        scores.append(d[real])
        labels.append(replaced.bool())
    score, label = torch.cat(scores), torch.cat(labels)
    n = len(label)
    return {"rtd_acc": ((score > 0) == label).float().mean().item(), "rtd_auc": roc_auc(score, label),
            "rtd_loss": loss / n, "replaced": label.float().mean().item()}


def roc_auc(score, label) -> float | None:
    """Area under the ROC curve: P(a replaced token scores above an original one), ties counting
    half (the Mann-Whitney U statistic from average ranks); None without both kinds."""
    import torch

    n_pos = int(label.sum())
    n_neg = len(label) - n_pos
    if not n_pos or not n_neg:
        return None
    _, inverse, n = torch.unique(score.double(), return_inverse=True, return_counts=True)   # sorted values
    counts = n.double()
    below = counts.cumsum(0) - counts                                # tokens scoring under each value
    rank = (below + (counts + 1) / 2.0)[inverse]                     # [n] average 1-based rank
    return ((rank[label].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def _no_mlm_head(checkpoint: Path) -> UserError:
    """A checkpoint without a trained MLM head (a bare encoder, a fine-tuned classifier): its MLM
    figures would be those of a head drawn at random, different on every run."""
    return UserError(f"the checkpoint {checkpoint} has no MLM head (its weights hold no masked-language-model "
                     "tensors): its MLM loss, accuracy and pseudo-perplexity would be those of a head initialized "
                     "at random", where=str(checkpoint),
                     fix=f"continue pretraining it for a few hundred steps to train one (bertcli pretrain --init-from "
                         f"{checkpoint} ...), then evaluate that; or judge a fine-tuned model by finetune's own "
                         "scores on its task's dev set")


def _no_pppl(pppl_rows: int, tokens: int) -> str:
    """Why a pseudo-perplexity is null (written beside it; a NaN would read as a result)."""
    if pppl_rows == 0:
        return "not computed: --pppl-rows 0 scores no rows"
    if tokens == 0:
        return f"not computed: the first {pppl_rows} rows hold no real (non-special) token to mask"
    return "exp(mean negative log-likelihood) exceeds the largest float"


def _ppl(r: dict) -> str:
    return "-" if r["pseudo_perplexity"] is None else f"{r['pseudo_perplexity']:.2f}"


def _score(model, rows, collate, batch_size: int, pair: bool, checkpoint: Path | None = None) -> dict:
    """MLM (and pair) sums over every row, in order; a model computing non-finite logits is
    refused, naming `checkpoint`."""
    import torch.nn.functional as F

    loss = correct = masked = pair_correct = seqs = 0.0
    for start in range(0, len(rows), batch_size):
        b = collate([rows[(0, i)] for i in range(start, min(len(rows), start + batch_size))])
        o = model(b["input_ids"], b["attention_mask"], b["token_type_ids"], b["mlm_positions"])
        logits = o.mlm_logits.float()                                              # [N, V]
        require_finite_outputs(logits, checkpoint, "MLM logits")
        loss += F.cross_entropy(logits.double(), b["mlm_labels"], reduction="sum").item()
        correct += (logits.argmax(-1) == b["mlm_labels"]).sum().item()
        masked += b["mlm_labels"].numel()
        if pair and o.pair_logits is not None and "pair_labels" in b:
            pair_correct += (o.pair_logits.argmax(-1) == b["pair_labels"]).sum().item()
            seqs += b["input_ids"].shape[0]
    if not masked:
        raise UserError("the corpus gave no masked tokens to score", fix="give more held-out text")
    return {"rows": len(rows), "masked": int(masked), "mlm_loss": loss / masked, "mlm_acc": correct / masked,
            "pair_acc": pair_correct / seqs if seqs else None}


def _pseudo_perplexity(model, rows, tok, n_rows: int, checkpoint: Path | None = None) -> tuple[float | None, int]:
    """Each real (non-special) token of the first n_rows rows masked alone: [n, T] copies of a
    row, copy j with token j masked, scored at that position. (None, 0) when no token was
    scored; inf when exp(mean NLL) overflows a float (the caller writes null and why)."""
    import torch

    total, count = 0.0, 0
    for i in range(min(n_rows, len(rows))):
        row = rows[(0, i)]
        # torch.tensor copies: the rows are read-only numpy views of the Arrow data (as_tensor would
        # share them, and torch warns about every non-writable array)
        ids = torch.tensor(row["input_ids"], dtype=torch.long)                               # [T]
        if "masked_positions" in row:                                    # the stored replacements undone
            ids[torch.tensor(row["masked_positions"], dtype=torch.long)] = torch.tensor(row["masked_ids"],
                                                                                        dtype=torch.long)
        types = torch.tensor(row.get("token_type_ids", [0] * len(ids)), dtype=torch.long)
        real = [j for j, t in enumerate(ids.tolist()) if t not in tok.special_ids]
        if not real:
            continue
        T, n = len(ids), len(real)
        batch = ids.repeat(n, 1)                                                             # [n, T]
        at = torch.tensor(real)
        batch[torch.arange(n), at] = tok.mask_id
        flat = torch.arange(n) * T + at                                                      # [n]
        o = model(batch, torch.ones_like(batch), types.repeat(n, 1), flat)
        logp = torch.log_softmax(o.mlm_logits.double(), -1)                                  # [n, V]
        require_finite_outputs(logp, checkpoint, "MLM log-probabilities")
        total += logp[torch.arange(n), ids[at]].sum().item()
        count += n
    if not count:
        return None, 0
    nll = -total / count
    return (math.exp(nll) if nll < math.log(sys.float_info.max) else math.inf), count


def render_evaluation(result: dict, as_json: bool = False) -> None:
    if as_json:
        console.out.print(jsonout.dumps(result, indent=2), markup=False)
        return
    rows = []
    rtd = "generator" in result          # an RTD checkpoint: its generator's MLM, its discriminator's figures
    for r in result["corpora"]:
        pair = "-" if r["pair_acc"] is None else f"{r['pair_acc']:.4f}"
        rows.append((r["corpus"], f"{r['rows']:,}", f"{r['masked']:,}", f"{r['mlm_loss']:.4f}", f"{r['mlm_acc']:.4f}",
                     _ppl(r), pair, *((f"{r['rtd_acc']:.4f}", _num(r["rtd_auc"])) if rtd else ())))
    console.table([("corpus", "bold"), ("rows", ""), ("masked", ""), ("MLM loss", ""), ("MLM acc", ""),
                   ("pseudo-ppl", ""), (f"{'pair'} acc", ""), *((("RTD acc", ""), ("RTD AUC", "")) if rtd else ())],
                  rows)
