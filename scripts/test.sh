#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the test suite. This is what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# One pytest process per core, at most 4 (pytest-xdist): run serially the suite keeps 1.3 of 2 cores busy,
# the rest is spent waiting on the torchrun ranks it starts. GMP_TEST_PROCESSES=1 runs it in one process.
n="${GMP_TEST_PROCESSES:-$(python -c 'import os
cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
print(min(4, cpus))')}"
if [ "$n" -le 1 ]; then n=0; fi  # 0: pytest-xdist starts no worker processes
python -m pytest -q -n "$n" "$@"
