"""Vocabulary adaptation (`tokenizer.extend: N`) for an adopted tokenizer (bertcli.tokenization.adopt).

    extend_tokenizer(tok, corpus_split, n, config) -> (tokenizers.Tokenizer, Extension)
    init_new_rows(model, extension, old_rows) -> note     (bertcli.model.init_from calls it)
    load_extension(tokenizer_dir) -> Extension | None

Which tokens: the corpus's words as the tokenizer's own normalizer and pre-tokenizer cut them
(`polymerase`, `Ġpolymerase`, `▁polymerase`), seen at least twice, that the old vocabulary splits
into two or more pieces, most frequent first. How each becomes one piece, per model:
    WordPiece  the word joins the vocabulary (longest-match-first then takes it whole)
    Unigram    the piece joins with a score above the sum of its old pieces' (Viterbi prefers it)
    BPE        merges appended after all existing ones, joining the old pieces left to right; the
               prefixes they produce are tokens too (each counted among the N)
New ids follow the tokenizer's last id; the model's embedding rows grow to a multiple of the
family's `vocab_multiple`. Each new token's input embedding row and MLM decoder bias start as
the mean of its old pieces' rows (Hewitt 2021; exBERT, AdaLM); old rows are not touched. Rows
beyond the tokenizer (rounding) get a zero embedding and a bias below every old one, so that
they never win a prediction.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bertcli.core import jsonout
from bertcli.tokenization.train import _NoBar, _sentence_batches

FILE = "extension.json"
MIN_COUNT = 2


@dataclass
class Extension:
    old_vocab_size: int                                  # the checkpoint's embedding rows
    vocab_size: int                                      # the model's rows now (rounded up)
    tokens: list = field(default_factory=list)           # (token, new id, [old piece ids])

    def save(self, directory: Path, tokenizer, kind: str) -> None:
        Path(directory, FILE).write_text(jsonout.dumps({"old_vocab_size": self.old_vocab_size, "vocab_size": self.vocab_size,
                                                     "tokens": [list(t) for t in self.tokens]}, ensure_ascii=False),
                                         encoding="utf-8")
        if kind == "wordpiece":                          # vocab.txt in id order, the new words at the end
            vocab = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
            Path(directory, "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")


def load_extension(tokenizer_dir: Path) -> Extension | None:
    path = Path(tokenizer_dir) / FILE
    if not path.is_file():
        return None
    d = json.loads(path.read_text(encoding="utf-8"))
    return Extension(d["old_vocab_size"], d["vocab_size"], [tuple(t) for t in d["tokens"]])


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def candidate_words(tokenizer, split, limit_sentences: int = 200_000) -> Counter:
    """Pre-tokenized corpus words (in the model's alphabet) and their counts."""
    counts: Counter = Counter()
    seen = 0
    norm, pre = tokenizer.normalizer, tokenizer.pre_tokenizer
    for batch in _sentence_batches(split, _NoBar()):
        for s in batch:
            text = norm.normalize_str(s) if norm is not None else s
            counts.update(w for w, _ in (pre.pre_tokenize_str(text) if pre is not None else [(text, None)]))
        seen += len(batch)
        if seen >= limit_sentences:
            break
    return counts


def extend_tokenizer(tok, split, n: int, config):
    """`tok`: TokenizerInfo of the adopted tokenizer; `split`: the corpus's train split; `config`:
    the checkpoint's EncoderConfig. Returns the extended tokenizers.Tokenizer and the Extension."""
    from tokenizers import Tokenizer

    base = tok.tokenizer
    model = base.model
    obj = json.loads(base.to_str())
    kind = tok.kind
    next_id = base.get_vocab_size(with_added_tokens=True)
    vocab_now = base.get_vocab(with_added_tokens=True)
    added: list[tuple[str, int, list[int]]] = []
    merges: list = []
    for word, count in candidate_words(base, split).most_common():
        if len(added) >= n or count < MIN_COUNT:
            break
        pieces = model.tokenize(word)
        if len(pieces) < 2 or word in vocab_now:
            continue
        ids = [p.id for p in pieces]
        if kind == "bpe":
            prefix, chain = pieces[0].value, []
            for i, p in enumerate(pieces[1:], start=2):
                merges.append([prefix, p.value])
                prefix += p.value
                if prefix not in vocab_now:
                    chain.append((prefix, ids[:i]))
            if len(added) + len(chain) > n:
                merges = merges[: len(merges) - len(pieces) + 1]
                break
            new = chain
        else:
            new = [(word, ids)]
        for token, old in new:
            added.append((token, next_id, old))
            vocab_now[token] = next_id
            next_id += 1
    m = obj["model"]
    if kind == "wordpiece":
        m["vocab"].update({t: i for t, i, _ in added})
    elif kind == "bpe":
        m["vocab"].update({t: i for t, i, _ in added})
        as_strings = bool(m["merges"]) and isinstance(m["merges"][0], str)
        m["merges"] += [" ".join(x) for x in merges] if as_strings else merges
    else:
        scores = dict((p, s) for p, s in m["vocab"])
        for token, i, old in added:
            assert i == len(m["vocab"]), "Unigram ids are positions in its vocabulary"
            # above its split's total log-probability, so Viterbi takes it whole
            total = sum(scores[model.id_to_token(j)] for j in old)
            m["vocab"].append([token, total / 2 if total < 0 else total + 1.0])
    out = Tokenizer.from_str(jsonout.dumps(obj, ensure_ascii=False))
    size = out.get_vocab_size(with_added_tokens=True)
    rows = max(config.vocab_size, round_up(size, config.spec.vocab_multiple))
    return out, Extension(config.vocab_size, rows, added)


def init_new_rows(model, ext: Extension, old_rows: int) -> str:
    """Embedding rows and MLM decoder biases of the new tokens = the mean of their old pieces'
    (in place, under no_grad); rows past the tokenizer get zeros and a bias below every old one."""
    import torch

    word = model.encoder.embeddings.word.weight              # [V', E], the tied decoder too
    bias = model.mlm.bias                                     # [V']
    new_ids = {i for _, i, _ in ext.tokens}
    with torch.no_grad():
        for _, i, old in ext.tokens:
            idx = torch.tensor(old)
            word[i] = word[idx].mean(0)
            bias[i] = bias[idx].mean()
        floor = bias[:old_rows].min() - 10.0
        used = max(new_ids) + 1 if new_ids else old_rows
        for i in range(max(old_rows, used), word.shape[0]):
            word[i].zero_()
            bias[i] = floor
    return (f"tokenizer.extend: {len(ext.tokens):,} new tokens, embedding rows {ext.old_vocab_size:,} -> "
            f"{ext.vocab_size:,}; each new row (input embedding and MLM decoder bias) the mean of its old pieces'")
