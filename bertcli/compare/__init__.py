"""`bertcli compare`: a scorecard across fine-tuned checkpoints, from the summaries their
fine-tuning runs wrote.

    summaries.py  a run directory's results.json (a sweep's or one run's) -> per-seed figures
    scorecard.py  the cells (median, sd, n, min-max) and the pairs (Welch's test, Holm), as a dict
    render.py     that dict as a terminal table, GitHub markdown or JSON

Pure Python: no torch, numpy or scipy (tests/test_cli_startup.py checks it), so it answers at once.
"""
