"""SQuAD scoring: hand-checked cases, and agreement with a faithful re-implementation of the
official evaluate-v1.1.py / evaluate-v2.0.py definitions (written here from the scripts'
definitions, independent of bertcli's code) on many random predictions."""

from __future__ import annotations

import collections
import random
import re
import string

import pytest

from bertcli.finetune.qa import metrics as M


# ------------------------------------------------------------- the official scripts' definitions
def off_normalize(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def off_f1_v1(prediction, ground_truth):
    p, g = off_normalize(prediction).split(), off_normalize(ground_truth).split()
    common = collections.Counter(p) & collections.Counter(g)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision, recall = 1.0 * num_same / len(p), 1.0 * num_same / len(g)
    return (2 * precision * recall) / (precision + recall)


def off_eval_v1(golds, preds):
    f1 = em = total = 0
    for qid, answers in golds.items():
        total += 1
        if qid not in preds:
            continue
        em += max(off_normalize(preds[qid]) == off_normalize(g) for g in answers)
        f1 += max(off_f1_v1(preds[qid], g) for g in answers)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def off_f1_v2(a_gold, a_pred):
    gold_toks, pred_toks = off_normalize(a_gold).split(), off_normalize(a_pred).split()
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision, recall = 1.0 * num_same / len(pred_toks), 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def off_eval_v2(golds, preds, na_probs):
    has_ans = {q: bool(a) for q, a in golds.items()}
    exact, f1 = {}, {}
    for qid, answers in golds.items():
        gold = [a for a in answers if off_normalize(a)] or [""]
        exact[qid] = max(int(off_normalize(a) == off_normalize(preds[qid])) for a in gold)
        f1[qid] = max(off_f1_v2(a, preds[qid]) for a in gold)

    def thresh(scores, t=1.0):
        return {q: (float(not has_ans[q]) if na_probs[q] > t else s) for q, s in scores.items()}

    def best(scores):
        num_no_ans = sum(1 for k in has_ans if not has_ans[k])
        cur = best_score = num_no_ans
        best_t = 0.0
        for qid in sorted(na_probs, key=lambda k: na_probs[k]):
            if qid not in scores:
                continue
            diff = scores[qid] if has_ans[qid] else (-1 if preds[qid] else 0)
            cur += diff
            if cur > best_score:
                best_score, best_t = cur, na_probs[qid]
        return 100.0 * best_score / len(scores), best_t

    e, f = thresh(exact), thresh(f1)
    out = {"exact": 100.0 * sum(e.values()) / len(e), "f1": 100.0 * sum(f.values()) / len(f), "total": len(e)}
    for name, keep in (("HasAns", True), ("NoAns", False)):
        qs = [q for q in golds if has_ans[q] == keep]
        if qs:
            out[f"{name}_exact"] = 100.0 * sum(e[q] for q in qs) / len(qs)
            out[f"{name}_f1"] = 100.0 * sum(f[q] for q in qs) / len(qs)
            out[f"{name}_total"] = len(qs)
    out["best_exact"], out["best_exact_thresh"] = best(exact)
    out["best_f1"], out["best_f1_thresh"] = best(f1)
    return out


# ------------------------------------------------------------------------------ hand-checked
def test_normalization_articles_punctuation_case_whitespace():
    assert M.normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert M.normalize_answer("an apple, a pear") == "apple pear"
    assert M.normalize_answer("theatre") == "theatre"            # articles only as whole words
    assert M.normalize_answer("A.D. 1066") == "ad 1066"          # punctuation removed, not split on
    assert M.normalize_answer("\tSanta\nClara ") == "santa clara"
    assert M.exact("the Broncos.", "Broncos") == 1.0
    assert M.exact("Broncos", "Denver Broncos") == 0.0


def test_f1_hand_checked():
    # pred {denver, broncos, team}, gold {denver, broncos}: P 2/3, R 1, F1 0.8
    assert M.f1("Denver Broncos team", "the Denver Broncos") == pytest.approx(0.8)
    # repeated tokens count as a bag: pred {a1, a1}, gold {a1}: common 1, P 1/2, R 1
    assert M.f1("x x", "x") == pytest.approx(2 / 3)
    assert M.f1("", "Broncos") == 0.0
    assert M.f1("the", "a", version=1) == 0.0            # both normalize to nothing: v1.1 gives 0
    assert M.f1("the", "a", version=2) == 1.0            # v2.0: empty == empty


def test_max_over_several_golds():
    em, f = M.score_one("Santa Clara", ["Levi's Stadium", "Santa Clara, California", "santa clara"])
    assert em == 1.0 and f == 1.0
    em, f = M.score_one("Clara California", ["Levi's Stadium", "Santa Clara, California"])
    assert em == 0.0 and f == pytest.approx(0.8)      # P 1, R 2/3


def test_v2_empty_predictions_and_breakdown():
    golds = {"a": ["Paris"], "b": [], "c": ["the Alps", "Alps"], "d": []}
    preds = {"a": "Paris", "b": "", "c": "", "d": "Rome"}
    r = M.official_scores(preds, golds, version=2)
    assert r["exact"] == pytest.approx(50.0) and r["f1"] == pytest.approx(50.0)
    assert r["HasAns_exact"] == 50.0 and r["HasAns_total"] == 2
    assert r["NoAns_exact"] == 50.0 and r["NoAns_total"] == 2
    # threshold search over the best spans: c's span is right, d's span is a wrong answer
    na = {"a": -5.0, "b": 3.0, "c": -1.0, "d": 2.0}
    spans = {"a": "Paris", "b": "London", "c": "Alps", "d": "Rome"}
    r = M.official_scores(spans, golds, version=2, na_probs=na)
    # answering a and c (thresh -1.0) is best: a, c right, b, d null = 4/4
    assert r["best_exact"] == 100.0 and r["best_exact_thresh"] == -1.0
    assert r["best_f1"] == 100.0 and r["best_f1_thresh"] == -1.0


def test_character_scoring_for_text_without_spaces():
    """CMRC 2018's definitions: punctuation out, F1 from the longest common contiguous run."""
    assert M.exact("北京。", "北京") == 0.0
    assert M.exact("北京。", "北京", chars=True) == 1.0
    # pred 北京市 vs gold 北京: run 2, P 2/3, R 1 -> 0.8
    assert M.f1("北京市", "北京", chars=True) == pytest.approx(0.8)
    # the same characters out of order share a run of 1 only (a bag would say 1.0)
    assert M.f1("京北", "北京", chars=True) == pytest.approx(0.5)
    # latin words inside Chinese text are one segment each
    assert M.mixed_segmentation("在2008年Beijing举办") == ["在", "2008", "年", "beijing", "举", "办"]
    assert M.f1("北京市", "北京") == 0.0                # whitespace tokens: one word each, different
    assert not M.has_spaces(["中国的首都是北京。北京有很多人。"])
    assert M.has_spaces(["The capital of France is Paris."])


def cmrc_reference(answers, prediction):
    """cmrc2018_evaluate.py's calc_f1_score / calc_em_score, written from its definitions."""
    sp_char = ["-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=", "，", "。", "：", "？", "！", "“", "”",
               "；", "’", "《", "》", "……", "·", "、", "「", "」", "（", "）", "－", "～", "『", "』"]

    def segs(text):
        text, out, tmp = text.lower().strip(), [], ""
        for ch in text:
            if ch in sp_char:
                continue
            if re.search("[\u4e00-\u9fa5]", ch):
                out += re.findall(r"\w+|[^\w\s]", tmp) if tmp else []
                tmp = ""
                out.append(ch)
            else:
                tmp += ch
        return out + (re.findall(r"\w+|[^\w\s]", tmp) if tmp else [])

    def lcs(a, b):
        m = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        best = 0
        for i in range(len(a)):
            for j in range(len(b)):
                if a[i] == b[j]:
                    m[i + 1][j + 1] = m[i][j] + 1
                    best = max(best, m[i + 1][j + 1])
        return best

    f1s = []
    for ans in answers:
        a, p = segs(ans), segs(prediction)
        n = lcs(a, p)
        f1s.append(0 if n == 0 else 2 * (n / len(p)) * (n / len(a)) / ((n / len(p)) + (n / len(a))))
    strip = lambda t: "".join(c for c in t.lower().strip() if c not in sp_char)  # noqa: E731
    return max(f1s), float(any(strip(a) == strip(prediction) for a in answers))


def test_character_scoring_agrees_with_the_cmrc_definitions():
    rng = random.Random(3)
    pieces = list("北京上海的是在年，。（）") + ["2008", "Beijing", " ", "-"]
    text = lambda: "".join(rng.choices(pieces, k=rng.randint(1, 8)))  # noqa: E731
    for _ in range(300):
        golds = [text() for _ in range(rng.randint(1, 3))]
        pred = rng.choice(golds) if rng.random() < 0.2 else text()
        em, f = M.score_one(pred, golds, version=1, chars=True)
        ref_f, ref_em = cmrc_reference(golds, pred)
        assert f == pytest.approx(ref_f) and em == ref_em, (pred, golds)


# ------------------------------------------------------------------- against the definitions
WORDS = "the a an Paris paris London Alps , . ! Denver Broncos 1990 'quoted' x".split()


def _text(rng):
    return " ".join(rng.choices(WORDS, k=rng.randint(0, 5)))


def test_agrees_with_the_official_definitions_on_random_cases():
    rng = random.Random(0)
    golds1 = {str(i): [_text(rng) or "x" for _ in range(rng.randint(1, 3))] for i in range(400)}
    preds1 = {q: (_text(rng) if rng.random() < 0.7 else rng.choice(a)) for q, a in golds1.items()}
    del preds1["7"]                                     # an unanswered question scores 0
    ours, ref = M.official_scores(preds1, golds1, version=1), off_eval_v1(golds1, preds1)
    for k in ("exact_match", "f1"):
        assert ours[k] == pytest.approx(ref[k], abs=1e-9)

    golds2 = {str(i): ([] if rng.random() < 0.4 else [_text(rng) for _ in range(rng.randint(1, 3))])
              for i in range(400)}
    preds2 = {q: ("" if rng.random() < 0.3 else _text(rng)) for q in golds2}
    na = {q: round(rng.uniform(-3, 3), 1) for q in golds2}  # ties on purpose
    ours, ref = M.official_scores(preds2, golds2, version=2, na_probs=na), off_eval_v2(golds2, preds2, na)
    assert set(ref) <= set(ours)
    for k, v in ref.items():
        assert ours[k] == pytest.approx(v, abs=1e-9), k
