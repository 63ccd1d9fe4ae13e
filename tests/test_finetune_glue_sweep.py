"""The GLUE protocol (bertcli/finetune/classification/glue_sweep.py): the GLUE-dev average's rule
on known cells, and --from-mnli starting STS-B from the MNLI run's encoder, checked on the
weights the engine starts from."""

from __future__ import annotations

import statistics

import pytest
from finetune_fixtures import tiny_checkpoint
from helpers.glue import glue_sentence, write_tasks

from bertcli.finetune import sweep_summary as ss
from bertcli.finetune.classification.glue_sweep import glue_figures, table_rows


def _entry(task: str, cell: dict[str, dict[str, float]], from_mnli: bool = False) -> dict:
    """A task's sweep entry whose chosen rate has these dev medians (one seed: value = median)."""
    run = {"lr": 1e-5, "seed": 1, "dir": "seed-1", "status": "ok", "score": 0.5, "dev": cell, "test": {}}
    entry = ss.task_entry([run], [1e-5], "score")
    entry["from_mnli"] = from_mnli
    return entry


CELLS = {"cola": {"dev": {"mcc": 0.40}}, "sst2": {"dev": {"accuracy": 0.90}},
         "mrpc": {"dev": {"f1": 0.88, "accuracy": 0.84}}, "stsb": {"dev": {"pearson": 0.86, "spearman": 0.85}},
         "qqp": {"dev": {"f1": 0.70, "accuracy": 0.80}},
         "mnli": {"matched": {"accuracy": 0.80}, "mismatched": {"accuracy": 0.81}},
         "qnli": {"dev": {"accuracy": 0.87}}, "rte": {"dev": {"accuracy": 0.62}}, "wnli": {"dev": {"accuracy": 0.56}}}


def test_glue_dev_average_rule():
    """The mean over the 8 tasks without WNLI, a two-metric task counting the mean of both; the
    all-task average takes WNLI too; the table names both and marks MNLI-started cells."""
    entries = {t: _entry(t, c, from_mnli=t in ("rte", "mrpc", "stsb")) for t, c in CELLS.items()}
    per_task = {t: statistics.fmean([v for m in c.values() for v in m.values()]) for t, c in CELLS.items()}
    fig = glue_figures(entries)
    assert fig["dev_average"] == pytest.approx(statistics.fmean([v for t, v in per_task.items() if t != "wnli"]))
    assert fig["all_task_average"] == pytest.approx(statistics.fmean(per_task.values()))
    assert fig["tasks_in_dev_average"] == ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
    rows = dict(table_rows(entries, fig))
    assert rows["GLUE-dev average (8 tasks, no WNLI)"] == f"{100 * fig['dev_average']:.1f}"
    assert rows["all-task average (9 tasks)"] == f"{100 * fig['all_task_average']:.1f}"
    assert rows["MRPC F1/acc (from MNLI)"].startswith("88.0/84.0")
    assert rows["MNLI acc-m/acc-mm"].startswith("80.0/81.0")


def test_from_mnli_starts_from_the_mnli_encoder(tmp_path, monkeypatch):
    """`--from-mnli` with --task stsb: MNLI is fine-tuned first; STS-B's training starts from
    exactly the encoder weights of the chosen rate's best MNLI run (the weights saved in its
    folder), MNLI's from the checkpoint's; the summary marks STS-B. (The chance check is off:
    a tiny MNLI at chance would leave no run to start from.)"""
    import torch

    from bertcli import api
    from bertcli.config.options import SweepArgs
    from bertcli.finetune import engine, outcome
    from bertcli.model import load_checkpoint

    rng = __import__("random").Random(0)
    ckpt = tiny_checkpoint(tmp_path / "ckpt", [glue_sentence(rng, i % 2) for i in range(200)], hidden=32, layers=1)
    glue = write_tasks(tmp_path / "glue", n_sst=16)
    starts: list[dict[str, torch.Tensor]] = []
    real_fit = engine.fit

    def fit(model, task, *a, **kw):
        starts.append({k: v.detach().clone() for k, v in model.encoder.state_dict().items()})
        return real_fit(model, task, *a, **kw)

    monkeypatch.setattr(engine, "fit", fit)
    monkeypatch.setattr(outcome, "chance_report", lambda history, baselines: None)
    out = tmp_path / "out"
    summary = api.finetune_glue(ckpt, "stsb", data_dir=glue, out=out, from_mnli=True, sweep=SweepArgs(seeds="2"),
                                overrides=["finetune.epochs=1", "finetune.max_seq_length=32", "finetune.threads=1",
                                           "finetune.learning_rate=1e-3"])["sweep"]
    mnli, stsb = summary["tasks"]["mnli"], summary["tasks"]["stsb"]
    assert len(starts) == 4 and stsb["from_mnli"] and not mnli["from_mnli"]
    assert summary["glue"]["from_mnli"] == ["stsb"]
    kept, _ = load_checkpoint(out / "mnli" / mnli["kept"]["dir"], head="classification")
    source, _ = load_checkpoint(ckpt, head="classification", num_labels=3)
    for start in starts[2:]:                       # both STS-B runs
        assert start.keys() == kept.encoder.state_dict().keys()
        assert all(torch.equal(start[k], v) for k, v in kept.encoder.state_dict().items())
    for start in starts[:2]:                       # the MNLI runs: from the checkpoint
        assert all(torch.equal(start[k], v) for k, v in source.encoder.state_dict().items())
    assert not all(torch.equal(starts[2][k], v) for k, v in source.encoder.state_dict().items())
    assert (out / "submission" / "STS-B.tsv").is_file() and (out / "submission" / "MNLI-m.tsv").is_file()
    assert summary["glue"]["submission"] == {"mnli": f"mnli/{mnli['kept']['dir']}", "stsb": f"stsb/{stsb['kept']['dir']}"}
