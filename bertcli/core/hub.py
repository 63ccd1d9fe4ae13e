"""`datasets.load_dataset` for hub names, failing at once when the Hub cannot be reached.

Without offline mode `datasets` retries an unreachable Hub for about half a minute before it
gives up; every `--hub` option and `format: hub` corpus source goes through here instead, so all
of them fail in under a second with one message.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any
from urllib.parse import urlparse

from bertcli.core.errors import UserError


def check_reachable(name: str, where: str, timeout: float = 5.0) -> None:
    """Raise a UserError at once when `name` needs the Hub and the Hub's host does not answer."""
    import datasets

    if datasets.config.HF_HUB_OFFLINE or os.path.exists(name):
        return  # offline, load_dataset fails at once when the dataset is not cached; local needs no hub
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with contextlib.closing(socket.create_connection((host, port), timeout=timeout)):
            pass
    except OSError as e:
        raise UserError(
            f"cannot reach {host} to load the `datasets` dataset {name!r} ({e})", where=where,
            fix="connect to the network; if the dataset is in your local cache, run with "
                "HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1; or use local files")


def load_hub(name: str, config: str | None = None, split: str | None = None, where: str = "",
             local_hint: str = "use local files") -> Any:
    """`datasets.load_dataset(name, config, split=split)` with one clear message on failure."""
    import datasets

    check_reachable(name, where)
    try:
        return datasets.load_dataset(name, config, split=split)
    except Exception as e:  # offline, unknown name, missing config: all the user's to fix
        offline = datasets.config.HF_HUB_OFFLINE
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(
            f"cannot load the `datasets` dataset {name!r}" + (f" (configuration {config!r})" if config else "")
            + f": {first}", where=where,
            fix=("offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) and the dataset is not in the local "
                 f"cache: download it once with network access, or {local_hint}" if offline
                 else f"check the name, configuration and split; or {local_hint}"))
