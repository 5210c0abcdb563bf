#!/usr/bin/env bash
# Prints what soma-worker's DetectResources reports on this machine: CPUs,
# memory and the GPUs NVML sees (after CUDA_VISIBLE_DEVICES), loading the
# real libnvidia-ml.so.1 the way the worker does. Run it once on a GPU
# machine and copy the output into the README's GPU section.
#   bash scripts/nvml-check.sh            # what the node offers
#   CUDA_VISIBLE_DEVICES=0 bash scripts/nvml-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
echo "## nvidia-smi (for comparison)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.free,utilization.gpu --format=csv
else
  echo "(nvidia-smi not on PATH)"
fi
echo "## soma DetectResources"
# -Wno-deprecated-declarations: go-nvml's nvml.h marks functions soma never
# calls as deprecated; the warnings are noise.
SOMA_NVML_CHECK=1 CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" \
  go test -count=1 -v -run '^TestNVMLCheck$' ./worker/ 2>&1 | grep -v '^=== RUN'
