"""Experiment trackers (`train.report_to`): TensorBoard, Weights & Biases and MLflow, beside
`metrics.jsonl`, which stays the record.

    check_report_to(names, key)     before work: each named tracker's package is installed
    Trackers(names, run_dir, ...)   start(config) / log(record, step) / finish(), rank 0 only

Every file a tracker writes lives inside the run directory (TRACKER_FILES, which `--force`
removes and nothing else): `tensorboard/` (event files), `wandb/` (an offline run when there is
no WANDB_API_KEY or WANDB_MODE=offline: `wandb sync runs/NAME/wandb/offline-run-*` uploads it
later), `mlruns/` (MLflow's local file store, used unless MLFLOW_TRACKING_URI is set: the file
store needs no database package, which mlflow-skinny lacks; MLFLOW_ALLOW_FILE_STORE=true is set
for it, as MLflow 3 asks) and `trackers.json` (each run's id
and last logged step, so `--resume` continues the same run and does not log a step twice).

A tracker never stops training: an exception in its package (network, key, full disk) or a
start/finish that takes longer than BOUND_S gives one warning, and that tracker is dropped.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bertcli.core import console, jsonout
from bertcli.core.errors import UserError
from bertcli.core.fs import write_text_atomic
from bertcli.io.tables import parse_json

NAMES = ("tensorboard", "wandb", "mlflow")
# the module each tracker imports, and the extra that installs it (pip install 'bertcli[EXTRA]')
MODULES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
TRACKER_FILES = ("tensorboard", "wandb", "mlruns", "trackers.json")
STATE = "trackers.json"
GROUP_TAG = "bertcli.group"   # the MLflow tag of a run's group (a sweep: finetune/tracking.py)
BOUND_S = 120.0   # tracker start and finish (wandb's service, a remote MLflow server) wait at most this


def report_names(value: Sequence[str] | str) -> list[str]:
    """report_to's trackers: `none` is no tracker."""
    return [] if value == "none" else list(dict.fromkeys(value))


def check_report_to(names: Sequence[str] | str, key: str) -> None:
    """Refuse, before any work, a tracker whose package is not installed (one message)."""
    names = report_names(names)
    missing = [n for n in names if importlib.util.find_spec(MODULES[n]) is None]
    if missing:
        extras = ",".join(missing)
        raise UserError(f"{key} names {', '.join(missing)}, which is not installed",
                        fix=f"pip install 'bertcli[{extras}]', or drop it from {key}")


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{"train": {"lr": 1}} -> {"train.lr": 1}: a recipe as a tracker's flat parameters."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): obj}


def _bound(tracker: object) -> float:
    """A tracker's start/finish bound: BOUND_S, read at call time, unless the backend declares
    its own `bound_s` (the tests' stand-ins do, so that the real trackers beside them keep theirs)."""
    return float(getattr(tracker, "bound_s", BOUND_S))


def _bounded(fn: Callable[[], Any], seconds: float, what: str) -> Any:
    """fn() in a daemon thread; TimeoutError when it has not returned after `seconds`."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, name=f"bertcli-{what}", daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise TimeoutError(f"{what} took longer than {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _scalars(record: dict) -> dict[str, float]:
    """The record's finite numbers (a non-finite value is left out, as metrics.jsonl nulls it)."""
    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class _TensorBoard:
    def start(self, config: dict, run_dir: Path, state: dict, resume_step: int | None) -> dict:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step hides events a killed run wrote after the checkpoint it resumes from
        self.writer = SummaryWriter(str(run_dir / "tensorboard"),
                                    purge_step=None if resume_step is None else resume_step + 1)
        if resume_step is None:
            self.writer.add_text("recipe", "```\n" + jsonout.dumps(config, indent=1, default=str) + "\n```", 0)
        return {}

    def log(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            group = "val" if key.startswith("val_") else "train"
            self.writer.add_scalar(f"{group}/{key.removeprefix('val_')}", value, step)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()


class _Wandb:
    def start(self, config: dict, run_dir: Path, state: dict, resume_step: int | None) -> dict:
        import wandb

        offline = not os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE") == "offline"
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "bertcli"), name=config.get("name"), dir=str(run_dir),
            group=config.get("group"),
            id=state.get("id"), resume="allow" if state.get("id") else None, config=config,
            mode="offline" if offline else None, reinit="create_new",
            settings=wandb.Settings(init_timeout=BOUND_S, console="off", x_disable_stats=True, silent=True))
        return {"id": self.run.id}

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def summary(self, values: dict[str, Any]) -> None:
        self.run.summary.update(values)

    def finish(self) -> None:
        self.run.finish()


