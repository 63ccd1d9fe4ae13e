"""How many sequences fit in one forward/backward: `train.micro_batch_size: auto`, and a clear
message, before training, for a size (or a model) that cannot fit.

    available_bytes(device)               free memory: CUDA's free device memory; on CPU the
                                          kernel's MemAvailable, capped by RLIMIT_AS if set
    measure(probe, sizes)                 bytes the autograd graph keeps per micro-batch size,
                                          from probe steps (saved-tensor hooks: any device)
    plan(local_batch, static, per_seq...) the largest divisor of the per-process batch that fits

The probe runs real forward passes of the model at the data's longest rows (max_seq_length) for
micro-batches of 1 and 2 sequences and counts the bytes of every tensor autograd saves for the
backward pass (activations: what grows with the micro-batch). Memory that does not grow with it
(weights, gradients, optimizer state) is counted from the parameters. A margin covers the
transient buffers (logits, attention scores being softmaxed, the allocator's slack). Accumulation
keeps the global batch, so the choice does not change the results.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

import torch

from bertcli.core.errors import UserError
from bertcli.core.paths import human_bytes

MARGIN = 1.5          # transient buffers and fragmentation on top of the saved activations
RESERVE = 256 << 20   # left to the rest of the process (data loader, Python, CUDA context)


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _address_space_left() -> int | None:
    """RLIMIT_AS minus what the process maps now (None when unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        mapped = 0
    return max(0, soft - mapped)


def available_bytes(device: torch.device) -> tuple[int, str]:
    """(bytes free for training, where the figure comes from)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), f"free memory of {device}"
    figures = [(v, what) for v, what in ((_meminfo_available(), "MemAvailable"),
                                         (_address_space_left(), "RLIMIT_AS left")) if v is not None]
    if not figures:
        return 1 << 62, "unknown (no /proc/meminfo)"
    return min(figures)


@contextlib.contextmanager
def counting_saved(exclude: Collection[int] = frozenset()) -> Iterator[list[int]]:
    """Counts the bytes of the tensors autograd saves for backward inside the block; storages
    in `exclude` (the parameters: matmuls save their weights, or views of them) are not counted."""
    total = [0]
    seen: set[int] = set(exclude)

    def pack(t: torch.Tensor):
        key = t.untyped_storage().data_ptr()
        if key not in seen:  # views of one storage count once
            seen.add(key)
            total[0] += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield total


def measure(probe: Callable[[int], None], model: torch.nn.Module, sizes: Sequence[int] = (1, 2)) -> tuple[float, float]:
    """(bytes per sequence, fixed bytes) of the activations probe(m) keeps for backward (the
    forward pass of m sequences), at two sizes. The RNG state is kept: the probe must not change
    what training draws."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        counts: list[int] = []
        for m in sizes:
            with counting_saved(params) as total:
                probe(m)
            counts.append(total[0])
    finally:
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    (a, ca), (b, cb) = zip(sizes, counts)
    per_seq = max(0.0, (cb - ca) / (b - a))
    return per_seq, max(0.0, ca - per_seq * a)


def static_bytes(model: torch.nn.Module, optimizer_slots: int = 2) -> int:
    """Weights + gradients + optimizer state (Adam/LAMB: two slots per trainable parameter)."""
    total = 0
    for p in model.parameters():
        n = p.numel() * p.element_size()
        total += n * (1 + (1 + optimizer_slots if p.requires_grad else 0))
    return total


def check_model_fits(n_params: int, device: torch.device, bytes_per_param: int = 16) -> None:
    """Before the model is built: its weights, gradients and two optimizer slots (fp32: 16
    bytes a parameter) must fit the device, or the build itself would die in the allocator."""
    available, source = available_bytes(device)
    static = n_params * bytes_per_param
    if static + RESERVE > available:
        raise UserError(
            f"the model does not fit: {n_params:,} parameters need {human_bytes(static)} for weights, gradients "
            f"and optimizer state before any activation; {human_bytes(available)} are available ({source})",
            fix="use a smaller model (model.hidden_size, model.num_hidden_layers, model.intermediate_size, "
                "tokenizer.vocab_size) or a device with more memory (train.device)")


def resident_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """What of static_bytes is allocated already (weights; gradients and optimizer state once
    they exist): the free-memory figure no longer counts it, so it must not be asked for twice."""
    tensors = [p for p in model.parameters()] + [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [t for st in optimizer.state.values() for t in st.values() if torch.is_tensor(t)]
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class Plan:
    micro: int
    needed: int            # bytes at that micro-batch
    available: int
    source: str            # where `available` comes from

    def describe(self, local: int, length: int) -> str:
        return (f"micro-batch {self.micro} of {local} at {length} tokens: about {human_bytes(self.needed)} "
                f"of {human_bytes(self.available)} ({self.source})")


def divisors_desc(n: int) -> list[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def plan(local: int, static: int, per_seq: float, fixed: float, available: int, source: str,
         requested: int | None, length: int, key: str = "train.micro_batch_size") -> Plan:
    """The micro-batch to run: `requested` when it fits, else an error; the largest divisor of
    the per-process batch `local` that fits when `requested` is None (auto)."""
    def need(m: int) -> int:
        return int(static + MARGIN * (fixed + per_seq * m)) + RESERVE

    usable = available
    if requested is not None:
        if need(requested) > usable:
            fits = next((m for m in divisors_desc(local) if need(m) <= usable), None)
            hint = f"{key}: {fits} (or auto) fits" if fits else "even 1 sequence does not fit"
            raise UserError(
                f"{key} {requested} at {length} tokens needs about {human_bytes(need(requested))}; "
                f"{human_bytes(usable)} are available ({source})",
                fix=f"{hint}; or lower data.max_seq_length, use train.precision bf16, or a smaller model "
                    "(model.hidden_size / num_hidden_layers)")
        return Plan(requested, need(requested), usable, source)
    for m in divisors_desc(local):
        if need(m) <= usable:
            return Plan(m, need(m), usable, source)
    raise UserError(
        f"the model does not fit even at one sequence per micro-batch: {human_bytes(static)} for weights, "
        f"gradients and optimizer state plus about {human_bytes(MARGIN * (fixed + per_seq))} per sequence of "
        f"{length} tokens; {human_bytes(usable)} are available ({source})",
        fix="use a smaller model (model.hidden_size, model.num_hidden_layers, model.intermediate_size, "
            "tokenizer.vocab_size), shorter rows (data.max_seq_length), train.precision bf16, or a device "
            "with more memory (train.device)")
