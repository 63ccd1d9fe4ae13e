"""The model card (README.md) a model-writing command leaves in its model directory, checked
offline: huggingface_hub reads it, its model-index and its evaluation table are results.json's
dev figures, and it says how to load the model."""

from __future__ import annotations

import json
from pathlib import Path


def check_card(folder: Path, pipeline: str, loader: str) -> dict:
    """Assert the card of `folder` matches its results.json; returns the card's metadata."""
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    results = json.loads((Path(folder) / "results.json").read_text())
    card = ModelCard.load(Path(folder) / "README.md")
    meta = card.data.to_dict()
    assert meta["pipeline_tag"] == pipeline and "bertcli" in meta["tags"] and results["task"] in meta["tags"], meta
    _, evals = model_index_to_eval_results(meta["model-index"])
    want = {f"{split} {k}": round(v, 6) for split, values in results["dev"].items() for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert {e.metric_name: e.metric_value for e in evals} == want and want
    for name, value in want.items():
        assert f"| {name} | {value:.4f} |" in card.text
    assert loader in card.text and str(results["checkpoint"]) in card.text
    assert ModelCard.load(Path(folder) / "README.md").data.to_dict() == meta       # the metadata round-trips
    return meta
