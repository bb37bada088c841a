#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the test suite. This is what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python -m pytest -q "$@"
