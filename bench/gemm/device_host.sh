#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU call: the host time of a generated GEMM's call, from C++ (the sweep binary's "host"
# mode over its configurations) and from Python (host_overhead.py on build/plans/llama3_o_1024).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass"
d=build/plans/llama3_o_1024
(for f in $d/kernel*.cu; do nvcc $flags -c $f -o $f.o & done; wait; nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so) > "$OUT/plan_build.log" 2>&1 &
B=/tmp/sweep; mkdir -p $B
(cd bench/gemm/sweep && nvcc $flags -I../../../runtime/include -I../../../build/cutlass -DSWEEP_TM=128 -DSWEEP_TN=256 -DSWEEP_TK=64 -DSWEEP_CM=1 -DSWEEP_CN=1 -DSWEEP_PINGPONG=0 -c config.cu -o $B/cfg.o && nvcc $flags -I../../../runtime/include -c main.cu -o $B/main.o && nvcc -gencode=arch=compute_90a,code=sm_90a $B/main.o $B/cfg.o -lcublas -o $B/sweep) > "$OUT/sweep_build.log" 2>&1
wait
tail -3 "$OUT/plan_build.log" "$OUT/sweep_build.log"
$B/sweep /tmp/x.jsonl 1 host
PYTHONUNBUFFERED=1 python3 bench/gemm/host_overhead.py $d
