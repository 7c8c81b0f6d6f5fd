#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine for the prologue GEMM's plans: compile build/plans/<case> (the
# chosen plans: linear_attention, feature_projection) and build/pv2/base/<case> (another build
# to A/B against, e.g. the plan that materialises the feature maps), validate (napkin run at sizes
# no tile divides, tests/gpu/test_plans.py), run compute-sanitizer, and time both in one process
# with bench/gemm/run.py. Carried: build/plans, build/pv2, build/devbin, build/cutlass.tar.xz.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/build/devbin/napkin PYTHONUNBUFFERED=1
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass"
ls build/plans/*/kernel*.cu build/pv2/*/*/kernel*.cu | xargs -P 16 -I{} sh -c "nvcc $flags -c {} -o {}.o > {}.log 2>&1 || echo 'FAILED {}'"
for d in build/plans/*/ build/pv2/*/*/; do nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so 2> $d/link.log || echo "LINK FAILED $d"; done
cat build/plans/*/*.log | grep -E "error|spill" | head
odd_linear="--check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=4100"
san_linear="--check-set b=1 --check-set h=2 --check-set q=197 --check-set k=1000"
odd_feature="--check-set t=1000"; san_feature="--check-set t=333"
for c in "examples/linear_attention.napkin linear_attention linear" "tests/diagrams/feature_projection.napkin feature_projection feature"; do
  set -- $c
  odd=odd_$3; san=san_$3
  for sets in "" "${!odd}"; do
    timeout 120 $NAPKIN_BIN run $1 --machine h100-sxm5 --library build/plans/$2/libkernel.so --iters 20 $sets 2>&1 | grep -E "validation: [a-z]=|timed|error" | cut -c1-170
  done
  for tool in memcheck racecheck synccheck; do
    timeout 120 compute-sanitizer --tool $tool $NAPKIN_BIN run $1 --machine h100-sxm5 --library build/plans/$2/libkernel.so --iters 0 ${!san} > $OUT/san_${2}_$tool.log 2>&1; echo "$2 $tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_${2}_$tool.log)"
  done
done 2>&1 | tee $OUT/validate.txt
NAPKIN_KERNELS=build/plans timeout 200 python3 -m pytest -q tests/gpu/test_plans.py -k "linear_attention or feature_projection" 2>&1 | tail -3 | tee $OUT/pytest.txt
timeout 300 python3 bench/gemm/run.py --kernels build/plans --cases linear_attention --also base=build/pv2/base --compile --reps 50 --out $OUT/gemm.jsonl 2>&1 | tail -3 | tee $OUT/bench.txt
