#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: compile the generated kernels that `napkin build --no-compile`
# wrote under build/gen/<example>/kernel.cu (16 cores; carried: build/gen, .cutlass with the
# CuTe headers, .devbin with a napkin binary for the reference), then run the GPU tests of the
# generated kernels. Logs go to $OUT.
#   bench/attention/device_generated.sh [tests|none] [pytest -k expression]
set -uo pipefail
what=${1:-tests}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/.devbin/napkin NAPKIN_KERNELS=$PWD/build/gen
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
"$NAPKIN_BIN" machines >/dev/null 2>&1 && echo "napkin binary runs here" || echo "napkin binary does not run here: $("$NAPKIN_BIN" machines 2>&1 | head -2)"
t0=$(date +%s)
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills -Xcompiler=-fPIC -shared -diag-suppress=177 -Iruntime/include -I.cutlass/include"
ls -d build/gen/*/ | xargs -P 16 -I{} sh -c "nvcc $flags {}kernel.cu -o {}libkernel.so > {}nvcc.log 2>&1 || echo 'FAILED {}'"
echo "compiled $(ls build/gen/*/libkernel.so | wc -l) kernels in $(( $(date +%s) - t0 )) s"
grep -l -E "spill|C75" build/gen/*/nvcc.log && grep -h -E "spill|C75" build/gen/*/nvcc.log | head
cat build/gen/*/nvcc.log | grep -i error | head
if [[ $what == tests ]]; then
  timeout 500 python3 -m pytest -q -rA tests/gpu/test_generated.py -p no:cacheprovider ${1:+-k "$1"} 2>&1 | tee "$OUT/tests.log" | tail -60
fi
