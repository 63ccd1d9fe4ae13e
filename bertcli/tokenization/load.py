"""Loading a tokenizer: any Hugging Face tokenizer directory, for every stage after the tokenizer's
(data, model, fine-tuning, export), so none of them depends on how tokenizers are trained.

    load_tokenizer(path) -> TokenizerInfo                # any HF tokenizer dir (tokenizer.json or vocab.txt)

    TokenizerInfo fields: path, tokenizer (tokenizers.Tokenizer, with its post-processor),
    kind ("wordpiece" | "bpe" | "unigram"), vocab_size (len incl. special tokens),
    pad_id, unk_id, cls_id, sep_id, mask_id (for roberta: cls = <s>, sep = </s>),
    special_ids (frozenset of all special-token ids).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from bertcli.config.families import FAMILIES
from bertcli.core.errors import UserError

ROLES = ("pad", "unk", "cls", "sep", "mask")
# token per role, in vocabulary order (the order is the id): each family's set (FamilySpec.special_tokens)
SPECIAL_TOKENS = {name: dict(spec.special_tokens) for name, spec in FAMILIES.items()}
# CJK ideographs: the ranges of BERT's tokenization._is_chinese_char, which the BERT normalizer
# splits into single characters (also the data stage's test for Chinese text).
CJK_RANGES = ("\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f"
              "\U0002b820-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f")
CJK_CHAR = re.compile(f"[{CJK_RANGES}]")


@dataclass
class TokenizerInfo:
    path: Path
    tokenizer: Tokenizer
    kind: str
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    special_ids: frozenset
    tokens: dict = field(default_factory=dict)  # role -> token string, e.g. {"cls": "[CLS]", ...}


_FALLBACK = {"pad": ("[PAD]", "<pad>"), "unk": ("[UNK]", "<unk>"), "cls": ("[CLS]", "<s>"),
             "sep": ("[SEP]", "</s>"), "mask": ("[MASK]", "<mask>")}
_KINDS = {"WordPiece": "wordpiece", "BPE": "bpe", "Unigram": "unigram"}
LOADABLE = ("tokenizer.json", "vocab.txt")   # what load_tokenizer reads (vocab.txt: WordPiece only)


def load_tokenizer(path) -> TokenizerInfo:
    """Load any Hugging Face tokenizer directory: tokenizer.json (bertcli's, or one written by
    transformers for bert/roberta/albert), or an older BERT directory with only vocab.txt;
    special tokens are looked up by name, never assumed."""
    path = Path(path)
    config: dict = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (path / name).is_file():
            try:
                more = json.loads((path / name).read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise UserError(f"{name} is not valid JSON: {e}", where=str(path / name))
            if not isinstance(more, dict):
                raise UserError(f"{name} does not hold a JSON object", where=str(path / name))
            config.update(more)
    file = path / LOADABLE[0]
    if file.is_file():
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as e:  # tokenizers raises a bare Exception for a malformed file
            raise UserError(f"tokenizer.json cannot be read: {e}", where=str(file))
    elif (path / LOADABLE[1]).is_file():  # older BERT checkpoints: the WordPiece vocabulary only
        from tokenizers.implementations import BertWordPieceTokenizer

        tok = BertWordPieceTokenizer(str(path / "vocab.txt"), lowercase=bool(config.get("do_lower_case", True)))._tokenizer
    else:
        raise UserError(f"{path} has no tokenizer (tokenizer.json, or vocab.txt for WordPiece)", where=str(path),
                        fix="point at a directory written by `bertcli tokenize` or by transformers' "
                            "save_pretrained (a fast tokenizer)")
    tok.no_truncation()
    tok.no_padding()
    kind = _KINDS.get(type(tok.model).__name__)
    if kind is None:
        raise UserError("the tokenizer is neither a WordPiece, a BPE nor a Unigram model", where=str(path))
    tokens: dict[str, str] = {}
    ids: dict[str, int] = {}
    for role in ROLES:
        names = [_token_name(config.get(f"{role}_token"))]
        if role in ("cls", "sep"):
            names.append(_token_name(config.get("bos_token" if role == "cls" else "eos_token")))
        names += _FALLBACK[role]
        found = next(((n, i) for n in names if n and (i := tok.token_to_id(n)) is not None), None)
        if found is None:
            raise UserError(f"the tokenizer has no {role} token (looked for {', '.join(n for n in names if n)})",
                            where=str(path), fix=f"set {role}_token in tokenizer_config.json")
        tokens[role], ids[role] = found
    special = {i for i, a in tok.get_added_tokens_decoder().items() if a.special} | set(ids.values())
    return TokenizerInfo(path=path, tokenizer=tok, kind=kind, vocab_size=tok.get_vocab_size(with_added_tokens=True),
                         pad_id=ids["pad"], unk_id=ids["unk"], cls_id=ids["cls"], sep_id=ids["sep"],
                         mask_id=ids["mask"], special_ids=frozenset(special), tokens=tokens)


def _token_name(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def check_tokenizer(tok, c, where: str) -> None:
    """The tokenizer's ids must mean what the model was trained with: ids inside the embedding,
    the model's padding id (RoBERTa's positions count from it), and the family's special tokens
    (a tokenizer whose [CLS]/[MASK] are another family's set is another model's)."""
    problems = []
    if tok.vocab_size > c.vocab_size:
        problems.append(f"the tokenizer has {tok.vocab_size:,} tokens, the model {c.vocab_size:,} embeddings")
    if tok.pad_id != c.pad_token_id:
        problems.append(f"the tokenizer's padding id is {tok.pad_id}, config.json's pad_token_id {c.pad_token_id}")
    own = dict(c.spec.special_tokens)
    roles = ("cls", "sep", "mask")
    got = {r: tok.tokens.get(r) for r in roles}
    if own and any(got[r] != own[r] for r in roles):
        for family, spec in FAMILIES.items():
            theirs = spec.special_tokens
            if all(got[r] == theirs[r] for r in roles) and any(theirs[r] != own[r] for r in roles):
                problems.append(f"its special tokens {' '.join(got[r] for r in roles)} are {family}'s; a {c.family} "
                                f"model uses {' '.join(own[r] for r in roles)}")
                break
    if problems:
        raise UserError("the tokenizer does not belong to this model: " + "; ".join(problems), where=where,
                        fix="put the tokenizer the model was trained with next to its weights (a bertcli checkpoint "
                            "holds its run's tokenizer files)")
