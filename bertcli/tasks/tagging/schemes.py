"""Tag schemes and entity-level scores, as conlleval (and seqeval's default mode) define them.

Schemes (prefix-TYPE tags and `O`):
    iob1   the original CoNLL-2003 files: a chunk starts with I-X; B-X only starts a chunk
           that directly follows another X chunk
    iob2   every chunk starts with B-X, continues with I-X
    bioes  B-X I-X* E-X for chunks of several tokens, S-X for single tokens

Reading is conlleval's, whatever the scheme: a chunk ends when the next tag starts a new one
or leaves the type, a chunk starts at B/S, at I/E after O/E/S, and at a change of type. So any
tag sequence has one reading, and a sequence is *valid* for its scheme when writing that
reading back in the scheme gives the same tags; repairing it means exactly that rewrite (the
entities conlleval scores are unchanged by the repair).

Scores: entity precision / recall / F1 over exact (type, start, end) matches, micro-averaged
over all entities (conlleval's `overall`) and per type; token accuracy over all tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from bertcli.core.errors import UserError

PREFIXES = set("BIES")


def split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type): `B-PER` -> (B, PER), `O` -> (O, ''). Tags are validated by check_tags."""
    if tag == "O":
        return "O", ""
    return tag[0], tag[2:]


def check_tags(tags: Iterable[str], where: str) -> None:
    """Every tag is `O` or `P-TYPE` with P in B, I, E, S; else an unknown-scheme UserError."""
    for tag in tags:
        if tag != "O" and not (len(tag) > 2 and tag[0] in PREFIXES and tag[1] == "-"):
            raise UserError(f"tag {tag!r} is not O or B-/I-/E-/S-TYPE: unknown tag scheme", where=where,
                            fix="bertcli reads IOB1, IOB2 and BIOES tags (e.g. B-PER, I-LOC, S-ORG, O); "
                                "check finetune.ner.tag_column (the last column by default)")


def _ends(prev: str, tag: str, prev_type: str, type_: str) -> bool:
    """Does a chunk end after `prev` (conlleval's endOfChunk)?"""
    return (prev in "ES" or (prev in "BI" and tag in "BSO")
            or (prev != "O" and prev_type != type_))


def _starts(prev: str, tag: str, prev_type: str, type_: str) -> bool:
    """Does a chunk start at `tag` (conlleval's startOfChunk)?"""
    return (tag in "BS" or (prev in "ESO" and tag in "IE")
            or (tag != "O" and prev_type != type_))


def entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first, last) of every chunk, token indices inclusive, conlleval's reading."""
    out: list[tuple[str, int, int]] = []
    prev, prev_type, begin = "O", "", 0
    for i, tag in enumerate(list(tags) + ["O"]):
        p, t = split_tag(tag)
        if _ends(prev, p, prev_type, t):
            out.append((prev_type, begin, i - 1))
        if _starts(prev, p, prev_type, t):
            begin = i
        prev, prev_type = p, t
    return out


def encode(spans: Sequence[tuple[str, int, int]], length: int, scheme: str) -> list[str]:
    """Tags of `length` tokens holding the chunks `spans` in `scheme`."""
    tags = ["O"] * length
    last_end, last_type = -2, None
    for type_, a, b in spans:
        if scheme == "bioes":
            if a == b:
                tags[a] = f"S-{type_}"
            else:
                tags[a], tags[b] = f"B-{type_}", f"E-{type_}"
                tags[a + 1:b] = [f"I-{type_}"] * (b - a - 1)
        else:
            tags[a:b + 1] = [f"I-{type_}"] * (b - a + 1)
            if scheme == "iob2" or (last_end == a - 1 and last_type == type_):
                tags[a] = f"B-{type_}"
        last_end, last_type = b, type_
    return tags


def detect_scheme(sentences: Sequence[Sequence[str]], where: str) -> str:
    """iob1, iob2 or bioes from the training tags: E-/S- tags mean BIOES; a chunk that starts
    with I- means IOB1 (unless B- starts chunks more often, which is IOB2 with mistakes)."""
    prefixes, i_starts, b_starts = set(), 0, 0
    for tags in sentences:
        prev, prev_type = "O", ""
        for tag in tags:
            p, t = split_tag(tag)
            prefixes.add(p)
            if p == "I" and (prev == "O" or prev_type != t):
                i_starts += 1
            if p == "B" and (prev == "O" or prev_type != t):
                b_starts += 1
            prev, prev_type = p, t
    if prefixes & {"E", "S"}:
        return "bioes"
    return "iob1" if i_starts > b_starts else "iob2"


def repair(tags: Sequence[str], scheme: str) -> list[str]:
    """The tags rewritten validly in `scheme` with the same (conlleval) chunks."""
    return encode(entities(tags), len(tags), scheme)


# ------------------------------------------------------------------------------------ scores
def prf(correct: int, predicted: int, gold: int) -> tuple[float, float, float]:
    p = correct / predicted if predicted else 0.0
    r = correct / gold if gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def score(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """Entity P/R/F1 overall (micro) and per type, plus token accuracy; fractions.
    {"precision", "recall", "f1", "accuracy", "per_type": {TYPE: {precision, recall, f1, support}}}"""
    correct: dict[str, int] = {}
    n_pred: dict[str, int] = {}
    n_gold: dict[str, int] = {}
    tokens = right = 0
    for g, p in zip(gold, pred):
        if len(g) != len(p):
            raise ValueError(f"{len(g)} gold tags but {len(p)} predicted")  # a bug, not user input
        tokens += len(g)
        right += sum(a == b for a, b in zip(g, p))
        ge, pe = set(entities(g)), set(entities(p))
        for e in ge:
            n_gold[e[0]] = n_gold.get(e[0], 0) + 1
        for e in pe:
            n_pred[e[0]] = n_pred.get(e[0], 0) + 1
        for e in ge & pe:
            correct[e[0]] = correct.get(e[0], 0) + 1
    overall = prf(sum(correct.values()), sum(n_pred.values()), sum(n_gold.values()))
    per_type = {}
    for t in sorted(set(n_gold) | set(n_pred)):
        prec, rec, f1 = prf(correct.get(t, 0), n_pred.get(t, 0), n_gold.get(t, 0))
        per_type[t] = {"precision": prec, "recall": rec, "f1": f1, "support": n_gold.get(t, 0)}
    return {"precision": overall[0], "recall": overall[1], "f1": overall[2],
            "accuracy": right / tokens if tokens else 0.0, "per_type": per_type}
