#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: compile each configuration of the sweep (16 in parallel) against
# the carried CuTe/CUTLASS headers (build/cutlass), link with cuBLAS, run. Logs under $OUT.
#   [SWEEP_CONFIGS="a j"] [SWEEP_SHAPES=name:m:n:k,...] bench/gemm/sweep/device_sweep.sh [reps]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")"
B=/tmp/sweep; mkdir -p $B
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xcompiler=-fPIC -diag-suppress=177 -I../../../runtime/include -I../../../build/cutlass"
# name tm tn tk cm cn pingpong
configs="a 128 256 64 1 1 0
b 128 256 64 2 1 0
c 128 256 64 1 2 0
d 256 128 64 1 2 0
e 256 128 64 2 1 0
f 128 128 64 1 2 1
g 128 128 64 2 1 1
h 128 128 64 2 1 0
i 64 256 64 1 2 1
j 128 192 64 2 1 0"
# SWEEP_CONFIGS="a j": only these configurations; SWEEP_SHAPES (main.cu): other shapes.
[ -n "${SWEEP_CONFIGS:-}" ] && configs=$(echo "$configs" | grep -E "^($(echo $SWEEP_CONFIGS | tr ' ' '|')) ")
t0=$(date +%s)
echo "$configs" | xargs -P 16 -L 1 sh -c 'nvcc '"$flags"' -DSWEEP_TM=$1 -DSWEEP_TN=$2 -DSWEEP_TK=$3 -DSWEEP_CM=$4 -DSWEEP_CN=$5 -DSWEEP_PINGPONG=$6 -c config.cu -o '$B'/cfg_$0.o > '$B'/cfg_$0.log 2>&1 || echo "FAILED $0: $(head -5 '$B'/cfg_$0.log)"'
nvcc $flags -c main.cu -o $B/main.o || exit 1
nvcc -gencode=arch=compute_90a,code=sm_90a $B/*.o -lcublas -o $B/sweep || exit 1
echo "compiled in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
$B/sweep "$OUT/sweep.jsonl" "${1:-15}" 2>&1 | tee "$OUT/sweep.log"
