"""Points where a test can hold a running bertcli process, so that it signals or kills it at a
place the test chooses instead of racing it with sleeps.

`BERTCLI_TEST_PAUSE=NAME` makes the process stop at the pause point called NAME (e.g.
`train-step-13`: before training step 13; `build-tokenizer`: inside the tokenizer stage's
temporary directory, holding its lock). There it writes its PID into the file named by
`BERTCLI_TEST_PAUSED_FILE` (temp name + rename, so the test never reads half a file) and waits
until `until()` is true (e.g. a signal arrived), the file named by `BERTCLI_TEST_RELEASE_FILE`
exists, or the process is killed. Unset, a pause point
costs one dictionary look-up. Nothing in normal use sets these variables.

`BERTCLI_TEST_STOP=NAME` ends the command at the stop point called NAME, with exit code
STOP_EXIT and one line on stderr, instead of doing its work: `validated` (a command's flags
parsed and checked, before its body runs) and `recipe` (the recipe loaded with every --set
checked, and the paths it writes checked). A test of values follows an accepted value that far,
not through the whole job.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

PAUSE_ENV = "BERTCLI_TEST_PAUSE"
PAUSED_FILE_ENV = "BERTCLI_TEST_PAUSED_FILE"
RELEASE_FILE_ENV = "BERTCLI_TEST_RELEASE_FILE"
STOP_ENV = "BERTCLI_TEST_STOP"
STOP_EXIT = 97          # no exit code of bertcli's own (0, 1, 2, 128 + a signal)


def pause_point(name: str, until: Callable[[], bool] | None = None) -> None:
    """Hold here when the test asked to (see the module docstring); return at once otherwise."""
    if os.environ.get(PAUSE_ENV) != name:
        return
    marker = os.environ.get(PAUSED_FILE_ENV)
    if marker:
        tmp = Path(f"{marker}.tmp-{os.getpid()}")
        tmp.write_text(f"{os.getpid()}\n", encoding="utf-8")
        os.replace(tmp, marker)
    # Polling, not a timing assumption: the wait lasts as long as the test wants. A signal
    # handler that raises (SIGINT -> KeyboardInterrupt) interrupts the sleep.
    release = os.environ.get(RELEASE_FILE_ENV)
    while not (until is not None and until()) and not (release and os.path.exists(release)):
        time.sleep(0.02)


def stop_point(name: str) -> None:
    """End the process here (SystemExit(STOP_EXIT)) when the test asked to; return otherwise."""
    if os.environ.get(STOP_ENV) == name:
        sys.stderr.write(f"bertcli: test stop at {name}\n")
        raise SystemExit(STOP_EXIT)
