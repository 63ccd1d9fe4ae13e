"""Files in the GLUE download's layout: a few real rows of every task (GLUE_FILES, for the readers),
and a learnable SST-2 with MNLI and STS-B beside it (write_tasks, for runs that must learn)."""

from __future__ import annotations

import random
from pathlib import Path

QUOTED = 'Amrozi accused his brother , whom he called " the witness " , of distorting his evidence .'
QUOTED2 = 'Referring to him as only " the witness " , Amrozi accused his brother .'
MNLI_HEAD = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
             "sentence1_parse\tsentence2_parse\tsentence1\tsentence2")


def mnli_row(i, s1, s2, labels):
    return "\t".join([str(i), "31193", f"{i}n", "government", "( ( x ) )", "( y )", "(ROOT (S x))",
                      "(ROOT (S y))", s1, s2, *labels])


GLUE_FILES = {
    "CoLA/train.tsv": (
        "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.\n"
        "gj04\t0\t*\tOne more pseudo generalization and I'm giving up.\n"
        'cj99\t1\t\tHe said "hello" and left.\n'),
    "CoLA/dev.tsv": "gj04\t1\t\tThe sailors rode the breeze clear of the rocks.\n"
                    'gj04\t0\t*\tThe "more" we study verbs.\n',
    "CoLA/test.tsv": "index\tsentence\n0\tBill whistled past the house.\n1\tThe \"car\" honked.\n",
    "SST-2/train.tsv": "sentence\tlabel\nhide new secretions from the parental units \t0\n"
                       'contains no wit , only labored " gags " \t0\nthat loves its characters \t1\n',
    "SST-2/dev.tsv": "sentence\tlabel\nit 's a charming and often affecting journey . \t1\n",
    "SST-2/test.tsv": "index\tsentence\n0\tuneasy mishmash of styles and genres .\n",
    # The download script copies the raw file's header, byte-order mark included.
    "MRPC/train.tsv": f"\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t702876\t702977\t{QUOTED}\t{QUOTED2}\n"
                      "0\t2108705\t2108831\tYucaipa owned Dominick 's .\tYucaipa bought Dominick 's in 1995 .\n",
    "MRPC/dev.tsv": f"\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1355540\t1355592\t{QUOTED2}\t{QUOTED}\n",
    "MRPC/test.tsv": f"index\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1089874\t1089925\t{QUOTED}\tPCCW 's chief .\n",
    "STS-B/train.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                       "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\t"
                       "An air plane is taking off.\t5.000\n"
                       "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man is \"playing\" a flute.\t"
                       "A man is playing a bamboo flute.\t3.800\n",
    "STS-B/dev.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                     "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man with a hard hat is dancing.\t"
                     "A man wearing a hard hat is dancing.\t5.000\n",
    "STS-B/test.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\n"
                      "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl is styling her hair.\t"
                      "A girl is brushing her hair.\n",
    "QQP/train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                     '133273\t213221\t213222\tHow is "life" of a math student?\tWhich level is enough?\t0\n'
                     "402555\t536040\t536041\tHow do I control my horny emotions?\tHow do you control your horniness?\t1\n",
    "QQP/dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                   "201359\t303345\t303346\tWhy are African-Americans so beautiful?\tWhy are hispanics so beautiful?\t0\n",
    "QQP/test.tsv": "id\tquestion1\tquestion2\n0\tWould the idea scare you?\tDo you think so?\n"
                    "1\tWhat is \"this\"?\tWhat's that?\n",
    "MNLI/train.tsv": MNLI_HEAD + "\tlabel1\tgold_label\n"
                      + mnli_row(0, 'Conceptually "cream skimming" has two dimensions.', "Product and geography.",
                                  ["neutral", "neutral"]) + "\n"
                      + mnli_row(1, "you know during the season", "You lose the things.", ["entailment", "entailment"])
                      + "\n" + mnli_row(2, "One of our number.", "A member will carry out.", ["entailment", "contradiction"])
                      + "\n",
    "MNLI/dev_matched.tsv": MNLI_HEAD + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                            + mnli_row(0, "The new rights are nice enough", "Everyone really likes the newest benefits",
                                        ["neutral", "entailment", "neutral", "neutral", "neutral", "neutral"]) + "\n",
    "MNLI/dev_mismatched.tsv": MNLI_HEAD + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                               + mnli_row(0, 'Your "contribution" helped.', "Your contributions were of no help.",
                                           ["contradiction"] * 5 + ["contradiction"]) + "\n"
                               + mnli_row(1, "The answer is yes.", "Yes.", ["entailment"] * 6) + "\n",
    "MNLI/test_matched.tsv": MNLI_HEAD + "\n" + mnli_row(0, "Hierbas, ans seco.", "This is a drink.", []) + "\n",
    "MNLI/test_mismatched.tsv": MNLI_HEAD + "\n" + mnli_row(0, "What have you decided?", "Decided yet?", []) + "\n",
    "QNLI/train.tsv": "index\tquestion\tsentence\tlabel\n0\tWhen did the third Digimon series begin?\t"
                      'Unlike the two seasons before it, "Digimon Tamers" takes a darker approach.\tnot_entailment\n',
    "QNLI/dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWhat came into force after the new constitution?\t"
                    "As of that day, the new constitution came into force.\tentailment\n",
    "RTE/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tNo Weapons of Mass Destruction Found in Iraq Yet.\t"
                     'Weapons of "Mass Destruction" Found in Iraq.\tnot_entailment\n',
    "RTE/dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tDana Reeve died.\tChristopher Reeve had an accident.\t"
                   "not_entailment\n1\tA is B.\tB is A.\tentailment\n",
    "RTE/test.tsv": "index\tsentence1\tsentence2\n0\tMamie Eisenhower.\tMamie was a First Lady.\n",
    "WNLI/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin through a carrot.\tThe carrot had a hole.\t1\n",
    "WNLI/dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe drain is clogged.\tThe hair is clogged.\t0\n",
    "WNLI/test.tsv": "index\tsentence1\tsentence2\n0\tMaude and Dora had seen trains.\tThe trains were far.\n",
    "diagnostic/diagnostic.tsv": "index\tsentence1\tsentence2\n0\tThe cat sat.\tThe cat did not sit.\n",
}


