"""One torchrun worker of tests/test_finetune_ddp*.py: runs `bertcli ARGV...` (the command first:
`finetune ...`, `distill ...`) for each argv in the JSON file given, in this process (one process
group for all of them), and exits with the first non-zero code."""

from __future__ import annotations

import json
import sys

from bertcli.cli import main

if __name__ == "__main__":
    for argv in json.loads(open(sys.argv[1]).read()):
        try:
            main(argv)
        except SystemExit as e:       # click exits 0 after a command too
            if e.code not in (0, None):
                raise
