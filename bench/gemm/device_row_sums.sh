#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: the prologue GEMM's row sums (issue 18). Compiles build/plans/<case>
# for each case given, validates normalised linear attention and tests/diagrams/feature_sums against
# the reference interpreter (their sizes and sizes no tile divides; a plan dir named after another
# diagram is given as DIR=DIAGRAM), runs compute-sanitizer memcheck, racecheck and synccheck on
# both, profiles normalised linear attention's kernels (ncu), times `napkin run --library` for the
# extra pairs, and bench/gemm/run.py's cases against PyTorch eager and torch.compile in one process.
#   bash bench/gemm/device_row_sums.sh "CASE..." "DIR=DIAGRAM..." "RUNPY_CASE,..."
# SKIP_CHECKS=1 skips the validation and the sanitizers (a second call on what passed them).
# Carried: build/plans, build/devbin, build/cutlass.tar.xz. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/build/devbin/napkin PYTHONUNBUFFERED=1
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass -lineinfo"
cases="$1"; pairs="$2"; py_cases="$3"
for c in $cases; do ls build/plans/$c/kernel*.cu; done | xargs -P 16 -I{} sh -c "nvcc $flags -c {} -o {}.o > {}.log 2>&1 || { echo 'FAILED {}'; cat {}.log | head -20; }"
for c in $cases; do nvcc -shared -gencode=arch=compute_90a,code=sm_90a build/plans/$c/kernel*.cu.o -o build/plans/$c/libkernel.so || echo "LINK FAILED $c"; done
N=examples/normalised_linear_attention.napkin; F=tests/diagrams/feature_sums.napkin
check() {  # diagram library [--check-set ...]
  local diagram=$1 lib=$2; shift 2
  echo "$(basename $diagram) $(basename $(dirname $lib)) $*: $(timeout 300 $NAPKIN_BIN run $diagram --machine h100-sxm5 --library $lib --iters 0 "$@" 2>&1 | grep -E 'validation: |error' | cut -c1-220 | tr '\n' ' ')"
}
[ -n "${SKIP_CHECKS:-}" ] || {
  for dir in normalised_linear_attention nla128; do
    check $N build/plans/$dir/libkernel.so
    check $N build/plans/$dir/libkernel.so --check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100
  done
  for dir in feature_sums fs128; do
    check $F build/plans/$dir/libkernel.so
    check $F build/plans/$dir/libkernel.so --check-set t=77 --check-set d=40
    check $F build/plans/$dir/libkernel.so --check-set t=3001 --check-set d=200 --check-set e=72
  done
} | tee $OUT/validation.txt
[ -n "${SKIP_CHECKS:-}" ] || for tool in memcheck racecheck synccheck; do
  timeout 200 compute-sanitizer --tool $tool $NAPKIN_BIN run $N --machine h100-sxm5 --library build/plans/normalised_linear_attention/libkernel.so --iters 0 --check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100 > $OUT/san_nla_$tool.log 2>&1
  echo "normalised_linear_attention $tool $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_nla_$tool.log)"
  timeout 200 compute-sanitizer --tool $tool $NAPKIN_BIN run $F --machine h100-sxm5 --library build/plans/fs128/libkernel.so --iters 0 --check-set t=3001 --check-set d=200 > $OUT/san_fs_$tool.log 2>&1
  echo "feature_sums (128-row tiles) $tool $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_fs_$tool.log)"
done | tee $OUT/san.txt
for pair in $pairs; do
  dir=${pair%%=*}; d=${pair#*=}
  for r in 1 2; do echo "$dir: $(timeout 120 $NAPKIN_BIN run $d --machine h100-sxm5 --library build/plans/$dir/libkernel.so --iters 30 2>&1 | grep -E 'timed|error' | cut -c1-200)"; done
done | tee $OUT/pairs.txt
timeout 200 ncu --section SpeedOfLight --kernel-name-base function -k regex:"^(prologue_gemm_kernel)$" --launch-count 2 python3 bench/gemm/run.py --kernels build/plans --cases normalised_linear_attention --reps 1 > $OUT/ncu_nla.txt 2>&1
grep -E '^  [a-zA-Z_].*\(|Duration|DRAM Throughput' $OUT/ncu_nla.txt | awk '/\(/ {printf "\n%s ", substr($0,3,70)} !/\(/ {printf "%s %s ", $1, $NF}' | tee $OUT/ncu.txt; echo
timeout 400 python3 bench/gemm/run.py --kernels build/plans --cases $py_cases --compile --reps 50 --out $OUT/gemm.jsonl 2>&1 | tail -8 | tee $OUT/bench.txt