class _Mlflow:
    def start(self, config: dict, run_dir: Path, state: dict, resume_step: int | None) -> dict:
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            # MLflow 3.x refuses its file store unless this says yes; the SQLite store it defaults
            # to needs SQLAlchemy, which mlflow-skinny lacks
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (run_dir / "mlruns").absolute().as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        if state.get("run_id"):        # --resume: the same run, running again
            self.run_id = state["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return {"run_id": self.run_id}
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "bertcli")
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
        run = self.client.create_run(exp_id, run_name=config.get("name"),
                                     tags={"bertcli.output_dir": str(config.get("output_dir")),
                                           **({GROUP_TAG: str(config["group"])} if config.get("group") else {})})
        self.run_id = run.info.run_id
        params = [Param(k, str(v)[:6000]) for k, v in flatten(config).items()]
        for i in range(0, len(params), 100):          # log_batch takes at most 100 params
            self.client.log_batch(self.run_id, params=params[i:i + 100], tags=[RunTag("bertcli", "1")] if i == 0 else [])
        return {"run_id": self.run_id}

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        ms = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, ms, step) for k, v in values.items()])

    def summary(self, values: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(f"final.{k}", str(v)) for k, v in values.items()])

    def finish(self) -> None:
        self.client.set_terminated(self.run_id)


BACKENDS: dict[str, Callable[[], Any]] = {"tensorboard": _TensorBoard, "wandb": _Wandb, "mlflow": _Mlflow}


class Trackers:
    """The run's trackers. Each call goes to every live tracker; one that raises is warned about
    once and dropped. `enabled` False (not rank 0, or no trackers): every call does nothing."""

    def __init__(self, names: list[str], run_dir: Path, enabled: bool = True, resume_step: int | None = None):
        self.run_dir, self.resume_step = Path(run_dir), resume_step
        self.live: dict[str, Any] = {n: BACKENDS[n]() for n in names} if enabled else {}
        self.state: dict[str, dict] = {}
        if self.live and resume_step is not None and (self.run_dir / STATE).is_file():
            path = self.run_dir / STATE
            state = parse_json(path.read_text(encoding="utf-8"), str(path), fix=f"delete {path} to start new "
                               "tracker runs (metrics.jsonl keeps every record)")
            if not isinstance(state, dict) or not all(isinstance(v, dict) for v in state.values()):
                raise UserError("not the tracker state bertcli writes ({tracker: {run id, last step}})", where=str(path),
                                fix=f"delete {path} to start new tracker runs (metrics.jsonl keeps every record)")
            self.state = state
        # the steps the run being resumed already logged, per tracker: not logged twice
        self.logged_to = {n: int(self.state.get(n, {}).get("last_step", -1)) for n in self.live}

    def _drop(self, name: str, what: str, e: BaseException) -> None:
        self.live.pop(name, None)
        console.log(f"warning: {name} {what} failed ({type(e).__name__}: {e}); it is dropped and the run goes on "
                    "(metrics.jsonl holds every record)")

    def _save_state(self) -> None:
        write_text_atomic(self.run_dir / STATE, jsonout.dumps(self.state, indent=1) + "\n")

    def start(self, config: dict) -> None:
        for name, t in list(self.live.items()):
            try:
                ids = _bounded(functools.partial(t.start, config, self.run_dir, self.state.get(name, {}),
                                                 self.resume_step), _bound(t), f"{name} start")
                self.state[name] = {**self.state.get(name, {}), **ids}
            except Exception as e:
                self._drop(name, "start", e)
        if self.live:
            self._save_state()

    def log(self, record: dict, step: int) -> None:
        values = _scalars(record)
        logged = False
        for name, t in list(self.live.items()):
            # a killed run may have logged steps past the checkpoint it resumes from: not twice
            if name != "tensorboard" and step <= self.logged_to[name]:
                continue
            try:
                t.log(values, step)
            except Exception as e:
                self._drop(name, "logging", e)
                continue
            if name != "tensorboard":
                self.state.setdefault(name, {})["last_step"] = step
                logged = True
        if logged:
            self._save_state()

    def summary(self, values: dict[str, Any]) -> None:
        """The run's final figures (wandb summary, MLflow tags); TensorBoard has the scalars."""
        for name, t in list(self.live.items()):
            if hasattr(t, "summary"):
                try:
                    t.summary(values)
                except Exception as e:
                    self._drop(name, "summary", e)

    def finish(self) -> None:
        for name, t in list(self.live.items()):
            try:
                _bounded(t.finish, _bound(t), f"{name} finish")
            except Exception as e:
                self._drop(name, "finish", e)
        self.live.clear()

