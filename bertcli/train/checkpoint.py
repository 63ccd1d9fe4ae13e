"""Checkpoints: a Hugging Face directory plus `recipe.yaml` and `trainer_state/`, written under
a temporary name and renamed when complete. No pickle anywhere:

    checkpoints/step-0000500/
      config.json, model.safetensors, tokenizer files     (bertcli.model.save_checkpoint)
      recipe.yaml                                          the resolved recipe of the run
      trainer_state/
        model.safetensors      the training model's own state_dict (exact resume)
        optimizer.safetensors  optimizer state tensors, keys "state.<param index>.<name>"
        optimizer.json         param_groups (hyperparameters, param indices) + non-tensor state
        rng.safetensors        per process: torch CPU / CUDA generator states (uint8), numpy keys
        rng.json               per process: numpy position/gauss, python `random` state
        state.json             TrainState (step, consumed samples, tokens, scheduler, scaler,
                               metric sums, sha256 of the tokenizer and data trained on) and the
                               file sizes (checked on load); written last

    final/                     the finished run's model: config.json, model.safetensors,
                               tokenizer files, recipe.yaml; no trainer state (the last step's
                               checkpoint holds it)

A checkpoint whose weights are not finite is never written (`final/` least of all): the run
stops with a message and the previous complete checkpoint stays. A full disk during a save is
one message naming the path and the space needed; the temporary directory is removed and the
previous checkpoint is untouched. `resumable` picks the newest checkpoint that reads back
complete, setting damaged newer ones aside (renamed, never deleted) with the reason.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import random
import shutil
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_file, save_model

from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.core.fs import building
from bertcli.core.paths import STEP_DIR, check_space, saving
from bertcli.model.card import CARD, card_wanted
from bertcli.model.manifest import verify_checkpoint, write_manifest

if TYPE_CHECKING:
    from bertcli.config.recipe import Recipe

FORMAT = "bertcli-trainer-state"
VERSION = 1
STATE_FILES = ("model.safetensors", "optimizer.safetensors", "optimizer.json", "rng.safetensors", "rng.json")


def step_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:07d}"


def _required(default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING) -> Any:   # as dataclasses.field's
    """A state key a resume cannot do without: a state.json lacking it is damaged."""
    return field(default=default, default_factory=factory, metadata={"required": True})


@dataclass
class TrainState:
    """The trainer's JSON state: the one schema that saving writes and resuming reads
    (torchtitan-style `state_dict` / `load_state_dict`). Keys an older checkpoint lacks take
    the defaults; keys this version does not know are kept in `extra` and written back."""

    step: int = _required(0)
    consumed_samples: int = _required(0)        # data cursor: samples of the global stream read
    tokens: int = _required(0)
    scheduler: dict = _required(factory=dict)   # LambdaLR.state_dict() without its functions
    interval_sums: dict = _required(factory=dict)  # metric sums since the last logged step
    world_size: int = 1
    batch_size: int = 0
    train_rows: int | None = None
    bad_steps: int = 0
    overflows: int = 0
    scaler: dict = field(default_factory=dict)  # GradScaler.state_dict() (fp16), else empty
    majority_acc: float | None = None
    tokenizer_sha256: str | None = None      # tokenizer.json the run was trained with
    data_sha256: str | None = None           # the built data's arrow files
    # multi-phase runs and time budgets (bertcli.train.phases): the phase of the last update, the
    # cursor into that phase's data, and the training seconds of every run of this training
    phase: int = 0
    phase_name: str | None = None
    phase_start: int = 0
    phase_samples: int = 0
    elapsed_s: float = 0.0
    # intra-op CPU threads the run trained at (bertcli.core.machine): a resume uses the same count,
    # since the count sets the order of float reductions; None in checkpoints from before it was kept
    threads: int | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def required_keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("required"))

    def state_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**self.extra, **d}

    def load_state_dict(self, d: dict) -> TrainState:
        names = {f.name for f in dataclasses.fields(self)} - {"extra"}
        for k, v in d.items():
            if k in names:
                setattr(self, k, v)
            elif k not in ("format", "version", "files"):
                self.extra[k] = v
        return self

    @classmethod
    def from_state_dict(cls, d: dict) -> TrainState:
        return cls().load_state_dict(d)

    def problems(self, step_of_dir: int | None = None) -> list[str]:
        """What is wrong with the fields, by type and range (empty: a state a resume can use).
        `step_of_dir` is the N of a step-N directory, which the state's step must equal: a
        step of 10**15 in step-0000010 would make the run look finished, -7 would rewind it."""
        return [f"{name} {why}" for name, why in _field_problems(self, step_of_dir)]


_BIG = 1 << 62   # no counter of a real run comes near this; larger is damage, not progress


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _field_problems(s: TrainState, step_of_dir: int | None):
    def count(name: str, low: int = 0) -> Iterator[tuple[str, str]]:
        v = getattr(s, name)
        if not _is_int(v):
            yield name, f"is {v!r}, not an integer"
        elif not low <= v < _BIG:
            yield name, f"is {v:,}, outside [{low}, 2^62)"

    for name in ("step", "consumed_samples", "tokens", "batch_size", "bad_steps", "overflows", "phase",
                 "phase_start", "phase_samples"):
        yield from count(name)
    yield from count("world_size", low=1)
    if s.train_rows is not None:
        yield from count("train_rows")
    if s.threads is not None:
        yield from count("threads", low=1)
    if _is_int(s.step) and step_of_dir is not None and s.step != step_of_dir:
        yield "step", f"is {s.step:,} in the directory of step {step_of_dir:,}"
    if _is_int(s.step) and _is_int(s.phase_start) and s.phase_start > s.step:
        yield "phase_start", f"{s.phase_start:,} is after step {s.step:,}"
    if not _is_num(s.elapsed_s) or s.elapsed_s < 0:
        yield "elapsed_s", f"is {s.elapsed_s!r}, not a finite number of seconds >= 0"
    if s.majority_acc is not None and not (_is_num(s.majority_acc) and 0 <= s.majority_acc <= 1):
        yield "majority_acc", f"is {s.majority_acc!r}, not null or a fraction in [0, 1]"
    for name in ("tokenizer_sha256", "data_sha256"):
        v = getattr(s, name)
        if v is not None and not isinstance(v, str):  # compared with the inputs' hashes on resume
            yield name, f"is {v!r}, not null or a sha256 hex digest"
    if s.phase_name is not None and not isinstance(s.phase_name, str):
        yield "phase_name", f"is {s.phase_name!r}, not null or a string"
    for name in ("scheduler", "interval_sums", "scaler"):
        v = getattr(s, name)
        if not isinstance(v, dict):
            yield name, f"is {v!r}, not an object"
    if isinstance(s.interval_sums, dict):
        bad = [k for k, v in s.interval_sums.items() if not _is_num(v)]
        if bad:
            yield "interval_sums", f"holds {bad[0]}: {s.interval_sums[bad[0]]!r}, not a finite number"
    if isinstance(s.scheduler, dict):
        last = s.scheduler.get("last_epoch", 0)
        if not _is_int(last) or not 0 <= last < _BIG:
            yield "scheduler", f"last_epoch is {last!r}, not a step count"
        for key in ("base_lrs", "_last_lr"):
            v = s.scheduler.get(key, [])
            if not isinstance(v, list) or not all(_is_num(x) for x in v):
                yield "scheduler", f"{key} is {v!r}, not a list of finite numbers"
    if isinstance(s.scaler, dict):
        bad = [k for k, v in s.scaler.items() if not _is_num(v)]
        if bad:
            yield "scaler", f"holds {bad[0]}: {s.scaler[bad[0]]!r}, not a finite number"


# ------------------------------------------------------------------------------------ RNG
def capture_rng() -> dict:
    """This process's RNG states as JSON-able data (base64 for the byte states)."""
    b64 = lambda t: base64.b64encode(t.numpy().tobytes()).decode()  # noqa: E731
    # the global RandomState is MT19937, whose legacy state is this tuple (the stubs also allow a dict)
    kind, keys, pos, has_gauss, cached = typing.cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())
    version, internal, gauss_next = random.getstate()
    return {
        "torch": b64(torch.get_rng_state()),
        "cuda": [b64(s) for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
        "numpy": {"kind": kind, "keys": base64.b64encode(keys.astype("<u4").tobytes()).decode(),
                  "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": version, "state": list(internal), "gauss_next": gauss_next},
    }


def restore_rng(s: dict) -> None:
    """Inverse of capture_rng."""
    raw = lambda text: torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()  # noqa: E731
    torch.set_rng_state(raw(s["torch"]))
    if s["cuda"] and torch.cuda.is_available():
        for i, state in enumerate(s["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(raw(state), i)
    n = s["numpy"]
    keys = np.frombuffer(base64.b64decode(n["keys"]), dtype="<u4").astype(np.uint32)
    np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    p = s["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss_next"]))


def _write_rng(directory: Path, per_rank: list[dict]) -> None:
    tensors, meta = {}, []
    for r, s in enumerate(per_rank):
        raw = lambda text: torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()  # noqa: E731
        tensors[f"rank{r}.torch"] = raw(s["torch"])
        for i, c in enumerate(s["cuda"]):
            tensors[f"rank{r}.cuda{i}"] = raw(c)
        keys = np.frombuffer(base64.b64decode(s["numpy"]["keys"]), dtype="<u4").astype(np.int64)
        tensors[f"rank{r}.numpy_keys"] = torch.from_numpy(keys)
        meta.append({"cuda_devices": len(s["cuda"]), "numpy": {k: v for k, v in s["numpy"].items() if k != "keys"},
                     "python": s["python"]})
    save_file(tensors, str(directory / "rng.safetensors"))
    (directory / "rng.json").write_text(jsonout.dumps(meta))


def _read_rng(directory: Path) -> list[dict]:
    tensors = load_file(str(directory / "rng.safetensors"))
    b64 = lambda t: base64.b64encode(t.numpy().tobytes()).decode()  # noqa: E731
    out = []
    for r, m in enumerate(json.loads((directory / "rng.json").read_text())):
        keys = tensors[f"rank{r}.numpy_keys"].numpy().astype("<u4")
        out.append({"torch": b64(tensors[f"rank{r}.torch"]),
                    "cuda": [b64(tensors[f"rank{r}.cuda{i}"]) for i in range(m["cuda_devices"])],
                    "numpy": {**m["numpy"], "keys": base64.b64encode(keys.tobytes()).decode()},
                    "python": m["python"]})
    return out


# ------------------------------------------------------------------------------ optimizer
def _write_optimizer(directory: Path, optimizer: torch.optim.Optimizer) -> None:
    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"state.{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{k}"] = v
    save_file(tensors, str(directory / "optimizer.safetensors"))
    (directory / "optimizer.json").write_text(jsonout.dumps({"param_groups": sd["param_groups"], "scalars": scalars}))


