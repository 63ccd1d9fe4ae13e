"""`bertcli fill-mask`: the top-k fillers of each mask token, for a quick look at a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertcli.config.checkpoint import read_config, rtd_generator, weight_files
from bertcli.config.families import FAMILIES, MASK_SPELLINGS
from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.model.finite import require_finite_outputs
from bertcli.tokenization.load import load_tokenizer


def fill_mask(checkpoint: str | Path, text: str, top_k: int = 5) -> list[dict[str, Any]]:
    """For each mask in `text` (in order): its token index and the top-k candidates, each with
    token, id, probability and the text with that filler in place of the mask."""
    directory = Path(checkpoint)
    generator = rtd_generator(directory)
    if generator is not None:            # an RTD checkpoint: the discriminator has no MLM head, its generator has
        console.log(f"an RTD checkpoint: the fillers are its generator's ({generator})")
        directory = generator
    # Checks that need no torch first, so mistakes are reported at once.
    read_config(directory)
    weight_files(directory)
    info = load_tokenizer(directory)
    tok, mask, mask_id = info.tokenizer, info.tokens["mask"], info.mask_id
    if mask not in text:
        other = next((m for m in MASK_SPELLINGS if m in text), None)
        if other is None:
            raise UserError(f"no mask token in the text: write {mask} where a word is missing",
                            fix=f"e.g. bertcli fill-mask -c {directory} \"the {mask} sat on the mat\"")
        text = text.replace(other, mask)
    import torch

    from bertcli.model.checkpoint import load_checkpoint

    model, report = load_checkpoint(directory)
    if model.config.spec.names.mlm_bias in report.fresh:
        raise UserError(f"{directory} has no masked-LM head (a classifier or encoder-only checkpoint)",
                        fix="use a pretraining checkpoint (" + ", ".join(
                            s.architectures["pretraining"] for s in FAMILIES.values()) + ")")
    enc = tok.encode(text)
    ids = torch.tensor([enc.ids])
    limit = model.config.max_position_embeddings - model.config.position_offset
    if ids.shape[1] > limit:
        raise UserError(f"the text is {ids.shape[1]} tokens long; this model reads at most {limit}",
                        fix="shorten the text around the mask")
    positions = (ids[0] == mask_id).nonzero().squeeze(1)
    if len(positions) == 0:
        raise UserError(f"the tokenizer split {mask} into pieces: no mask token reached the model",
                        fix=f"put spaces around {mask}")
    with torch.no_grad():
        out = model(ids, torch.ones_like(ids), torch.tensor([enc.type_ids]), mlm_positions=positions)
    require_finite_outputs(out.mlm_logits, directory, "MLM logits")
    probs = out.mlm_logits.float().softmax(-1)                      # [masks, V]
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    results = []
    for m, pos in enumerate(positions.tolist()):
        candidates = []
        for p, i in zip(top.values[m].tolist(), top.indices[m].tolist()):
            # `word` is the piece as the text shows it (`Ġthe` / `▁the` decode to `the`); the raw
            # vocabulary piece stays in `token` for --json.
            word = tok.decode([i], skip_special_tokens=False).strip() or tok.id_to_token(i)
            candidates.append({"token": tok.id_to_token(i), "word": word, "id": i, "probability": p,
                               "text": filled_text(tok, enc.ids, pos, i)})
        results.append({"position": pos, "candidates": candidates})
    return results


def filled_text(tok, ids: list[int], pos: int, filler: int) -> str:
    """The text with `filler` in place of the mask at `pos` (other special tokens left out).
    Byte-level BPE encodes the space before a mask as a piece of its own (`Ġthe`, `Ġ`,
    `<mask>`): a filler that carries its own space (`Ġupon`) replaces that piece too, or the
    text would read `the  upon`."""
    filled = list(ids)
    filled[pos] = filler
    if pos > 0 and tok.decode([filled[pos - 1]]).isspace() and tok.decode([filler]).startswith(" "):
        del filled[pos - 1]
    return tok.decode(filled, skip_special_tokens=True)


def render_fills(results: list[dict[str, Any]], as_json: bool = False) -> None:
    """Print the results: one table per mask, or JSON (stdout)."""
    if as_json:
        console.out.print(jsonout.dumps(results, ensure_ascii=False), markup=False, highlight=False)
        return
    for n, r in enumerate(results, 1):
        rows = [(c["word"], f"{c['probability']:.4f}", c["text"]) for c in r["candidates"]]
        title = f"mask {n} of {len(results)} (token {r['position']} of the encoded input, [CLS]/<s> = 0)"
        console.table([("filler", "bold"), ("probability", ""), ("text with the filler", "")], rows, title=title)
