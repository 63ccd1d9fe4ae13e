#!/usr/bin/env bash
# The GPU check of issue 23: one JSON line per check, under 8 minutes on one GPU, no network,
# from this repository alone (see scripts/gpu_check.py for the checks and the MFU rule).
#
#   scripts/gpu_check.sh           # on a machine with one CUDA GPU
#   scripts/gpu_check.sh --cpu     # dry mode: tiny shapes, a few steps (tests/test_gpu_check.py)
#
# PYTHON=... picks the interpreter (default: .venv/bin/python when there is one, else python3).
# Exit status 1 when a check failed or did not fit the time budget.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# the checks budget themselves to 450 s; the hard stop is a guard against a hang
exec timeout --signal=TERM 470 "$PYTHON" scripts/gpu_check.py "$@"
