#!/usr/bin/env bash
# The linter and the type checker, as CI runs them (configured in pyproject.toml). Both must pass clean.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m ruff check bertcli tests scripts
python -m mypy bertcli