def write_glue(root, files=GLUE_FILES):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    return root


POS = ["good", "great", "excellent", "wonderful", "useful", "clear"]


NEG = ["bad", "poor", "awful", "broken", "useless", "wrong"]


FILL = ("the a this that module function value object list file name class method returns "
        "is was and but very quite really not always here there").split()


def glue_sentence(rng: random.Random, label: int) -> str:
    words = rng.choices(FILL, k=rng.randint(4, 9)) + [rng.choice(POS if label else NEG)]
    rng.shuffle(words)
    return " ".join(words) + (' "quoted"' if rng.random() < 0.2 else "")


def write_tasks(root: Path, seed: int = 0, n_sst: int = 480) -> Path:
    """SST-2 (learnable: a positive or negative word decides), MNLI (with both dev files, both
    test files and the diagnostic set) and STS-B, in the GLUE download's layout."""
    rng = random.Random(seed)
    sst = root / "SST-2"
    sst.mkdir(parents=True)
    for name, n in (("train", n_sst), ("dev", 120)):
        rows = [(glue_sentence(rng, lab), lab) for lab in (rng.randint(0, 1) for _ in range(n))]
        (sst / f"{name}.tsv").write_text("sentence\tlabel\n" + "".join(f"{s} \t{lab}\n" for s, lab in rows))
    (sst / "test.tsv").write_text("index\tsentence\n" + "".join(f"{i}\t{glue_sentence(rng, i % 2)}\n" for i in range(30)))

    head = "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2"
    labels = ["entailment", "neutral", "contradiction"]

    def nli(i, gold=()):
        return "\t".join([str(i), "1", f"{i}e", "fiction", "(x)", "(y)", "(X)", "(Y)", glue_sentence(rng, 1),
                          glue_sentence(rng, 0), *gold]) + "\n"
    mnli = root / "MNLI"
    mnli.mkdir()
    (mnli / "train.tsv").write_text(head + "\tlabel1\tgold_label\n" + "".join(nli(i, [labels[i % 3]] * 2) for i in range(48)))
    for part in ("matched", "mismatched"):
        (mnli / f"dev_{part}.tsv").write_text(head + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                                              + "".join(nli(i, [labels[i % 3]] * 6) for i in range(12)))
        (mnli / f"test_{part}.tsv").write_text(head + "\n" + "".join(nli(i) for i in range(7)))
    (root / "diagnostic").mkdir()
    (root / "diagnostic" / "diagnostic.tsv").write_text(
        "index\tsentence1\tsentence2\n" + "".join(f"{i}\t{glue_sentence(rng, 1)}\t{glue_sentence(rng, 0)}\n" for i in range(5)))

    sts = root / "STS-B"
    sts.mkdir()
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    for name, n in (("train", 40), ("dev", 16)):
        rows = "".join(f"{i}\tmain-news\tx\t2012\t{i}\tnone\tnone\t{glue_sentence(rng, 1)}\t{glue_sentence(rng, 0)}\t"
                       f"{rng.uniform(0, 5):.3f}\n" for i in range(n))
        (sts / f"{name}.tsv").write_text(head + "\tscore\n" + rows)
    (sts / "test.tsv").write_text(head + "\n" + "".join(f"{i}\tm\tx\t2012\t{i}\tn\tn\ta b\tc d\n" for i in range(6)))
    return root
