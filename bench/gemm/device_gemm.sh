#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine for the GEMM-family plans: compile every translation unit that
# `napkin build --no-compile` wrote under build/plans/<case>/ (bench/gemm/build_plans.sh, run
# here first; 16 cores in parallel), link each case's libkernel.so, then
#   validate  napkin run --library: the reference interpreter at free sizes no tile divides, then
#             the diagram's sizes timed beside the prediction
#   bench     bench/gemm/run.py: against cuBLAS, PyTorch eager and torch.compile, validated first
# Carried: build/plans, build/cutlass (CuTe/CUTLASS headers), build/devbin (napkin and its
# libraries). Logs go to $OUT.   bench/gemm/device_gemm.sh "validate bench" [run.py args...]
set -uo pipefail
what=${1:-"validate bench"}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# The CuTe/CUTLASS headers may travel compressed (build/cutlass.tar.xz: 1 MB for 27 MB).
[[ -d build/cutlass || ! -f build/cutlass.tar.xz ]] || tar -xJf build/cutlass.tar.xz -C build
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/build/devbin/napkin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass"
ls build/plans/*/kernel*.cu | xargs -P 16 -I{} sh -c "test -f {}.o || nvcc $flags -c {} -o {}.o > {}.log 2>&1 || echo 'FAILED {}'"
for d in build/plans/*/; do
  nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so 2> $d/link.log || echo "LINK FAILED $d"
done
echo "plans compiled in $(( $(date +%s) - t0 )) s: $(ls build/plans/*/libkernel.so | wc -l) libraries"
cat build/plans/*/*.log | grep -E "error|spill" | sort | uniq -c | head -20 | tee "$OUT/nvcc_errors.txt"
if [[ $what == *validate* ]]; then
  python3 bench/gemm/cases.py | while read -r name path sets; do
    d=build/plans/$name; [ -f $d/libkernel.so ] || continue
    [ -n "${VALIDATE:-}" ] && ! echo " $VALIDATE " | grep -q " $name " && continue
    args=""; for s in $sets; do args="$args --set $s"; done
    timeout 60 $NAPKIN_BIN run $path --machine h100-sxm5 --library $d/libkernel.so --iters 20 $args > "$OUT/run_$name.log" 2>&1
    echo "$name exit $? $(grep -E 'validation|timed' "$OUT/run_$name.log" | sed -E 's/.*(relative L2 error [0-9.e-]+).*(ok|FAILED).*/\1 \2/; s/.*median of [0-9]+ launches/  measured/' | tr '\n' ' ')"
  done | tee "$OUT/validate.txt"
fi
if [[ $what == *bench* ]]; then
  timeout ${BENCH_TIMEOUT:-540} python3 bench/gemm/run.py --kernels build/plans --out "$OUT/gemm.jsonl" "$@" 2>&1 | tee "$OUT/bench.log" | tail -40
fi
