#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run gmp's main job on the built-in default
# dataset: generate it (deterministic synthetic Criteo-like data), print its
# graph statistics, partition it with HET-GMP's hybrid partitioner against the
# baselines, write the placement manifest + quality report, and train a
# Wide & Deep model from the manifest on 4 simulated workers. Ends with the paths to open.
# Setup is silent when nothing changed (scripts/setup.sh); training's per-epoch JSON records go to
# $OUT/train.jsonl, not to the terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
OUT="${GMP_DEMO_OUT:-runs/demo}"
DATA="data/generated/criteo-synth-200k"
mkdir -p "$OUT"
if [ ! -f "$DATA/dataset.json" ]; then
  gmp data synth --preset criteo-kaggle --scale 0.01 --samples 200000 --seed 0 --out "$DATA"
fi
gmp data info "$DATA"
gmp compare "$DATA" --workers 4 --methods random,greedy-stream,metis,hybrid --batch-size 512 --out "$OUT/compare.md" --overwrite
gmp partition "$DATA" --workers 4 --method hybrid --batch-size 512 --seed 0 --out "$OUT/manifest-hybrid" --overwrite
gmp report "$OUT/manifest-hybrid" --format html >/dev/null   # writes report.html beside report.md
gmp train "$DATA" --manifest "$OUT/manifest-hybrid" --workers 4 --engine local --model wdl \
  --schedule static --epochs 1 --batch-size 512 --log-json "$OUT/train.jsonl" | { grep -v '^{' || true; }
echo
echo "Open:"
echo "  $OUT/manifest-hybrid/report.html   the hybrid placement's quality report (also report.md)"
echo "  $OUT/compare.md                     the partitioners side by side"
echo "  $OUT/train.jsonl                    the training run's settings, then one JSON line per epoch"
echo "Next, your own data: README.md, \"Your own data\"."
