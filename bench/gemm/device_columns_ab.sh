#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: an A/B of variants of the same plans, in one process.
# build/pv2/<variant>/<case>/ holds napkin build --no-compile output (edited by hand for the
# variant: a Config, a split count); a variant with its own include/ (e.g. `git archive <rev>
# runtime/include`) compiles against it. The first variant (alphabetical) is the base: validated
# (napkin run at sizes no tile divides) and compute-sanitizer racecheck/synccheck on
# normalised_linear_attention where present; then run.py times every variant's cases.
# Carried: build/pv2, build/devbin, build/cutlass.tar.xz. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/build/devbin/napkin PYTHONUNBUFFERED=1
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass"
ls build/pv2/*/*/kernel*.cu | xargs -P 16 -I{} sh -c 'v=$(dirname $(dirname {})); inc=""; [ -d $v/include ] && inc="-I$v/include"; nvcc $inc '"$flags"' -c {} -o {}.o > {}.log 2>&1 || echo "FAILED {}"'
for d in build/pv2/*/*/; do [ "$(basename $d)" = include ] || nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so || echo "LINK FAILED $d"; done
variants=$(ls build/pv2); base=$(echo $variants | cut -d' ' -f1)
cases=$(ls build/pv2/$base | grep -v include | paste -sd,)
N=normalised_linear_attention
if [ -d build/pv2/$base/$N ]; then
  timeout 100 $NAPKIN_BIN run examples/$N.napkin --machine h100-sxm5 --library build/pv2/$base/$N/libkernel.so --iters 0 --check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100 2>&1 | grep -E "validation: b|error" | cut -c1-200
  for tool in racecheck synccheck; do
    timeout 100 compute-sanitizer --tool $tool $NAPKIN_BIN run examples/$N.napkin --machine h100-sxm5 --library build/pv2/$base/$N/libkernel.so --iters 0 > $OUT/$tool.log 2>&1; echo "$tool $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log)"
  done
fi
C=column_statistics
if [ -d build/pv2/$base/$C ]; then
  timeout 100 $NAPKIN_BIN run tests/diagrams/$C.napkin --machine h100-sxm5 --library build/pv2/$base/$C/libkernel.so --iters 0 --check-set t=100000 --check-set c=40 2>&1 | grep -E "validation \(|error" | cut -c1-160
  for tool in memcheck racecheck synccheck; do
    timeout 100 compute-sanitizer --tool $tool $NAPKIN_BIN run tests/diagrams/$C.napkin --machine h100-sxm5 --library build/pv2/$base/$C/libkernel.so --iters 0 --check-set t=100000 --check-set c=40 > $OUT/${C}_$tool.log 2>&1; echo "$C $tool $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/${C}_$tool.log)"
  done
fi
also=""; for v in $variants; do [ $v = $base ] || also="$also --also $v=build/pv2/$v"; done
timeout 300 python3 bench/gemm/run.py --kernels build/pv2/$base $also --cases $cases --reps 50 --out $OUT/ab.jsonl 2>&1 | tail -4
