#!/usr/bin/env bash
# Create .venv (if missing) and install gmp with its test extras into it: the dev extra, the
# peers extra's CPU packages and TorchRec (for examples/torchrec_train.py and the export tests).
# torch is pinned to the CPU wheel 2.13.0 first so pip does not pull a CUDA build.
#
# Quiet when nothing changed: a stamp in .venv records the hash of pyproject.toml and of this
# script; when it matches and gmp, torch and torchrec are installed, nothing is installed or printed
# (found, not imported: importing torch and torchrec alone takes seconds).
# Otherwise one line is printed and pip's output goes to .venv/setup.log (shown on failure).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
STAMP=.venv/.gmp-setup-stamp
LOG=.venv/setup.log
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ -x .venv/bin/python ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ] \
    && .venv/bin/python -c "import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ('gmp', 'torch', 'torchrec')))" >/dev/null 2>&1; then
  exit 0
fi
echo "setup: installing gmp and its test extras into .venv (pip's output: $LOG)"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
rm -f "$STAMP"
: > "$LOG"
step() {  # run a pip step with its output in the log; on failure show the log's end and stop
  if ! "$@" >> "$LOG" 2>&1; then
    echo "setup: failed: $*" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
}
python -m pip install -q --upgrade pip >> "$LOG" 2>&1 || true
python -c "import torch" 2>/dev/null || step python -m pip install -q "torch==2.13.0"
step python -m pip install -q -e ".[dev,peers]"
# torchrec 1.8.0 declares the CUDA fbgemm-gpu; the peers extra brings its CPU build, so no deps here
python -c "import torchrec" 2>/dev/null || step python -m pip install -q --no-deps "torchrec==1.8.0"
step python -c "import gmp, torch, torchrec"
echo "$want" > "$STAMP"
