"""Printing a scorecard (bertcli.compare.scorecard): a terminal table (plain lines in a pipe),
a GitHub markdown table to paste, or the whole of it as JSON. The three read the same dict, so
they cannot disagree."""

from __future__ import annotations

from bertcli.core import console, jsonout

MNLI_MARK = "†"


def render_scorecard(card: dict, fmt: str = "table") -> None:
    """fmt: table, markdown or json."""
    if fmt == "json":
        console.out.print(jsonout.dumps({"compare": card}, indent=2), markup=False)
        return
    (cell_head, cell_rows), (pair_head, pair_rows) = _figures(card), _pairs(card)
    lines = [_figures_title(card), _pairs_title(card)]
    notes = _notes(card)
    if fmt == "markdown":
        out = [f"**{lines[0]}**", "", *_markdown(cell_head, cell_rows), "", f"**{lines[1]}**", "",
               *_markdown(pair_head, pair_rows), "", *(f"- {n}" for n in notes)]
        console.out.print("\n".join(out), markup=False)
        return
    console.table([(h, "bold" if i == 0 else "") for i, h in enumerate(cell_head)], cell_rows, title=lines[0])
    console.out.print("", markup=False)
    console.table([(h, "bold" if i == 0 else "") for i, h in enumerate(pair_head)], pair_rows, title=lines[1])
    console.out.print("", markup=False)
    for note in notes:
        console.out.print(note, markup=False)


def _figures_title(card: dict) -> str:
    return ("dev figures, selected on dev (best epoch x best rate): the median over the seeds of the chosen "
            "learning rate (sd, n ok of the rate's runs; min-max)")


def _pairs_title(card: dict) -> str:
    tests = f"{card['tests']} test{'' if card['tests'] == 1 else 's'}"
    how = f"Holm-corrected over {tests}" if card["correction"] == "holm" else f"uncorrected ({tests})"
    return f"pairs on each task's score: difference of the medians; Welch's two-sided t-test over seeds, p {how}"


def _figures(card: dict) -> tuple[list[str], list[list[str]]]:
    cols = [c["name"] for c in card["columns"]]
    rows = []
    for task in card["tasks"]:
        rows.append([f"{task['task']} learning rate", *(_lr(task["rows"][0]["cells"][c]) for c in cols)])
        for row in task["rows"]:
            label = (f"score ({row['name']})" if row["name"] else "score") if row["metric"] == "score" else \
                (row["metric"] if len(task["splits"]) < 2 else f"{row['metric']} ({row['split']})")
            marks = {c: f" {MNLI_MARK}" if task["from_mnli"][c] else "" for c in cols}
            rows.append([f"{task['task']} {label}", *(_cell(row["cells"][c]) + marks[c] for c in cols)])
    glue = card["glue_dev_average"]
    if glue is not None:
        rows.append(["GLUE-dev average (no test)", *(_num(glue["values"][c]) for c in cols)])
    return ["task, metric", *cols], rows


def _pairs(card: dict) -> tuple[list[str], list[list[str]]]:
    rows = []
    for task in card["tasks"]:
        for p in task["pairs"]:
            test = "-" if p["p"] is None else f"t {p['t']:.2f}, df {p['df']:.1f}, p {_p(p['p_adjusted'])}"
            diff = "-" if p["diff"] is None else f"{p['diff']:+.4f}"
            spread = "-" if p["spread"] is None else f"{p['spread']:.4f}"
            rows.append([task["task"], f"{p['a']} - {p['b']}", diff, spread, test, p["verdict"]])
    return ["task", "pair", "difference", "seeds' sd", "test", "verdict"], rows


def _notes(card: dict) -> list[str]:
    notes = [f"verdicts: '<name> higher' where p < {card['alpha']} and the difference exceeds the seeds' sd (the "
             "larger of the two arms'); 'within the seeds' spread' where it does not, whatever p", *card["notes"]]
    if any(any(t["from_mnli"].values()) for t in card["tasks"]):
        notes.insert(0, f"{MNLI_MARK} started from the MNLI-fine-tuned encoder: not comparable with BERT's protocol")
    if card["glue_dev_average"] is not None:
        notes.insert(0, f"GLUE-dev average: {card['glue_dev_average']['rule']}")
    names = [f"{c['name']}: {c['directory']} ({c['kind']}, checkpoint {c['checkpoint']}, seeds "
             f"{', '.join(map(str, c['seeds']))})" for c in card["columns"]]
    return [*names, *notes]


def _cell(cell: dict | None) -> str:
    if cell is None:
        return "-"
    ok = f"{cell['n']}" if cell["n"] == cell["runs"] else f"{cell['n']} of {cell['runs']}"
    if cell["n"] == 0:
        finished = cell["runs"] - sum(cell["failed"].values())
        failed = ", ".join(f"{k} {v}" for k, v in cell["failed"].items() if v)
        if finished:   # the sweep chose no rate: each rate's median run failed
            return f"no rate chosen: the median run failed ({failed}, ok {finished})"
        return f"no run finished ok ({failed})"
    if cell["n"] == 1:
        return f"{_num(cell['median'])} (n {ok})"
    return (f"{_num(cell['median'])} (sd {_num(cell['sd'])}, n {ok}; "
            f"{_num(cell['min'])}-{_num(cell['max'])})")


def _lr(cell: dict) -> str:
    return "-" if cell["lr"] is None else f"{cell['lr']:g}"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4f}" if abs(x) < 10 else f"{x:.2f}"


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _markdown(head: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return [line(head), "|" + "---|" * len(head), *(line(r) for r in rows)]
