#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: GPU tests, then the benchmark. Expects the kernel library built
# on the host (cmake -B build/cuda -DNAPKIN_CUDA=ON; carried: build/cuda/lib and
# build/cuda/runtime/sanitize_attention). Logs and the JSON lines go to $OUT.
#   bench/attention/device_run.sh [tests|bench|all] [extra run.py args...]
set -uo pipefail
what=${1:-all}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
# Build the kernel library here when asked (16 cores; the host has 2): NAPKIN_DEVICE_BUILD=1,
# with the CuTe headers carried in .cutlass/include. ptxas resource reports go to $OUT.
if [[ ${NAPKIN_DEVICE_BUILD:-0} == 1 ]]; then
  t0=$(date +%s)
  BUILD_SANITIZER=1 JOBS=8 bench/attention/build_kernels.sh runtime build/cuda "$OUT/ptxas.log" || exit 1
  echo "device build: $(( $(date +%s) - t0 )) s"; grep -E "spill|Used" "$OUT/ptxas.log" | sort | uniq -c
fi
# Build the binding once (small; the kernels are in the carried library).
python3 -c "import sys; sys.path.insert(0, 'python'); import napkin_attention as n; n._load(); print('binding built')" 2>&1 | tail -20
if [[ $what == tests || $what == all ]]; then
  timeout 400 python3 -m pytest -q -rA tests/gpu -p no:cacheprovider 2>&1 | tee "$OUT/tests.log" | tail -40
fi
if [[ $what == bench || $what == all ]]; then
  python3 bench/attention/run.py --out "$OUT/attention.jsonl" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v "^  INVALID" | tail -90
  grep "INVALID" "$OUT/bench.log" | head -20
fi
