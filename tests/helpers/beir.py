"""Retrieval sets in BEIR's layout."""

from __future__ import annotations

import json


# ------------------------------------------------------------------------------ BEIR reading
def write_beir(root, docs, queries, qrels, split="test"):
    """A BEIR folder: corpus.jsonl, queries.jsonl and qrels/<split>.tsv."""
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n"
                                               for i, t, x in docs), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": x}) + "\n" for i, x in queries),
                                        encoding="utf-8")
    (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{s}\n" for q, d, s in qrels), encoding="utf-8")
    return root