def _read_optimizer(directory: Path) -> dict:
    tensors = load_file(str(directory / "optimizer.safetensors"))
    meta = json.loads((directory / "optimizer.json").read_text())
    state: dict[int, dict[str, Any]] = {}
    for key, t in tensors.items():
        _, idx, name = key.split(".", 2)
        state.setdefault(int(idx), {})[name] = t
    for key, v in meta["scalars"].items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = v
    for group in meta["param_groups"]:  # JSON turned the betas tuple into a list
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
    return {"state": state, "param_groups": meta["param_groups"]}


# ----------------------------------------------------------------------------------- save
def _run_dir_of(path: Path) -> Path:
    return path.parent if path.name == "final" else path.parent.parent


def nonfinite_tensors(model: torch.nn.Module) -> list[str]:
    """Names of the parameters and buffers holding nan or inf (empty: all finite)."""
    named = list(model.named_parameters()) + list(model.named_buffers())
    return [n for n, t in named if t.is_floating_point() and not bool(torch.isfinite(t).all())]


def _refuse_nonfinite(path: Path, model: torch.nn.Module, step: int) -> None:
    bad = nonfinite_tensors(model)
    if not bad:
        return
    last = latest(_run_dir_of(path))
    kept = f"the last complete checkpoint, {last}, is kept" if last else "no earlier checkpoint exists"
    raise UserError(f"the weights are not finite after step {step:,} ({len(bad)} tensors hold nan or inf, "
                    f"first: {bad[0]}): the run failed, and {path.name}/ was not written", where=str(path),
                    fix=f"{kept}; lower train.learning_rate, raise train.warmup_steps or set train.grad_clip, then "
                        "--resume auto (from that checkpoint) or --force (from scratch)")


