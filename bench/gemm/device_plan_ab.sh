#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: two plans of one diagram, A/B. Compiles DIR_A/<case> and
# DIR_B/<case> (napkin build --no-compile output), validates each against the reference
# interpreter at the diagram's sizes and at SETS (no tile divides), runs compute-sanitizer memcheck
# on B, and times both with `napkin run --library` (median of 100 launches, L2 not flushed).
#   bash bench/gemm/device_plan_ab.sh DIAGRAM DIR_A DIR_B "--check-set k=1000 ..."
# A plan is run by DIR/napkin where present (the napkin that derived it: `napkin run` checks that
# the library's plan is the one its planner derives), else build/devbin/napkin.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-}
diagram=$1; a=$2; b=$3; sets=${4:-}; case=$(basename $diagram .napkin)
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass"
ls $a/$case/kernel*.cu $b/$case/kernel*.cu | xargs -P 16 -I{} sh -c "nvcc $flags -c {} -o {}.o > {}.log 2>&1 || echo 'FAILED {}'"
for d in $a $b; do nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/$case/kernel*.cu.o -o $d/$case/libkernel.so || echo "LINK FAILED $d"; done
bin() { [ -x $1/napkin ] && echo $1/napkin || echo build/devbin/napkin; }
for d in $a $b; do
  for s in "" "$sets"; do
    timeout 120 $(bin $d) run $diagram --machine h100-sxm5 --library $d/$case/libkernel.so --iters 0 $s 2>&1 | grep -E "validation: [a-z]=|error" | cut -c1-150
  done
done
timeout 200 compute-sanitizer --tool memcheck $(bin $b) run $diagram --machine h100-sxm5 --library $b/$case/libkernel.so --iters 0 $sets > $OUT/san_plan_ab.log 2>&1; echo "memcheck $b: $(grep -E 'ERROR SUMMARY' $OUT/san_plan_ab.log)"
for r in 1 2; do for d in $a $b; do
  echo "$d: $(timeout 120 $(bin $d) run $diagram --machine h100-sxm5 --library $d/$case/libkernel.so --iters 100 2>&1 | grep -E '^timed' | cut -c1-150)"
done; done
