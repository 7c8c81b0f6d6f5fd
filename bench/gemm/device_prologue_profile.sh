#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: the prologue-GEMM plans under build/plans (those whose units include
# napkin/gemm_prologue.h), compiled; their GPU plan tests (against the reference interpreter at odd
# sizes); ncu's full set of each prologue GEMM of the profiled cases (stalls, occupancy, memory);
# bench/gemm/run.py's times of those cases (napkin and eager, one process).
#   bash bench/gemm/device_prologue_profile.sh "PROFILED_CASE..."
# Carried: build/plans, build/devbin, build/cutlass.tar.xz. Logs under $OUT.
source bench/gemm/device_lib.sh
dirs=$(grep -l "napkin/gemm_prologue.h" build/plans/*/kernel*.cu | xargs -n1 dirname | sort -u)
t0=$(date +%s)
compile_plans $dirs
echo "compiled $(echo $dirs | wc -w) plans in $(( $(date +%s) - t0 )) s"
names=$(for d in $dirs; do basename $d; done | paste -sd' ')
sel=$(for n in $names; do echo -n "$n or "; done | sed 's/ or $//')
NAPKIN_KERNELS=build/plans timeout 300 python3 -m pytest -q -rfE tests/gpu/test_plans.py -p no:cacheprovider -k "$sel" 2>&1 | tail -6 | tee $OUT/test_plans.txt
for c in $1; do
  timeout 300 ncu --set full --kernel-name-base function -k regex:"^prologue_gemm_kernel$" --launch-count 2 --export $OUT/full_$c \
    python3 bench/gemm/run.py --kernels build/plans --cases $c --reps 1 > $OUT/ncu_full_$c.log 2>&1
  ncu --import $OUT/full_$c.ncu-rep --page details --print-units base > $OUT/full_$c.txt 2>&1
  echo "== $c"
  grep -E "^  prologue|Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|Executed Instructions  " $OUT/full_$c.txt | sed -E 's/ +/ /g' | cut -c1-120
done | tee $OUT/ncu_summary.txt
timeout 300 python3 bench/gemm/run.py --kernels build/plans --cases $(echo $1 | tr ' ' ',') --reps 50 --out $OUT/gemm.jsonl 2>&1 | tail -6 | tee $OUT/bench.txt
