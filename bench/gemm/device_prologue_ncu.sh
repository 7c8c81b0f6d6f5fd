#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ncu's full set for the prologue GEMMs of one variant under build/pv2 (compiled by
# device_prologue_ab.sh in the same session, or here): stall reasons, occupancy, memory.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
v=${1:-q22}; case=${CASE:-linear_attention}
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass -lineinfo"
d=build/pv2/$v/$case
if [ ! -f $d/libkernel.so ]; then
  ls $d/kernel*.cu | xargs -P 4 -I{} sh -c "nvcc $flags -c {} -o {}.o"
  nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so
fi
timeout 300 ncu --set full -k regex:prologue --launch-count 2 --export $OUT/full_$v python3 bench/gemm/run.py --kernels build/pv2/$v --cases $case --reps 1 > $OUT/ncu_full_$v.log 2>&1
ncu --import $OUT/full_$v.ncu-rep --page details --print-units base > $OUT/full_$v.txt 2>&1
grep -E "^  [a-z_]*prologue|Duration|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|Executed Ipc Active|Registers Per|L2 Hit Rate|Stall|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued" $OUT/full_$v.txt | sed -E 's/ +/ /g' | cut -c1-140 | head -60
