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
        state.json             step, consumed samples, tokens, scheduler, scaler, metric sums,
                               file sizes (checked on load); written last
"""

from __future__ import annotations

import base64
import json
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model

from bertcli.errors import UserError

FORMAT = "bertcli-trainer-state"
VERSION = 1
STEP_DIR = re.compile(r"^step-(\d{7,})$")
STATE_FILES = ("model.safetensors", "optimizer.safetensors", "optimizer.json", "rng.safetensors", "rng.json")


def step_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:07d}"


# ------------------------------------------------------------------------------------ RNG
def capture_rng() -> dict:
    """This process's RNG states as JSON-able data (base64 for the byte states)."""
    b64 = lambda t: base64.b64encode(t.numpy().tobytes()).decode()  # noqa: E731
    kind, keys, pos, has_gauss, cached = np.random.get_state()
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
    (directory / "rng.json").write_text(json.dumps(meta))


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
    (directory / "optimizer.json").write_text(json.dumps({"param_groups": sd["param_groups"], "scalars": scalars}))


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
def save(path: Path, *, model: torch.nn.Module, hf_save, recipe, optimizer: torch.optim.Optimizer,
         state: dict, rng: list[dict]) -> Path:
    """Write a complete checkpoint at `path` (replacing one that is there). `hf_save(model, dir)`
    writes the Hugging Face part; `state` is the JSON trainer state; `rng` one entry per process."""
    from bertcli.stages import building  # temporary name, recipe.yaml, rename when complete

    path = Path(path)
    with building(path, recipe) as tmp:
        hf_save(model, tmp)
        ts = tmp / "trainer_state"
        ts.mkdir()
        save_model(model, str(ts / "model.safetensors"))  # handles tied / shared weights
        _write_optimizer(ts, optimizer)
        _write_rng(ts, rng)
        files = {name: (ts / name).stat().st_size for name in STATE_FILES}
        (ts / "state.json").write_text(json.dumps({"format": FORMAT, "version": VERSION, **state, "files": files},
                                                  indent=1))
    return path


# ----------------------------------------------------------------------------------- load
@dataclass
class Checkpoint:
    path: Path
    state: dict
    recipe_yaml: Path

    @property
    def step(self) -> int:
        return int(self.state["step"])


def _damaged(path: Path, what: str) -> UserError:
    return UserError(f"checkpoint is damaged or not a bertcli training checkpoint: {what}", where=str(path),
                     fix="resume from another checkpoint (--resume checkpoints/step-N) or start over with --force")


def read(path: Path, require: Sequence[str] = ("step",)) -> Checkpoint:
    """Open a checkpoint directory and check that it is complete and that its state holds the
    keys `require` (what the caller will read); UserError otherwise."""
    path = Path(path)
    if not path.is_dir():
        raise UserError("no such checkpoint directory", where=str(path),
                        fix="give a checkpoint directory (run/checkpoints/step-N or run/final) or --resume auto")
    ts = path / "trainer_state"
    if not (ts / "state.json").is_file():
        raise _damaged(path, "trainer_state/state.json is missing (a Hugging Face model without trainer state "
                             "can be fine-tuned, not resumed)")
    try:
        state = json.loads((ts / "state.json").read_text())
    except (OSError, ValueError) as e:
        raise _damaged(path, f"trainer_state/state.json is unreadable ({e})")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise _damaged(path, "trainer_state/state.json is not a bertcli trainer state")
    if state.get("version", 0) > VERSION:
        raise UserError(f"checkpoint written by a newer bertcli (trainer state v{state['version']})", where=str(path),
                        fix="upgrade bertcli")
    missing = [k for k in require if k not in state]
    if missing:
        raise _damaged(path, f"trainer_state/state.json lacks {', '.join(missing)}")
    for name, size in state.get("files", {}).items():
        f = ts / name
        if not f.is_file() or f.stat().st_size != size:
            raise _damaged(path, f"trainer_state/{name} is missing or truncated")
    if not (path / "recipe.yaml").is_file():
        raise _damaged(path, "recipe.yaml is missing")
    return Checkpoint(path, state, path / "recipe.yaml")


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
    except (SafetensorError, OSError, ValueError, KeyError, RuntimeError) as e:
        raise _damaged(ckpt.path, str(e).splitlines()[0][:300])
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


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint (final/ wins a tie with the step checkpoint of its step)."""
    best: tuple[int, int, Path] | None = None
    for p in list_checkpoints(run_dir) + [Path(run_dir) / "final"]:
        f = p / "trainer_state" / "state.json"
        if not f.is_file():
            continue
        try:
            step = int(json.loads(f.read_text())["step"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged one is skipped by auto; an explicit PATH reports it
        key = (step, p.name == "final", p)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None


def prune(run_dir: Path, keep_last: int) -> None:
    """Remove all but the newest `keep_last` step checkpoints, and temporaries of killed saves."""
    for p in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(p, ignore_errors=True)
    for root in (Path(run_dir) / "checkpoints", Path(run_dir)):
        if root.is_dir():
            for p in root.iterdir():
                if p.name.startswith((".step-", ".final.")) and (".tmp-" in p.name or ".old-" in p.name):
                    shutil.rmtree(p, ignore_errors=True)
