#!/usr/bin/env bash
# The GPU checks, as one bounded script for a machine with one CUDA device (CI has none).
#
#   bash bench/gpu_check.sh [OUT_DIR]
#
# 0. scripts/gpu_smoke.sh (the CUDA tier, Herald-cache and NCCL paths, bit for bit),
# 1. the training, tier and migration tests with the local engine's workers on cuda:0
#    (gmp.comm.local picks cuda:0 when CUDA is present; the torchrun tests keep gloo on the
#    CPU, since NCCL refuses two ranks on one GPU),
# 2. `gmp train` on the GPU, deterministic (the default) and GMP_DETERMINISTIC=0, against the
#    same command on the CPU (same AUC to rounding),
# 3. `gmp train --engine distributed` under torchrun with the NCCL backend (one rank),
# 4. the tiered-table bench (bench/tiered_bench.py): host and disk tables behind a device
#    cache fed by the look-ahead prefetcher (pinned staging, side-stream copies), against
#    the whole table on the device.
# 6. gmp (a world of 1 and 4 local workers) against the plain-PyTorch reference trainer
#    (bench/gpu_reference.py, bench/peers/reference.py): one generated dataset, DCN 512-256-128, dim 64,
#    global batch 16,384, SGD, one epoch, GMP_DETERMINISTIC=0 and =1, 2 interleaved rounds, and one gmp
#    run on the CPU cores; samples/s and test AUC in one table (issue 33). About 8 minutes; it stops
#    starting runs at its budget and prints the table of those done.
# Each part has its own time limit; a part that fails does not stop the others.
# GMP_GPU_CHECK_SAMPLES (default 500000) sizes the generated dataset of parts 1-5.
# GMP_GPU_CHECK_ONLY=reference runs the environment and part 6 alone (bash bench/gpu_check.sh OUT);
# GMP_GPU_CHECK_TINY=1 shrinks part 6 to a logic check of seconds of training (it runs on a CPU too).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/gpu-check}"
mkdir -p "$OUT"
N="${GMP_GPU_CHECK_SAMPLES:-500000}"
DATA="data/bench/gpu-check-$N"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
GMP=("$PY" -m cli.main)
# under torchrun the console script (torchrun --no-python gmp ...: a folder named gmp in the working
# directory cannot shadow the package), importing this checkout; the module where none is installed
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if command -v gmp >/dev/null 2>&1; then TORCHRUN_GMP=(--no-python gmp); else TORCHRUN_GMP=(-m cli.main); fi
part() { echo; echo "=== $1 ($(date +%T))"; }

part "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
"$PY" -c "import torch, numba, numpy; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
 torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-', 'numba', numba.__version__, 'numpy', numpy.__version__)"

reference_part() {
  part "6. gmp (world 1, 4 local workers) vs the plain-PyTorch reference: DCN 512-256-128, dim 64, batch 16,384"
  local size=()
  [ "${GMP_GPU_CHECK_TINY:-0}" = 1 ] && size=(--tiny)
  timeout 480 "$PY" bench/gpu_reference.py --out "$OUT/reference" --budget 440 --timeout 150 --cpu-run "${size[@]}" \
    2> "$OUT/reference.log" | tee "$OUT/reference.md"
  grep -v '^\$ ' "$OUT/reference.log" | tail -12
}
if [ "${GMP_GPU_CHECK_ONLY:-}" = reference ]; then
  reference_part
  part "done"
  exit 0
fi

part "0. scripts/gpu_smoke.sh"
timeout 200 bash scripts/gpu_smoke.sh 2>&1 | tail -15

part "1. tests on cuda:0"
GMP_DIST_BACKEND=gloo timeout 240 "$PY" -m pytest -q -p no:cacheprovider ${GMP_GPU_CHECK_XDIST:--n 8} \
  tests/test_tiers.py tests/test_train_tiers.py tests/test_train_equivalence.py tests/test_train_consistency.py \
  tests/test_train_unique.py tests/test_train_schedule.py tests/test_herald_train.py tests/test_cache.py \
  tests/test_migrate.py tests/test_train_cli.py tests/test_train_distributed.py 2>&1 | tee "$OUT/pytest.log" | tail -40

part "2. data + manifests"
[ -f "$DATA/dataset.json" ] || timeout 240 "${GMP[@]}" data synth --preset criteo-kaggle --samples "$N" --scale 0.1 \
  --seed 0 --out "$DATA"
for w in 1 4; do
  timeout 120 "${GMP[@]}" partition "$DATA" --workers $w --method hybrid --batch-size 512 --seed 0 \
    --out "$OUT/manifest-$w" --overwrite >/dev/null || echo "partition --workers $w failed"
done

part "3. gmp train, GPU (deterministic, not) vs CPU (4 local workers, 1 epoch)"
train() {  # $1 = log name; rest = extra flags
  local name=$1; shift
  local TIMEFORMAT="$name: %R s wall"
  time (timeout 200 "${GMP[@]}" train "$DATA" --manifest "$OUT/manifest-4" --workers 4 --engine local --model wdl \
    --epochs 1 --batch-size 512 --seed 0 --log-json "$OUT/$name.jsonl" "$@" 2>&1 | tail -3)
}
train gpu
GMP_DETERMINISTIC=0 train gpu-nondeterministic
train gpu-s2 --staleness 2
CUDA_VISIBLE_DEVICES= train cpu

part "4. torchrun, NCCL, one rank"
timeout 200 torchrun --nnodes 1 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29517 \
  "${TORCHRUN_GMP[@]}" train "$DATA" --manifest "$OUT/manifest-1" --workers 1 --engine distributed --model wdl \
  --epochs 1 --batch-size 512 --seed 0 --log-json "$OUT/nccl.jsonl" 2>&1 | tail -6

part "5. tiered tables on the GPU"
timeout 300 "$PY" bench/tiered_bench.py --data "$DATA" --steps 300 --repeats 3 --threads 8 \
  --only host:10:0,host:10:8,host:10:64,disk:10:8,disk:10:64 --tier-dir "$OUT/tiers" --out "$OUT/tiers.json" 2>&1 | tail -20
rm -rf "$OUT/tiers"

reference_part
part "done"