def _bytes_of(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))


def estimated_size(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes a checkpoint takes at least: the weights twice (HF copy + trainer copy) and the
    optimizer state (tokenizer files and JSON come on top). A lower bound, so that the check
    before the save never refuses one that would fit; a write that runs out anyway says so too."""
    weights = _bytes_of(model.state_dict().values())
    opt = sum(_bytes_of(st.values()) for st in optimizer.state_dict()["state"].values())
    return 2 * weights + opt


def save(path: Path, *, model: torch.nn.Module, hf_save, recipe: Recipe, optimizer: torch.optim.Optimizer,
         state: TrainState | dict, rng: list[dict]) -> Path:
    """Write a complete checkpoint at `path` (replacing one that is there). `hf_save(model, dir)`
    writes the Hugging Face part; `state` is the trainer state; `rng` one entry per process.
    Refuses non-finite weights, and a disk without room for it, before writing anything."""
    path = Path(path)
    state = state if isinstance(state, TrainState) else TrainState.from_state_dict(state)
    _refuse_nonfinite(path, model, state.step)
    needed = estimated_size(model, optimizer)
    what = f"checkpoint {path.name}/"
    check_space(path.parent, needed, what)
    with saving(path, what, needed), building(path, recipe) as tmp:
        hf_save(model, tmp)
        ts = tmp / "trainer_state"
        ts.mkdir()
        save_model(model, str(ts / "model.safetensors"))  # handles tied / shared weights
        _write_optimizer(ts, optimizer)
        _write_rng(ts, rng)
        files = {name: (ts / name).stat().st_size for name in STATE_FILES}
        (ts / "state.json").write_text(jsonout.dumps({"format": FORMAT, "version": VERSION, **state.state_dict(),
                                                   "files": files}, indent=1))
        recipe.save(tmp)        # building() writes the same bytes again; the manifest covers it
        write_manifest(tmp)     # last: a checkpoint without a complete manifest is not trusted
    return path


def save_model_only(path: Path, *, model: torch.nn.Module, hf_save, recipe: Recipe, step: int,
                    card: str | None = None) -> Path:
    """Write `final/`: the Hugging Face directory and recipe.yaml, the thing to load and share,
    without the optimizer and trainer state (those stay in checkpoints/step-N, which resume and
    extending a finished run read), and its model card (README.md) unless the user's is there.
    The same refusals as `save`."""
    path = Path(path)
    _refuse_nonfinite(path, model, step)
    needed = sum(t.numel() * t.element_size() for t in model.state_dict().values()) + (1 << 20)
    what = f"model directory {path.name}/"
    check_space(path.parent, needed, what)
    with saving(path, what, needed), building(path, recipe) as tmp:
        hf_save(model, tmp)
        recipe.save(tmp)
        if card is not None and card_wanted(path):
            (tmp / CARD).write_text(card, encoding="utf-8")
        write_manifest(tmp)
    return path


# ----------------------------------------------------------------------------------- load
@dataclass
class Checkpoint:
    path: Path
    state: TrainState
    recipe_yaml: Path
    set_aside: list = field(default_factory=list)   # (path, reason) of damaged newer checkpoints

    @property
    def step(self) -> int:
        return int(self.state.step)


def _damaged(path: Path, what: str) -> UserError:
    return UserError(f"checkpoint is damaged or not a bertcli training checkpoint: {what}", where=str(path),
                     fix="resume from another checkpoint (--resume checkpoints/step-N) or start over with --force")


def read(path: Path, require: Sequence[str] = ("step",)) -> Checkpoint:
    """Open a checkpoint directory and check that it is complete (every file of its size, every
    safetensors header readable) and that its state holds the keys `require` (what the caller
    will read; TrainState.required_keys() for a resume); UserError otherwise."""
    path = Path(path)
    if not path.is_dir():
        raise UserError("no such checkpoint directory", where=str(path),
                        fix="give a checkpoint directory (run/checkpoints/step-N or run/final) or --resume auto")
    ts = path / "trainer_state"
    if not (ts / "state.json").is_file() and path.name == "final" and (path / "config.json").is_file():
        raise UserError("final/ holds the model and tokenizer only; the training state of a run is in its "
                        "checkpoints/ directory", where=str(path),
                        fix=f"--resume auto (the newest of {path.parent / 'checkpoints'}), or --resume with one "
                            "checkpoints/step-N directory")
    if not (ts / "state.json").is_file():
        raise _damaged(path, "trainer_state/state.json is missing (a Hugging Face model without trainer state "
                             "can be fine-tuned, not resumed)")
    try:
        state = json.loads((ts / "state.json").read_text())
    except (OSError, ValueError) as e:
        raise _damaged(path, f"trainer_state/state.json is unreadable ({e})")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise _damaged(path, "trainer_state/state.json is not a bertcli trainer state")
    version = state.get("version", 0)
    if not _is_int(version) or version < 0:
        raise _damaged(path, f"trainer_state/state.json has version {version!r}, not a version number")
    if version > VERSION:
        raise UserError(f"checkpoint written by a newer bertcli (trainer state v{state['version']})", where=str(path),
                        fix="upgrade bertcli")
    missing = [k for k in require if k not in state]
    if missing:
        raise _damaged(path, f"trainer_state/state.json lacks {', '.join(missing)}")
    files = state.get("files", {})
    if not isinstance(files, dict) or not all(n in STATE_FILES and _is_int(v) and v >= 0 for n, v in files.items()):
        raise _damaged(path, f"trainer_state/state.json has files {str(files)[:200]}, not sizes of "
                             f"{', '.join(STATE_FILES)}")
    m = STEP_DIR.match(path.name)
    bad = TrainState.from_state_dict(state).problems(int(m.group(1)) if m else None)
    if bad:
        raise _damaged(path, "trainer_state/state.json: " + "; ".join(bad[:3]))
    for name, size in files.items():
        f = ts / name
        if not f.is_file() or f.stat().st_size != size:
            raise _damaged(path, f"trainer_state/{name} is missing or truncated")
        if name.endswith(".safetensors"):
            try:
                with safe_open(str(f), framework="pt") as h:  # the header only, no tensor read
                    h.keys()
            except Exception as e:  # SafetensorError and friends: any unreadable header
                raise _damaged(path, f"trainer_state/{name} has an unreadable header ({str(e)[:200]})")
    if not (path / "recipe.yaml").is_file():
        raise _damaged(path, "recipe.yaml is missing")
    try:  # every file against the manifest (or, without one, every safetensors file by its header)
        verify_checkpoint(path)
    except UserError as e:
        raise _damaged(path, f"{e.what}") from None
    return Checkpoint(path, TrainState.from_state_dict(state), path / "recipe.yaml")


def restore(ckpt: Checkpoint, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[dict]:
    """Load model and optimizer state in place; returns the per-process RNG states."""
    ts = ckpt.path / "trainer_state"
    try:
        missing, unexpected = load_model(model, str(ts / "model.safetensors"), strict=False)
        if missing or unexpected:
            raise _damaged(ckpt.path, f"model weights do not fit this model (missing {sorted(missing)[:3]}, "
                                      f"unexpected {sorted(unexpected)[:3]})")
        opt_sd = _read_optimizer(ts)
        rng = _read_rng(ts)
    except (SafetensorError, OSError, ValueError, KeyError, RuntimeError, TypeError, AttributeError, IndexError) as e:
        raise _damaged(ckpt.path, (str(e).splitlines() or [type(e).__name__])[0][:300])
    try:
        optimizer.load_state_dict(opt_sd)
    except (ValueError, KeyError, RuntimeError) as e:
        raise _damaged(ckpt.path, f"optimizer state does not fit this model ({str(e).splitlines()[0][:200]})")
    return rng


# ---------------------------------------------------------------------------- discovery
def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete step checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name))
             and (p / "trainer_state" / "state.json").is_file()]
    return [p for _, p in sorted(found)]


def candidates(run_dir: Path) -> list[Path]:
    """Every checkpoint of a run with a state.json, newest first (final/ before the step
    checkpoint of its step; one whose state.json does not parse sorts by its directory name)."""
    found = []
    for p in list_checkpoints(run_dir) + [Path(run_dir) / "final"]:
        f = p / "trainer_state" / "state.json"
        if not f.is_file():
            continue
        # a step-N directory sorts by its name (a damaged state.json's step must not reorder the
        # run, e.g. -7 hiding the newest behind older ones); final/ by its state's step
        m = STEP_DIR.match(p.name)
        try:
            step = int(m.group(1)) if m else json.loads(f.read_text())["step"]
            if not _is_int(step) or not 0 <= step < _BIG:
                raise ValueError(step)
        except (OSError, ValueError, KeyError, TypeError):
            step = _BIG  # an unreadable final/ is the run's newest
        found.append((step, p.name == "final", p))
    return [p for *_, p in sorted(found, key=lambda t: t[:2], reverse=True)]


def latest(run_dir: Path) -> Path | None:
    """The newest checkpoint (final/ wins a tie with the step checkpoint of its step); whether
    it is complete is for `read` / `resumable` to tell."""
    found = candidates(run_dir)
    return found[0] if found else None


def resumable(run_dir: Path, require: Sequence[str] = TrainState.required_keys()) -> Checkpoint | None:
    """The newest checkpoint that reads back complete (None: the run has none). Damaged newer
    ones are listed in `set_aside` with the reason; `set_aside_damaged` then renames them."""
    skipped: list[tuple[Path, str]] = []
    for p in candidates(run_dir):
        try:
            ck = read(p, require=require)
        except UserError as e:
            skipped.append((p, e.what))
            continue
        ck.set_aside = skipped
        return ck
    if skipped:
        p, why = skipped[0]
        raise UserError(f"every checkpoint of the run is damaged; the newest: {why}", where=str(p),
                        fix="start over with --force (the damaged checkpoints are left as they are)")
    return None


def set_aside_damaged(ck: Checkpoint) -> None:
    """Rename the damaged checkpoints newer than `ck` to damaged-<name>[-N] (kept for a look,
    out of the way of pruning and of the step counter's new checkpoints), saying so."""
    for p, why in ck.set_aside:
        target = p.with_name(f"damaged-{p.name}")
        n = 1
        while target.exists():
            n += 1
            target = p.with_name(f"damaged-{p.name}-{n}")
        try:
            p.rename(target)
            moved = f"moved to {target}"
        except OSError as e:
            moved = f"left in place ({e.strerror})"
        console.log(f"warning: checkpoint {p} is damaged ({why}); {moved}, not deleted")
    if ck.set_aside:
        console.log(f"resuming from {ck.path}, the newest complete checkpoint")


def prune(run_dir: Path, keep_last: int) -> None:
    """Remove all but the newest `keep_last` step checkpoints, and temporaries of killed saves."""
    for p in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(p, ignore_errors=True)
    for root in (Path(run_dir) / "checkpoints", Path(run_dir)):
        if root.is_dir():
            for p in root.iterdir():
                if p.name.startswith((".step-", ".final.")) and (".tmp-" in p.name or ".old-" in p.name):
                    shutil.rmtree(p, ignore_errors=True)
