#!/bin/bash
# The README's two quickstart lines on a busy machine, as a newcomer meets them: a fresh clone of
# this repository, a fresh venv, and N CPU-bound jobs (default: 2 per core) running beside them.
#
#   scripts/busy_quickstart.sh [WORKDIR] [JOBS] [LINES]   (WORKDIR default: /tmp/bertcli-busy;
#                                                          LINES: 12 both (default), 1 or 2 alone)
#
# Prints each line's install and run times, and writes WORKDIR/loadavg.log (the load every 30 s)
# and WORKDIR/quickstart.log (everything the two lines print). Start it from a terminal or with
# `setsid`; a background job of a non-interactive shell starts with SIGINT ignored, which the
# suite undoes for its own processes (tests/conftest.py), but other tools may not.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/bertcli-busy}
jobs=${2:-$((2 * $(nproc)))}
lines=${3:-12}
if [ -e "$work" ]; then echo "$work exists: give a new directory" >&2; exit 2; fi
mkdir -p "$work"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; }
trap cleanup EXIT
for _ in $(seq "$jobs"); do (while :; do :; done) & pids+=($!); done
(while :; do echo "$(date +%T) $(cat /proc/loadavg)"; sleep 30; done) > "$work/loadavg.log" & pids+=($!)
echo "$jobs busy jobs started; waiting 2 minutes for the 1-minute load to reach them"
sleep 120
git clone -q "$repo" "$work/clone" && python -m venv "$work/venv" || exit 1
cd "$work/clone" && . "$work/venv/bin/activate"
unset BERTCLI_TEST_PRETRAINED OMP_NUM_THREADS
line() {   # line NAME INSTALL RUN: both timed, in this order
    local s i e
    s=$(date +%s)
    eval "$2" || return 1
    i=$(date +%s)
    eval "$3"
    local rc=$?
    e=$(date +%s)
    echo "$1: rc=$rc install=$((i - s))s run=$((e - i))s total=$((e - s))s load at the end: $(cat /proc/loadavg)"
}
{
    case $lines in *1*) line "first line (pretrain)" "pip install -q torch==2.13.0 -e ." "bertcli pretrain --recipe bert-tiny";; esac
    case $lines in *2*) line "second line (tests)" "pip install -q torch==2.13.0 -e '.[test]'" "python -m pytest -q -n 2 --dist loadfile";; esac
} 2>&1 | tee "$work/quickstart.log" | grep -E "^(first|second) line"
