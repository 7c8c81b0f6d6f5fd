#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Validation of the other prologue-GEMM plans under build/plans (feature_projection: exp(x/8) W;
# elu: elu(x)+1 W, a select) at sizes no tile divides, after device_prologue_ab.sh in the same call.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-}
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass"
for pair in feature_projection:tests/diagrams/feature_projection.napkin elu:build/plans/elu.napkin; do
  c=${pair%%:*}; f=${pair#*:}; d=build/plans/$c
  ls $d/kernel*.cu | xargs -P 4 -I{} sh -c "nvcc $flags -c {} -o {}.o"
  nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so
  for t in "" "--check-set t=1000" "--check-set t=8"; do
    timeout 120 build/devbin/napkin run $f --machine h100-sxm5 --library $d/libkernel.so --iters 20 $t 2>&1 | grep -E "validation: t|timed|measured|error" | cut -c1-170
  done
  timeout 120 compute-sanitizer --tool memcheck build/devbin/napkin run $f --machine h100-sxm5 --library $d/libkernel.so --iters 0 --check-set t=1000 > $OUT/san_$c.log 2>&1; echo "$c memcheck $(grep -E 'ERROR SUMMARY' $OUT/san_$c.log)"
done 2>&1 | tee $OUT/more.txt
