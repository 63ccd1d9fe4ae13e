"""Read SQuAD v1.1 / v2.0 (and CMRC 2018, the same JSON) into one format.

Layouts of `--data-dir`:
    json          the official files: train-v1.1.json + dev-v1.1.json, train-v2.0.json +
                  dev-v2.0.json, cmrc2018_train.json + cmrc2018_dev.json, or any `*train*.json`
                  + `*dev*.json` pair ({"data": [{"title", "paragraphs": [{"context", "qas": [
                  {"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]})
    save_to_disk  `datasets.load_dataset("rajpurkar/squad").save_to_disk(dir)` (dataset_dict.json),
                  splits train / validation, columns id, title, context, question,
                  answers {text: [...], answer_start: [...]}; squad_v2: unanswerable = no answers
    parquet       the hub's parquet files of the same columns (`<split>-*.parquet`, plain or in data/)
    hub           `--hub NAME`: `datasets.load_dataset(NAME)` (needs the network or its cache)

Every answer is checked: `context[answer_start:answer_start + len(text)] == text`. Contexts
shared by several questions are stored once (SQuAD has ~5 questions per paragraph), so they are
tokenized once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertcli.core import console
from bertcli.core.errors import UserError
from bertcli.io import records, tables
from bertcli.io.text import LineOptions, read_all


@dataclass
class SquadSplit:
    name: str                              # train | dev
    source: str                            # file or dataset split, for messages and results
    contexts: list[str]                    # unique contexts
    ids: list[str]                         # question ids, one per question
    questions: list[str]
    context_of: list[int]                  # index into contexts, per question
    answers: list[list[str]]               # gold texts ([] for unanswerable v2.0 questions)
    starts: list[list[int]]                # their character offsets in the context
    version: int = 1
    repaired: int = 0                      # answer_starts moved to their text (bad_answers=repair)
    dropped: int = 0                       # answers left out (bad_answers=repair/skip)

    def __len__(self) -> int:
        return len(self.ids)

    def context(self, i: int) -> str:
        return self.contexts[self.context_of[i]]

    def head(self, n: int) -> SquadSplit:
        """The first `n` questions (finetune.max_train_examples)."""
        used = sorted(set(self.context_of[:n]))
        remap = {c: k for k, c in enumerate(used)}
        return SquadSplit(self.name, self.source, [self.contexts[c] for c in used], self.ids[:n],
                          self.questions[:n], [remap[c] for c in self.context_of[:n]], self.answers[:n],
                          self.starts[:n], self.version)


@dataclass
class SquadData:
    layout: str
    source: str
    train: SquadSplit
    dev: SquadSplit
    version: int


class _Builder:
    """Collects questions of one split, checking each answer against its context."""

    def __init__(self, name: str, source: str, bad_answers: str = "error"):
        self.split = SquadSplit(name, source, [], [], [], [], [], [])
        self._context_index: dict[str, int] = {}
        self.impossible = 0          # questions marked unanswerable
        self.flagged = False         # the file carries is_impossible keys (v2.0 shape)
        self.bad_answers = bad_answers
        self.repaired = 0            # answer_start moved to the nearest occurrence of its text
        self.dropped = 0             # answers left out (text not in the context, or mode skip)
        self._seen: dict[str, str] = {}   # question id -> where it was first seen

    def context(self, text: str) -> int:
        index = self._context_index.get(text)
        if index is None:
            index = self._context_index[text] = len(self.split.contexts)
            self.split.contexts.append(text)
        return index

    def add(self, qid: str, question: str, ctx: int, texts: list[str], starts: list[int], where: str) -> None:
        if qid in self._seen:
            raise UserError(f"question id {qid!r} is given twice (first at {self._seen[qid]})", where=where,
                            fix="every question needs its own id: predictions.json and the metrics are keyed by it")
        self._seen[qid] = where
        context = self.split.contexts[ctx]
        had_answers = bool(texts)
        kept_texts, kept_starts = [], []
        for text, start in zip(texts, starts):
            # in range first: a negative start would match through Python's negative slicing
            ok = isinstance(start, int) and not isinstance(start, bool) and 0 <= start < len(context) \
                and context[start:start + len(text)] == text
            if not ok and self.bad_answers == "error":
                if isinstance(start, int) and not 0 <= start < len(context):
                    raise UserError(f"question {qid!r}: answer_start {start} is outside its context (0..{len(context) - 1})",
                                    where=where, fix="answer_start is the 0-based character offset of the answer in "
                                                     "the context; correct it, or --set finetune.squad.bad_answers=repair "
                                                     "(nearest occurrence of the text) or =skip")
                found = context[start:start + len(text)] if isinstance(start, int) else None
                raise UserError(
                    f"question {qid!r}: answer_start {start!r} does not point at its answer text {text!r} "
                    f"(the context has {found!r} there)", where=where,
                    fix="answer_start is the character offset of the answer in the context (0-based, "
                        "counted in Unicode characters); correct it, or --set finetune.squad.bad_answers=repair "
                        "(nearest occurrence of the text) or =skip")
            if not ok and self.bad_answers == "repair":
                found_at = nearest_occurrence(context, text, start if isinstance(start, int) else 0)
                ok = found_at is not None
                self.repaired += ok
                if found_at is not None:
                    start = found_at
            if ok:
                kept_texts.append(text)
                kept_starts.append(start)
            else:
                self.dropped += 1
        if had_answers and not kept_texts:
            return                    # every answer was bad: the question is left out, not made unanswerable
        texts, starts = kept_texts, kept_starts
        s = self.split
        s.ids.append(str(qid))
        s.questions.append(question)
        s.context_of.append(ctx)
        s.answers.append(list(texts))
        s.starts.append(list(starts))
        if not texts:
            self.impossible += 1


def nearest_occurrence(context: str, text: str, start: int) -> int | None:
    """The offset of the occurrence of `text` in `context` closest to `start` (None: none)."""
    best, at = None, context.find(text) if text else -1
    while at >= 0:
        if best is None or abs(at - start) < abs(best - start):
            best = at
        at = context.find(text, at + 1)
    return best


# ------------------------------------------------------------------------------------ json
def _need(obj: Any, key: str, kind: type, where: str, path: str) -> Any:
    if not isinstance(obj, dict):
        raise UserError(f"{path} is a {type(obj).__name__}, not an object: the file is not SQuAD-shaped",
                        where=where, fix=_SHAPE)
    if key not in obj:
        raise UserError(f"{path} has no {key!r}: the file is not SQuAD-shaped", where=where, fix=_SHAPE)
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UserError(f"{path}.{key} is a {type(value).__name__}, expected a {kind.__name__}",
                        where=where, fix=_SHAPE)
    return value


_SHAPE = ('expected {"data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [{"id": ..., '
          '"question": ..., "answers": [{"text": ..., "answer_start": ...}]}]}]}]} (the official SQuAD JSON)')


def read_json(path: Path, name: str, bad_answers: str = "error", encoding: str | None = None,
              answers: bool = True) -> tuple[SquadSplit, bool, int]:
    """One official SQuAD JSON file -> (split, carries is_impossible / version v2.0, unanswerable count).
    `answers=False`: the questions only, every one without an answer (distill --unlabelled)."""
    where = str(path)
    doc = tables.parse_json(read_all(Path(path), LineOptions(encoding=encoding)), where, _SHAPE)
    b = _Builder(name, where, bad_answers)
    b.flagged = isinstance(doc, dict) and str(doc.get("version", "")).startswith(("v2", "2"))
    for i, article in enumerate(_need(doc, "data", list, where, "the top level")):
        for j, para in enumerate(_need(article, "paragraphs", list, where, f"data[{i}]")):
            at = f"data[{i}].paragraphs[{j}]"
            ctx = b.context(_need(para, "context", str, where, at))
            for k, qa in enumerate(_need(para, "qas", list, where, at)):
                q_at = f"{at}.qas[{k}]"
                qid = qa.get("id") if isinstance(qa, dict) else None
                if not isinstance(qid, (str, int)) or isinstance(qid, bool):
                    _need(qa, "id", str, where, q_at)
                question = _need(qa, "question", str, where, q_at + f" (id {qid})")
                if not answers:
                    b.add(str(qid), question, ctx, [], [], where)
                    continue
                impossible = records.boolean(qa, "is_impossible", f"{where} {q_at} (id {qid})", default=False)
                b.flagged |= "is_impossible" in qa
                given = [] if impossible else _need(qa, "answers", list, where, q_at + f" (id {qid})")
                texts, starts = [], []
                for m, ans in enumerate(given):
                    a_at = f"{q_at}.answers[{m}] (id {qid})"
                    texts.append(_need(ans, "text", str, where, a_at))
                    starts.append(_need(ans, "answer_start", int, where, a_at))
                b.add(str(qid), question, ctx, texts, starts, where)
    if not b.split.ids:
        raise UserError("the file holds no questions", where=where, fix=_SHAPE)
    _report(b)
    return b.split, b.flagged, b.impossible


def _report(b: _Builder) -> None:
    b.split.repaired, b.split.dropped = b.repaired, b.dropped
    if b.repaired or b.dropped:
        console.log(f"{b.split.source}: {b.repaired:,} answer_start values moved to the nearest occurrence "
                    f"of their text, {b.dropped:,} answers left out (finetune.squad.bad_answers={b.bad_answers})")


def find_json(folder: Path, version: int) -> tuple[Path, Path] | None:
    """(train, dev) JSON files in `folder`: the official names first, else *train*/*dev* names."""
    official = [("train-v1.1.json", "dev-v1.1.json"), ("train-v2.0.json", "dev-v2.0.json")]
    if version == 2:
        official.reverse()            # the asked version's files first
    for train, dev in official:
        if (folder / train).is_file() and (folder / dev).is_file():
            return folder / train, folder / dev
    files = sorted(p for p in folder.glob("*.json") if p.name != "dataset_dict.json")
    trains = [p for p in files if "train" in p.name.lower()]
    devs = [p for p in files if any(w in p.name.lower() for w in ("dev", "valid"))]
    if not trains or not devs:
        return None
    prefer = lambda ps: next((p for p in ps if f"v{version}" in p.name), ps[0])  # noqa: E731
    return prefer(trains), prefer(devs)


# ------------------------------------------------------------------------------------ datasets
def _from_rows(cols: tables.Table, name: str, bad_answers: str = "error") -> _Builder:
    """A `datasets` squad / squad_v2 split (columns id, context, question, answers)."""
    names = cols.names()
    missing = [c for c in ("id", "context", "question", "answers") if c not in names]
    if missing:
        raise UserError(f"split {name}: column(s) {', '.join(missing)} missing: not the squad layout",
                        where=cols.source, fix="expected the `datasets` squad columns id, title, context, "
                                               f"question, answers; found: {', '.join(names)}")
    b = _Builder(name, cols.source, bad_answers)
    for i, (qid, context, question, ans) in enumerate(zip(cols.column("id"), cols.column("context"),
                                                          cols.column("question"), cols.column("answers"))):
        where = f"{cols.source} row {i}"
        rec = {"id": qid, "context": context, "question": question}
        qid = records.optional_text(rec, "id", where, "")
        if not isinstance(ans, dict) or "text" not in ans or "answer_start" not in ans:
            raise UserError(f"question {qid!r}: answers is {ans!r:.80}, expected {{'text': [...], 'answer_start': [...]}}",
                            where=where)
        texts = records.string_list(ans, "text", where)
        starts = ans["answer_start"]
        if not isinstance(starts, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in starts):
            raise UserError(f"question {qid!r}: answer_start is {starts!r:.60}, not a list of integers", where=where)
        b.add(qid, records.text(rec, "question", where), b.context(records.text(rec, "context", where)),
              texts, starts, where)
    if not b.split.ids:
        raise UserError(f"split {name} has no questions", where=cols.source)
    _report(b)
    return b


def _splits_of(folder: Path, layout: str) -> dict:
    return tables.parquet_splits(folder) if layout == "parquet" else tables.saved_splits(folder)


def _load_hub(name: str) -> dict:
    return tables.hub_splits(name, local_hint="download the data (rajpurkar/squad, rajpurkar/squad_v2) and pass "
                                              "--data-dir")


# ------------------------------------------------------------------------------------ entry
def load_squad(data_dir: Path | None = None, hub: str | None = None, version: int = 1,
               bad_answers: str = "error") -> SquadData:
    """Train and dev of SQuAD `version` (1 = v1.1, 2 = v2.0) from any layout; a v2.0 file read as
    v1.1 or the reverse is a UserError that says which. `bad_answers`: an answer_start that does
    not point at its text is an `error`, is moved to the nearest occurrence (`repair`; left out
    when there is none), or the answer is left out (`skip`); a question losing all its answers is
    left out."""
    if version not in (1, 2):
        raise UserError(f"--squad-version {version}: SQuAD versions are 1 (v1.1) and 2 (v2.0)")
    if hub:
        splits, layout, source = _load_hub(hub), "hub", hub
    else:
        assert data_dir is not None, "SquadTask checks that exactly one of data_dir and hub is given"
        folder = Path(data_dir)
        if not folder.is_dir():
            raise UserError(f"SQuAD data directory {folder} does not exist",
                            fix="pass --data-dir with train-v1.1.json + dev-v1.1.json (or v2.0), a datasets "
                                "save_to_disk directory, or parquet files")
        source = str(folder)
        if (folder / "dataset_dict.json").is_file():
            layout = "save_to_disk"
        elif tables.has_parquet(folder):
            layout = "parquet"
        else:
            pair = find_json(folder, version)
            if pair is None:
                present = ", ".join(sorted(p.name for p in folder.iterdir())) or "nothing"
                raise UserError(f"{folder} holds no SQuAD data", where=str(folder),
                                fix=f"found: {present}; expected train-v1.1.json + dev-v1.1.json (or "
                                    "train-v2.0.json + dev-v2.0.json), dataset_dict.json or *.parquet")
            (train, t_flag, t_imp), (dev, d_flag, d_imp) = (read_json(pair[0], "train", bad_answers),
                                                          read_json(pair[1], "dev", bad_answers))
            for split, flagged, impossible in ((train, t_flag, t_imp), (dev, d_flag, d_imp)):
                _check_version(split.source, version, flagged or impossible > 0, impossible)
            train.version = dev.version = version
            return SquadData("json", source, train, dev, version)
        splits = _splits_of(folder, layout)
    train_b = _from_rows(tables.pick_split(splits, ("train",), source), "train", bad_answers)
    dev_b = _from_rows(tables.pick_split(splits, ("validation", "dev", "test"), source), "dev", bad_answers)
    for b in (train_b, dev_b):
        _check_version(b.split.source, version, b.impossible > 0, b.impossible)
    train_b.split.version = dev_b.split.version = version
    return SquadData(layout, source, train_b.split, dev_b.split, version)


def _check_version(source: str, version: int, is_v2: bool, impossible: int) -> None:
    if version == 1 and is_v2:
        raise UserError(f"this is SQuAD v2.0 data ({impossible:,} unanswerable questions) but --squad-version 2 "
                        "was not given", where=source, fix="add --squad-version 2 (or give the v1.1 files)")
    if version == 2 and not is_v2:
        raise UserError("--squad-version 2 was given but this is SQuAD v1.1-style data (no is_impossible, no "
                        "unanswerable question)", where=source, fix="drop --squad-version 2 (or give the v2.0 files)")


__all__ = ["SquadSplit", "SquadData", "load_squad", "read_json", "find_json"]
