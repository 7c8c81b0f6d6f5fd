#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: an A/B of two runtimes on the same column-kernel plans, in one
# process. build/pv2/<variant>/<case>/ holds napkin build --no-compile output; a variant with its
# own include/ (e.g. `git archive <rev> runtime/include`) compiles against it. Validates and
# sanitises the first variant, profiles the column kernels (ncu), times both with run.py.
# Carried: build/pv2, build/devbin, build/cutlass.tar.xz. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/build/devbin/napkin PYTHONUNBUFFERED=1
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass"
ls build/pv2/*/*/kernel*.cu | xargs -P 16 -I{} sh -c 'v=$(dirname $(dirname {})); inc=""; [ -d $v/include ] && inc="-I$v/include"; nvcc $inc '"$flags"' -c {} -o {}.o > {}.log 2>&1 || echo "FAILED {}"'
for d in build/pv2/*/*/; do nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so || echo "LINK FAILED $d"; done
for c in normalised_linear_attention; do timeout 100 $NAPKIN_BIN run examples/$c.napkin --machine h100-sxm5 --library build/pv2/tree/$c/libkernel.so --iters 0 --check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100 2>&1 | grep -E "validation: b|error" | cut -c1-200; done
timeout 100 compute-sanitizer --tool racecheck $NAPKIN_BIN run examples/normalised_linear_attention.napkin --machine h100-sxm5 --library build/pv2/tree/normalised_linear_attention/libkernel.so --iters 0 > $OUT/race.log 2>&1; grep -E "RACECHECK SUMMARY" $OUT/race.log
timeout 100 compute-sanitizer --tool synccheck $NAPKIN_BIN run examples/normalised_linear_attention.napkin --machine h100-sxm5 --library build/pv2/tree/normalised_linear_attention/libkernel.so --iters 0 > $OUT/sync.log 2>&1; grep -E "ERROR SUMMARY" $OUT/sync.log
timeout 200 ncu --section SpeedOfLight --kernel-name-base function -k regex:"^column_kernel$" --launch-count 2 python3 bench/gemm/run.py --kernels build/pv2/tree --cases normalised_linear_attention --also serial=build/pv2/serial --reps 1 > $OUT/ncu.txt 2>&1; grep -E "Duration|DRAM Through" $OUT/ncu.txt
timeout 300 python3 bench/gemm/run.py --kernels build/pv2/tree --also serial=build/pv2/serial --cases normalised_linear_attention,column_variance_c512,column_variance_c4096 --reps 50 --out $OUT/ab.jsonl 2>&1 | tail -4
