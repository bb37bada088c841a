#!/usr/bin/env bash
# Run every GPU path of gmp that exists and print what was checked (issue 12).
#   bash scripts/gpu_smoke.sh            # from the repository root, venv active or .venv present
# Checks, each against a result computed independently on the same GPU:
#   1. tiers library: a CUDA RowCache over a pinned HostRows master and over a DiskRows master
#      (non-blocking copies on a side stream, events) == a plain CUDA table, bit for bit
#   2. gmp train, local engine on cuda:0: --table-location host/disk (pinned master, CUDA cache,
#      look-ahead thread) == --table-location device (a CUDA store), bit for bit, SGD and Adagrad;
#      and --schedule herald with its copies of remote rows held in the same CUDA device cache as the
#      tiered rows (the cache tensor grows on the device) == Herald on the CUDA store
#   3. gmp.comm's distributed engine with NCCL: all-to-all with uneven splits (and empty ones)
#      between all local GPUs (1 GPU: a world of 1), the asynchronous start_alltoallv, the dense all-reduce
#   4. gmp train --engine distributed under torchrun with NCCL, device vs disk tier: same log
# Exits 0 with "no GPU: nothing checked" where torch sees no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "no GPU: nothing checked (torch.cuda.is_available() is False)"
    exit 0
fi
NGPU=$(python -c "import torch; print(torch.cuda.device_count())")
echo "GPUs: $NGPU ($(python -c 'import torch; print(torch.cuda.get_device_name(0))'))"
python scripts/gpu_smoke.py single
torchrun --standalone --nproc-per-node "$NGPU" scripts/gpu_smoke.py nccl
python scripts/gpu_smoke.py dist-train "$NGPU"
echo "gpu_smoke: all checks passed"
