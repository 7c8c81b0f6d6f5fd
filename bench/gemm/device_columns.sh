#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: the column kernels (issue 18). Compiles build/plans/<case> for each
# case given, validates the column-kernel plans against the reference interpreter (the diagram's
# sizes and sizes no vector or split divides), runs compute-sanitizer memcheck, racecheck and
# synccheck on column_statistics, profiles normalised linear attention's kernels (ncu), and times
# the cases with bench/gemm/run.py against PyTorch eager and torch.compile in one process.
#   bash bench/gemm/device_columns.sh CASE...        (build/plans from bench/gemm/build_plans.sh)
# Carried: build/plans, build/devbin, build/cutlass.tar.xz. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/build/devbin/napkin PYTHONUNBUFFERED=1
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass -lineinfo"
cases="$*"
for c in $cases; do ls build/plans/$c/kernel*.cu; done | xargs -P 16 -I{} sh -c "nvcc $flags -c {} -o {}.o > {}.log 2>&1 || echo 'FAILED {}'"
for c in $cases; do nvcc -shared -gencode=arch=compute_90a,code=sm_90a build/plans/$c/kernel*.cu.o -o build/plans/$c/libkernel.so || echo "LINK FAILED $c"; done
check() {  # diagram library [--check-set ...]
  local diagram=$1 lib=$2; shift 2
  echo "$(basename $diagram) $*: $(timeout 300 $NAPKIN_BIN run $diagram --machine h100-sxm5 --library $lib --iters 0 "$@" 2>&1 | grep -E 'validation: |error' | cut -c1-220 | tr '\n' ' ')"
}
{
  N=examples/normalised_linear_attention.napkin; NL=build/plans/normalised_linear_attention/libkernel.so
  check $N $NL
  check $N $NL --check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100
  C=tests/diagrams/column_statistics.napkin; CL=build/plans/column_statistics/libkernel.so
  check $C $CL
  check $C $CL --check-set t=1001 --check-set c=24
  check $C $CL --check-set t=77 --check-set c=3
  check $C $CL --check-set t=100000 --check-set c=40
  [ -f build/plans/column_variance/libkernel.so ] && check tests/diagrams/column_variance.napkin build/plans/column_variance/libkernel.so --check-set t=5003 --check-set c=1000
  for c in linear_attention feature_projection; do
    d=examples/$c.napkin; [ -f $d ] || d=tests/diagrams/$c.napkin
    [ -f build/plans/$c/libkernel.so ] && check $d build/plans/$c/libkernel.so
  done
} | tee $OUT/validation.txt
for tool in memcheck racecheck synccheck; do
  timeout 200 compute-sanitizer --tool $tool $NAPKIN_BIN run tests/diagrams/column_statistics.napkin --machine h100-sxm5 --library build/plans/column_statistics/libkernel.so --iters 0 --check-set t=5000 --check-set c=40 > $OUT/san_$tool.log 2>&1
  echo "column_statistics $tool $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log)"
  timeout 200 compute-sanitizer --tool $tool $NAPKIN_BIN run examples/normalised_linear_attention.napkin --machine h100-sxm5 --library build/plans/normalised_linear_attention/libkernel.so --iters 0 --check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100 > $OUT/san_nla_$tool.log 2>&1
  echo "normalised_linear_attention $tool $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_nla_$tool.log)"
done | tee $OUT/san.txt
# Per kernel at full size: the plan's launches in run.py's first call (validation), before torch's.
timeout 200 ncu --section SpeedOfLight --kernel-name-base function -k regex:"^(elementwise_kernel|prologue_gemm_kernel|column_kernel|row_kernel|device_kernel)$" --launch-count 6 python3 bench/gemm/run.py --kernels build/plans --cases normalised_linear_attention --reps 1 > $OUT/ncu_nla.txt 2>&1
grep -E '^  [a-zA-Z_].*\(|Duration|DRAM Throughput' $OUT/ncu_nla.txt | awk '/\(/ {printf "\n%s ", substr($0,3,70)} !/\(/ {printf "%s %s ", $1, $NF}' | tee $OUT/ncu.txt; echo
py_cases=$(echo $cases | tr ' ' '\n' | grep -v -E '^column_statistics$|^column_variance$' | paste -sd,)
timeout 400 python3 bench/gemm/run.py --kernels build/plans --cases $py_cases --compile --reps 50 --out $OUT/gemm.jsonl 2>&1 | tail -8 | tee $OUT/bench.txt
