"""GradCache (Gao, Zhang, Han, Callan 2021, "Scaling Deep Contrastive Learning Batch Size under
Memory Limited Setup"): a contrastive loss over a batch bigger than one forward pass can hold.

    1. embed every mini-batch WITHOUT a graph (the RNG state before each one saved): reps [N, H]
    2. the loss over all of reps, and d loss / d reps                    (small: N x H)
    3. at backward time, for each mini-batch: restore its RNG state, embed it again WITH a graph,
       and backpropagate the cached d loss / d reps slice into the parameters

Peak memory is one mini-batch's activations; the loss, and the parameters' gradients, equal
those of one pass over the whole batch: dropout draws the same masks in steps 1 and 3 because
each re-forward starts from the RNG state its first pass started from, and the in-batch
negatives are the whole batch's in step 2.

`cached_loss` returns the loss as a leaf that requires grad with a hook on it: the caller's
`loss.backward()` (or `scaler.scale(loss).backward()`, whose scale arrives as the hook's
grad_output) runs step 3, so a training loop needs no change to use it (sentence-transformers'
CachedMultipleNegativesRankingLoss works the same way).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor


class RngState:
    """The CPU RNG and, on CUDA, the device's RNG: what dropout draws from."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        """Run the body from this state; afterwards the RNGs continue from where the body left
        them (the same place as after the first pass, so a run stays deterministic)."""
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)
        yield


def cached_loss(encode: Callable[[Any], Tensor], chunks: Sequence[Any], loss_fn: Callable[[Tensor], Tensor],
                device: torch.device, context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
                ) -> Tensor:
    """loss_fn(cat([encode(c) for c in chunks])) whose backward reaches the parameters through
    one chunk at a time. `encode(chunk)` -> [n, H] embeddings of a chunk (in train mode, dropout
    on); `context()` is entered around every forward (autocast: the re-forward runs during
    backward, outside the caller's context)."""
    states: list[RngState] = []
    parts: list[Tensor] = []
    with torch.no_grad():
        for chunk in chunks:
            states.append(RngState(device))
            with context():
                parts.append(encode(chunk))
    reps = torch.cat(parts).float().requires_grad_()                      # [N, H], a leaf
    with torch.enable_grad():
        loss = loss_fn(reps)
        (grad,) = torch.autograd.grad(loss, reps)                         # [N, H] d loss / d reps
    sizes = [len(p) for p in parts]
    del parts

    def backward(grad_output: Tensor) -> Tensor:
        start = 0
        with torch.enable_grad():
            for chunk, state, n in zip(chunks, states, sizes):
                with state.restored(), context():
                    part = encode(chunk)                                  # [n, H] with a graph
                # d (grad_output * loss) / d params through this chunk: <part, cached slice>
                part.float().backward(grad[start:start + n] * grad_output)
                start += n
        return grad_output

    out = loss.detach().requires_grad_()
    out.register_hook(backward)
    return out


def uncached_loss(encode: Callable[[Any], Tensor], chunks: Sequence[Any], loss_fn: Callable[[Tensor], Tensor]) -> Tensor:
    """The same loss with every chunk's graph kept (the reference GradCache must equal)."""
    return loss_fn(torch.cat([encode(c) for c in chunks]).float())
