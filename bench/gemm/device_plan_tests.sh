#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: compile every plan under build/plans (napkin build --no-compile of
# tests/gpu/test_plans.py's EXAMPLES; 16 cores) and run those GPU tests (each plan against the
# reference interpreter at odd sizes). Carried: build/plans, build/devbin, build/cutlass.tar.xz.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/build/devbin/napkin PYTHONUNBUFFERED=1
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass"
t0=$(date +%s)
ls build/plans/*/kernel*.cu | xargs -P 16 -I{} sh -c "nvcc $flags -c {} -o {}.o > {}.log 2>&1 || echo 'FAILED {}'"
for d in build/plans/*/; do nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so 2> $d/link.log || echo "LINK FAILED $d"; done
echo "compiled in $(( $(date +%s) - t0 )) s"
NAPKIN_KERNELS=build/plans timeout 300 python3 -m pytest -q -rfE tests/gpu/test_plans.py -p no:cacheprovider 2>&1 | tail -8 | tee $OUT/test_plans.txt
